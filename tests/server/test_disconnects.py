"""Client disconnects cancel their streams; 50 concurrent streams with random disconnects all end cleanly."""

from __future__ import annotations

import asyncio
import random

import numpy as np

TEXT = "Hello world, this is a test."


async def _wait_idle(engine, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while engine.active_streams() or engine.stats()["running_streams"]:
        assert asyncio.get_running_loop().time() < deadline, engine.stats()
        await asyncio.sleep(0.01)


async def test_disconnect_mid_stream_cancels_the_stream(serve) -> None:
    srv = await serve(max_streams=1)
    body = {"text": TEXT, "speaker": "serena", "max_frames": 400, "packet_frames": 1}
    resp = await srv.session.post(f"{srv.base}/tts/stream", json=body)
    assert resp.status == 200
    request_id = resp.headers["x-request-id"]
    await resp.content.readexactly(1920 * 2 * 2)
    resp.close()  # drop the connection mid-body
    await _wait_idle(srv.engine)
    stats = srv.engine.stats()
    assert stats["streams_cancelled"] == 1 and stats["frames_generated"] < 100
    summary = await (await srv.session.get(f"{srv.base}/v1/requests/{request_id}")).json()
    assert summary["status"] == "client_disconnected"
    assert summary["stream_final"] and summary["stream"]["frames"] == stats["frames_generated"]  # exact, not a snapshot
    async with srv.session.post(f"{srv.base}/tts/stream", json={**body, "max_frames": 3}) as again:
        assert again.status == 200 and len(await again.read()) == 3 * 1920 * 2


async def test_a_cancelled_long_text_counts_every_frame_it_made(serve) -> None:
    # a long text runs as consecutive segments; the summary used to count only the segments that had finished, so a
    # client that left mid-segment saw fewer frames than the audio it had received
    from tests.server.test_long_text_http import TEXT_2000

    srv = await serve()
    body = {"text": TEXT_2000, "speaker": "serena", "max_frames": 6, "packet_frames": 1}
    resp = await srv.session.post(f"{srv.base}/tts/stream", json=body)
    assert resp.status == 200
    request_id = resp.headers["x-request-id"]
    received = len(await resp.content.readexactly(8 * 1920 * 2))  # into the second segment
    resp.close()
    await _wait_idle(srv.engine)
    summary = await (await srv.session.get(f"{srv.base}/v1/requests/{request_id}")).json()
    generated = srv.engine.stats()["frames_generated"]
    assert summary["status"] == "client_disconnected" and summary["stream_final"]
    assert summary["stream"]["frames"] == generated >= received // (1920 * 2), (summary["stream"], generated)
    assert summary["stream"]["status"] == "cancelled"


async def test_fifty_concurrent_streams_with_random_disconnects(serve) -> None:
    srv = await serve(max_streams=64)
    rng = random.Random(1234)
    speakers = srv.engine.speakers
    expected_full: dict[int, int] = {}

    async def client(i: int) -> str:
        frames = rng.randint(2, 10)
        drop_after = rng.choice([None, None, 0, 1, 2])  # chunks to read before hanging up (None = read all)
        body = {"text": f"Sentence number {i}.", "speaker": speakers[i % len(speakers)], "max_frames": frames}
        resp = await srv.session.post(f"{srv.base}/tts/stream", json=body)
        assert resp.status == 200, await resp.text()
        if drop_after is None:
            data = await resp.read()
            assert len(data) == frames * 1920 * 2
            expected_full[i] = frames
            return "full"
        for _ in range(drop_after):
            if not await resp.content.readany():
                break
        resp.close()
        return "dropped"

    outcomes = await asyncio.gather(*(client(i) for i in range(50)))
    assert outcomes.count("full") + outcomes.count("dropped") == 50
    assert outcomes.count("dropped") > 5
    await _wait_idle(srv.engine)
    stats = srv.engine.stats()
    assert stats["streams_started"] == 50
    assert stats["streams_cancelled"] >= 1, "no disconnect reached the engine before its stream ended"
    assert stats["streams_completed"] + stats["streams_cancelled"] == 50
    assert stats["streams_failed"] == 0 and stats["worker_errors"] == 0
    async with srv.session.get(f"{srv.base}/healthz") as resp:
        assert resp.status == 200 and (await resp.json())["open_streams"] == 0
    expected = await srv.engine.synthesize("After the storm.", "serena", max_frames=3)
    async with srv.session.post(
        f"{srv.base}/tts/stream", json={"text": "After the storm.", "speaker": "serena", "max_frames": 3}
    ) as resp:
        assert np.frombuffer(await resp.read(), dtype="<i2").tobytes() == expected.tobytes()
