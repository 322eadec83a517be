"""Any length over HTTP: a 2,000-character mixed Chinese/English/number text is one request and one continuous
audio stream through /tts/stream and /synthesize (the engine cuts it at sentence boundaries)."""

from __future__ import annotations

import numpy as np

from tts_engine.runtime.wav import read_wav

MIXED = (
    "第1章：系统在2024年3月15日上线，处理了1,234,567次请求，平均延迟是3.14毫秒。"
    "The server at https://api.example.com/v1.2/speech handled 99.9% of calls; Dr. Lee said: \"It works.\" "
    "然后我们测试了长文本（包括数字12:30和URL）。Everything was fine! 接下来呢？"
)
TEXT_2000 = (MIXED * 12)[:2000]


async def test_2000_characters_in_one_request_on_both_routes(serve) -> None:
    srv = await serve()
    segments = len(srv.engine.segments(TEXT_2000))
    assert segments > 10
    expected = await srv.engine.synthesize(TEXT_2000, "serena", max_frames=1)
    assert len(expected) == segments * 1920
    body = {"text": TEXT_2000, "speaker": "serena", "max_frames": 1}
    async with srv.session.post(f"{srv.base}/tts/stream", json=body) as resp:
        assert resp.status == 200, await resp.text()
        request_id = resp.headers["x-request-id"]
        streamed = np.frombuffer(await resp.read(), dtype="<i2")
    assert streamed.tobytes() == expected.tobytes()
    async with srv.session.get(f"{srv.base}/v1/requests/{request_id}") as resp:
        summary = await resp.json()
    assert summary["status"] == "completed" and summary["stream"]["frames"] == segments
    assert summary["stream"]["packets"] == segments and summary["stream"]["text_chars"] == 2000
    async with srv.session.post(f"{srv.base}/synthesize", json=body) as resp:
        assert resp.status == 200
        pcm, rate = read_wav(await resp.read())
    assert rate == 24000 and pcm.tobytes() == expected.tobytes()
    assert srv.engine.active_streams() == 0


async def test_past_the_cap_is_413_naming_cap_and_variable(serve) -> None:
    srv = await serve(max_text_chars=1000)
    async with srv.session.post(f"{srv.base}/tts/stream", json={"text": TEXT_2000, "speaker": "serena"}) as resp:
        assert resp.status == 413
        error = await resp.json()
    assert error["field"] == "text"
    assert "at most 1000" in error["error"] and "TTS_DEEP_STREAM_MAX_TEXT_CHARS" in error["error"]
