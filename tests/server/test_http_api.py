"""HTTP API over a real socket: streaming PCM, WAV, speakers, health, metrics, summaries, every bad input."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from common import loop_watch
from tts_engine.runtime.wav import read_wav

TEXT = "Hello world, this is a test."


async def test_stream_sends_raw_pcm_with_headers_and_a_summary(serve) -> None:
    srv = await serve()
    expected = await srv.engine.synthesize(TEXT, "serena", max_frames=7)
    body = {"text": TEXT, "speaker": "serena", "packet_frames": 3, "max_frames": 7}
    async with srv.session.post(f"{srv.base}/tts/stream", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["x-sample-rate"] == "24000"
        assert resp.headers["content-type"] == "application/octet-stream"
        request_id = resp.headers["x-request-id"]
        chunks = [chunk async for chunk in resp.content.iter_any()]
    pcm = np.frombuffer(b"".join(chunks), dtype="<i2")
    assert pcm.tobytes() == expected.tobytes()
    async with srv.session.get(f"{srv.base}/v1/requests/{request_id}") as resp:
        summary = await resp.json()
    assert summary["status"] == "completed" and summary["bytes_sent"] == pcm.nbytes
    assert summary["stream"]["frames"] == 7 and summary["stream"]["packets"] == 3
    assert summary["ttfa_ms"] > 0 and summary["stream"]["rtf"] > 0


async def test_client_request_id_is_kept(serve) -> None:
    srv = await serve()
    body = {"text": TEXT, "speaker": "ryan", "max_frames": 2}
    headers = {"x-request-id": "call-42.turn-3"}
    async with srv.session.post(f"{srv.base}/tts/stream", json=body, headers=headers) as resp:
        await resp.read()
        assert resp.headers["x-request-id"] == "call-42.turn-3"
    async with srv.session.get(f"{srv.base}/v1/requests/call-42.turn-3") as resp:
        assert resp.status == 200
    async with srv.session.get(f"{srv.base}/v1/requests/nope") as resp:
        assert resp.status == 404 and (await resp.json())["field"] == "request_id"


async def test_synthesize_returns_the_same_audio_as_a_wav(serve) -> None:
    srv = await serve()
    body = {"text": TEXT, "speaker": "sohee", "language": "english", "max_frames": 5}
    async with srv.session.post(f"{srv.base}/synthesize", json=body) as resp:
        assert resp.status == 200 and resp.content_type == "audio/wav"
        wav = await resp.read()
    pcm, rate = read_wav(wav)
    assert rate == 24000
    assert pcm.tobytes() == (await srv.engine.synthesize(TEXT, "sohee", "english", max_frames=5)).tobytes()


async def test_speakers_health_and_metrics(serve) -> None:
    srv = await serve()
    async with srv.session.get(f"{srv.base}/v1/speakers") as resp:
        listing = await resp.json()
    assert "serena" in listing["speakers"] and listing["languages"][0] == "auto"
    async with srv.session.post(
        f"{srv.base}/tts/stream", json={"text": TEXT, "speaker": "serena", "max_frames": 2}
    ) as r:
        await r.read()
    async with srv.session.get(f"{srv.base}/healthz") as resp:
        health = await resp.json()
        assert resp.status == 200 and health["status"] == "ok" and health["capacity"] == 16
    async with srv.session.get(f"{srv.base}/metrics") as resp:
        text = await resp.text()
    assert "tts_engine_streams_started_total 1.0" in text
    assert "tts_stream_ttfa_seconds_count 1.0" in text
    assert 'tts_http_requests_total{endpoint="stream",status="200"} 1.0' in text


async def test_a_stall_of_the_server_loop_is_logged_and_shown_in_health(serve, monkeypatch, caplog) -> None:
    """The server's loop (here the test's own) blocked for 0.5 s: its probe logs the stall with its cause once the
    loop runs again, and /healthz lists it; the server serves on."""
    monkeypatch.setattr(loop_watch, "STALL_LOG_S", 0.3)
    caplog.set_level("WARNING", logger="common.loop_watch")
    srv = await serve()
    await asyncio.sleep(0.1)
    time.sleep(0.5)  # blocks the loop the server runs on
    await asyncio.sleep(0.4)  # the probe logs two pause-clock ticks after the loop ran again
    async with srv.session.get(f"{srv.base}/healthz") as resp:
        health = await resp.json()
    assert resp.status == 200 and health["status"] == "ok"
    [stall] = health["loop_stalls"]
    assert stall["loop"] == "engine server" and stall["cause"] == "waiting" and 0.35 <= stall["seconds"] <= 0.5
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("event loop stalled: the engine server loop ran nothing") for m in logged), logged


BAD_INPUTS = [
    (b"{not json", "body"),
    (b"[1, 2]", "body"),
    (b"", "body"),
    (b'{"speaker": "serena"}', "text"),
    (b'{"text": "hi"}', "speaker"),
    (b'{"text": "", "speaker": "serena"}', "text"),
    (b'{"text": "   ", "speaker": "serena"}', "text"),
    (b'{"text": "\\ud83d\\ude42\\ud83d\\ude42 !?", "speaker": "serena"}', "text"),  # emoji and punctuation only
    (b'{"text": "...", "speaker": "serena"}', "text"),
    (b'{"text": 5, "speaker": "serena"}', "text"),
    (b'{"text": "hi", "speaker": "nobody"}', "speaker"),
    (b'{"text": "hi", "speaker": 3}', "speaker"),
    (b'{"text": "hi", "speaker": "serena", "language": "klingon"}', "language"),
    (b'{"text": "hi", "speaker": "serena", "packet_frames": 0}', "packet_frames"),
    (b'{"text": "hi", "speaker": "serena", "packet_frames": "2"}', "packet_frames"),
    (b'{"text": "hi", "speaker": "serena", "first_packet_frames": 65}', "first_packet_frames"),
    (b'{"text": "hi", "speaker": "serena", "seed": -1}', "seed"),
    (b'{"text": "hi", "speaker": "serena", "max_frames": 0}', "max_frames"),
    (b'{"text": "hi", "speaker": "serena", "volume": 3}', "volume"),
    (b'{"text": "hi", "speaker": "serena", "instruct": 1}', "instruct"),
]


@pytest.mark.parametrize("endpoint", ["/tts/stream", "/synthesize"])
async def test_every_bad_input_is_a_400_naming_the_field(serve, endpoint: str) -> None:
    srv = await serve(max_text_chars=50)
    for raw, field in BAD_INPUTS:
        async with srv.session.post(
            f"{srv.base}{endpoint}", data=raw, headers={"content-type": "application/json"}
        ) as r:
            assert r.status == 400, (raw, r.status, await r.text())
            error = await r.json()
            assert error["field"] == field, (raw, error)
            assert error["error"]
    async with srv.session.post(f"{srv.base}{endpoint}", json={"text": "a" * 51, "speaker": "serena"}) as r:
        assert r.status == 413, "past the per-request cap (TTS_DEEP_STREAM_MAX_TEXT_CHARS) is 413"
        error = await r.json()
        assert error["field"] == "text" and "TTS_DEEP_STREAM_MAX_TEXT_CHARS" in error["error"]
        assert "at most 50" in error["error"]
    unknown = await (await srv.session.post(f"{srv.base}{endpoint}", json={"text": "x", "speaker": "bob"})).json()
    assert "serena" in unknown["error"], "the error should list the valid speakers"
    async with srv.session.post(
        f"{srv.base}{endpoint}", json={"text": TEXT, "speaker": "serena", "max_frames": 2}
    ) as r:
        assert r.status == 200 and len(await r.read()) > 0
    assert srv.engine.stats()["streams_failed"] == 0


async def test_too_many_streams_is_a_503_with_retry_after(serve) -> None:
    srv = await serve(max_streams=1, queue_limit=0)
    body = {"text": TEXT, "speaker": "serena", "max_frames": 400}
    async with srv.session.post(f"{srv.base}/tts/stream", json=body) as first:
        assert first.status == 200
        await first.content.readany()
        async with srv.session.post(f"{srv.base}/tts/stream", json=body) as second:
            assert second.status == 503
            assert second.headers["Retry-After"] == "1"
            assert "busy" in (await second.json())["error"]
        async with srv.session.post(f"{srv.base}/synthesize", json=body) as third:
            assert third.status == 503


async def test_oversized_body_is_413_and_engine_faults_are_500(serve) -> None:
    srv = await serve()
    huge = b'{"text": "' + b"a" * (1 << 20) + b'", "speaker": "serena"}'
    async with srv.session.post(f"{srv.base}/tts/stream", data=huge) as resp:
        assert resp.status == 413 and (await resp.json())["field"] == "body"

    original = srv.engine.codegen.step

    def broken(n_rows: int):
        raise RuntimeError("injected device fault")

    srv.engine.codegen.step = broken
    try:
        async with srv.session.post(f"{srv.base}/tts/stream", json={"text": TEXT, "speaker": "serena"}) as resp:
            assert resp.status == 500 and "injected device fault" in (await resp.json())["error"]
    finally:
        srv.engine.codegen.step = original
    async with srv.session.post(
        f"{srv.base}/tts/stream", json={"text": TEXT, "speaker": "serena", "max_frames": 2}
    ) as r:
        assert r.status == 200 and len(await r.read()) == 2 * 1920 * 2
