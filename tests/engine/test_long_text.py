"""Any length: a text too long for one stream's KV positions is cut at sentence boundaries inside the engine and
spoken as ONE stream (continuous packet indices, each segment's audio exactly as the model makes it); text pushed
in pieces goes the same way, and a stream whose text runs dry takes no GPU step."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError
from tts_engine.runtime.chained import ChainedStream
from tts_engine.text.segment import StreamSegmenter

from .helpers import collect, wait_until

MIXED = (
    "第1章：系统在2024年3月15日上线，处理了1,234,567次请求，平均延迟是3.14毫秒。"
    "The server at https://api.example.com/v1.2/speech handled 99.9% of calls; Dr. Lee said: \"It works.\" "
    "然后我们测试了长文本（包括数字12:30和URL）。Everything was fine! 接下来呢？"
)
TEXT_2000 = (MIXED * 12)[:2000]


async def test_2000_mixed_characters_are_one_continuous_stream(shared_engine) -> None:
    engine = shared_engine
    pieces = engine._fitter.split(TEXT_2000)
    assert len(pieces) > 10 and all(engine._fitter.count(p) <= engine._fitter.limit(None) for p in pieces)
    with pytest.raises(TTSInputError, match="prompt positions"):  # what one stream would say
        engine.codegen.prepare(TEXT_2000, "serena", "auto")
    handle = engine.stream(TEXT_2000, "serena", max_frames=2, packet_frames=1)
    assert isinstance(handle, ChainedStream)
    pcm, packets = await collect(handle)
    assert [p.index for p in packets] == list(range(len(packets)))
    assert len(packets) == 2 * len(pieces) and len(pcm) == 2 * len(pieces) * 1920
    assert handle.metrics.status == "completed" and handle.metrics.frames == 2 * len(pieces)
    assert handle.metrics.samples == len(pcm) and handle.metrics.ttfa_ms > 0
    assert handle.codes().shape == (2 * len(pieces), 16)
    # nothing inserted or dropped: the segments' own audio back to back, and offline == streaming
    alone = [await engine.synthesize(piece, "serena", max_frames=2) for piece in pieces]
    assert pcm.tobytes() == np.concatenate(alone).tobytes()
    assert (await engine.synthesize(TEXT_2000, "serena", max_frames=2)).tobytes() == pcm.tobytes()
    assert engine.active_streams() == 0


async def test_long_text_without_a_frame_cap_is_spoken_whole(make_engine) -> None:
    engine = make_engine(max_positions=128)  # 21 text tokens per stream: three sentences need three segments
    text = "Hello there, my friend. It is a fine day today. We will go out soon."
    with pytest.raises(TTSInputError, match="too long for one stream"):
        engine.codegen.prepare(text, "ryan", "auto")
    pieces = engine._fitter.split(text)
    assert pieces == ["Hello there, my friend.", "It is a fine day today.", "We will go out soon."]
    pcm, packets = await collect(engine.stream(text, "ryan", packet_frames=4))
    alone = [await engine.synthesize(piece, "ryan") for piece in pieces]
    assert pcm.tobytes() == np.concatenate(alone).tobytes()
    assert [p.index for p in packets] == list(range(len(packets)))


async def test_over_the_cap_names_the_variable(make_engine) -> None:
    engine = make_engine(max_text_chars=100)
    with pytest.raises(TextTooLongError, match="TTS_DEEP_STREAM_MAX_TEXT_CHARS"):
        engine.stream("a" * 101, "serena")
    stream = engine.open_text_stream("serena")
    stream.push("b" * 60)
    with pytest.raises(TextTooLongError, match="at most 100"):
        stream.push("c" * 41)
    stream.cancel()


async def test_a_long_text_holds_one_reservation_and_cancel_gives_it_back(make_engine) -> None:
    engine = make_engine(max_streams=1, queue_limit=0)
    handle = engine.stream(TEXT_2000, "serena", max_frames=3)
    with pytest.raises(EngineBusyError):
        engine.stream("Hi.", "serena")
    first = await handle.__anext__()
    assert first.index == 0
    await handle.aclose()
    gc.collect()
    await wait_until(lambda: engine.stats()["running_streams"] == 0)
    assert engine.active_streams() == 0
    assert len(await engine.synthesize("Hi.", "serena", max_frames=2)) == 2 * 1920


async def test_pushed_text_waits_without_steps_and_matches_its_segments(shared_engine) -> None:
    engine = shared_engine
    text = "你好，我是你的语音助手。今天天气很好！We can talk about 3.14 later. Bye."
    expected_segments: list[str] = []
    segmenter = StreamSegmenter()
    for i in range(0, len(text), 4):
        expected_segments += segmenter.push(text[i : i + 4])
    expected_segments += segmenter.flush()
    stream = engine.open_text_stream("vivian", max_frames=2)
    packets: list = []

    async def consume() -> None:
        async for packet in stream:
            packets.append(packet)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    idle = engine.stats()["frames_generated"]
    for i in range(0, len(text), 4):
        stream.push(text[i : i + 4])
        await asyncio.sleep(0)
    await wait_until(lambda: len(packets) >= 2 * (len(expected_segments) - 1))
    steps = engine.stats()["frames_generated"]
    await asyncio.sleep(0.3)  # the text ran dry (its last segment waits for more text or close): no GPU steps
    assert engine.stats()["frames_generated"] == steps > idle
    assert engine.scheduler.running_count == 0 and not task.done()
    stream.close()
    await asyncio.wait_for(task, 30)
    assert [p.index for p in packets] == list(range(2 * len(expected_segments)))
    alone = [await engine.synthesize(s, "vivian", max_frames=2) for s in expected_segments]
    assert np.concatenate([p.pcm for p in packets]).tobytes() == np.concatenate(alone).tobytes()
    with pytest.raises(RuntimeError, match="after close"):
        stream.push("more")
