"""The server's bounds in time and share: a client that stops reading is cut after the idle timeout and its slot
freed (HTTP chunked, OpenAI speech, WebSocket); one client cannot hold more than its share (429 + Retry-After in the
route's error shape); and the target of issue 29: 32 stalled readers + 100 well-behaved clients, every well-behaved
request served."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from tests.server.slow_clients import session_from, stalled_websocket
from tts_engine.server.config import ServerConfig

IDLE_S = 0.5
FRAME_BYTES = 1920 * 2
SLACK_S = 1.0  # event-loop latency allowed past the idle timeout on a busy 2-core machine
LONG = "This sentence is long enough to be spoken for a good while, and nobody is listening to it at all."


async def _summary(srv: Any, request_id: str) -> dict[str, Any]:
    async with srv.session.get(f"{srv.base}/v1/requests/{request_id}") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _until(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_stalled_openai_reader_is_cut_and_frees_the_only_slot(serve) -> None:
    # issue 29: with capacity 1, one stalled /v1/audio/speech reader made every other request 503 for 120 s
    srv = await serve(server=ServerConfig(idle_timeout_s=IDLE_S, client_max_streams=0), send_buffer=4096,
                      max_streams=1, queue_limit=0)
    srv.engine.stream = _capped(srv.engine.stream, 400)
    stalled = session_from("127.0.1.1", stalls=True)
    try:
        body = {"model": "tts-1", "voice": "serena", "input": LONG, "response_format": "pcm"}
        resp = await stalled.post(f"{srv.base}/v1/audio/speech", json=body)  # headers only: then it reads nothing
        assert resp.status == 200
        request_id = resp.headers["x-request-id"]
        async with srv.session.post(f"{srv.base}/tts/stream", json={"text": "Hi there.", "speaker": "serena"}) as busy:
            assert busy.status == 503 and busy.headers["Retry-After"] == "1"  # the slot is really in use
        await _until(lambda: srv.engine.active_streams() == 0)
        summary = await _summary(srv, request_id)
        assert summary["status"] == "client_stalled", summary
        assert IDLE_S * 1000 <= summary["stalled_ms"] <= (IDLE_S + SLACK_S) * 1000, summary
        assert summary["stream_final"] and summary["stream"]["status"] == "cancelled"
        async with srv.session.post(f"{srv.base}/tts/stream",
                                    json={"text": "Hi there.", "speaker": "serena", "max_frames": 3}) as again:
            assert again.status == 200 and len(await again.read()) == 3 * FRAME_BYTES
        resp.close()
    finally:
        await stalled.close()
    metrics = await (await srv.session.get(f"{srv.base}/metrics")).text()
    assert "tts_stream_client_stalls_total 1.0" in metrics


def _capped(stream: Any, max_frames: int) -> Any:
    """/v1/audio/speech has no frame cap field (OpenAI's API has none): cap the random-weight voice here."""

    def capped(*args: Any, **kwargs: Any) -> Any:
        return stream(*args, **{**kwargs, "max_frames": kwargs.get("max_frames") or max_frames})

    return capped


async def test_stalled_readers_and_well_behaved_clients(serve) -> None:
    # issue 29's target: 32 stalled readers + 100 well-behaved clients. Every well-behaved request is served (it may
    # be told 503/429 + Retry-After while the slots are really held, and then retries as told), and every stalled
    # reader is cut once it has taken nothing for the idle timeout, which frees its slot.
    capacity, queue, share = 16, 16, 2
    srv = await serve(server=ServerConfig(idle_timeout_s=IDLE_S, client_max_streams=share), send_buffer=4096,
                      max_streams=capacity, queue_limit=queue)
    srv.engine.stream = _capped(srv.engine.stream, 300)
    stalled_ids: list[str] = []
    refusals: list[tuple[int, str | None, str]] = []
    most_held: dict[str, int] = {}
    sessions: list[aiohttp.ClientSession] = []

    def session(address: str, stalls: bool) -> aiohttp.ClientSession:
        sessions.append(session_from(address, stalls=stalls))
        return sessions[-1]

    async def post(client: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        while True:  # as a well-written client does: retry when told to, after Retry-After
            resp = await client.post(f"{srv.base}{path}", json=body)
            if resp.status == 200:
                return resp
            error = (await resp.json())["error"]  # the route's shape: the server's, or OpenAI's on /v1/audio/speech
            message = error["message"] if path.startswith("/v1/") else error
            refusals.append((resp.status, resp.headers.get("Retry-After"), message))
            assert resp.status in (429, 503), refusals[-1]
            resp.release()
            await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))

    async def stalled_reader(i: int, client: aiohttp.ClientSession) -> None:
        if i % 4 == 3:  # a quarter on the OpenAI route (the one of the issue), as SSE: fewer frames fill the buffers
            path, body = "/v1/audio/speech", {"model": "tts-1", "voice": "serena", "input": LONG,
                                               "response_format": "pcm", "stream_format": "sse"}
        else:
            path, body = "/tts/stream", {"text": LONG, "speaker": "serena", "max_frames": 300}
        resp = await post(client, path, body)  # the headers, then it reads nothing more
        stalled_ids.append(resp.headers["x-request-id"])
        await _until(lambda: resp.headers["x-request-id"] in srv.server.summaries, timeout_s=60)
        resp.close()

    async def well_behaved(i: int, client: aiohttp.ClientSession) -> None:
        body = {"text": f"Sentence number {i}.", "speaker": "serena", "max_frames": 2}
        resp = await post(client, "/tts/stream", body)
        assert len(await resp.read()) == 2 * FRAME_BYTES  # served, completely
        resp.release()

    async def watch_shares() -> None:
        while True:
            for address in addresses:
                most_held[address] = max(most_held.get(address, 0), srv.server.clients.held(address))
            await asyncio.sleep(0.01)

    # 8 peers with four stalled readers each (a paused page with four players): the share lets each hold two at once
    stalled_clients = [session(f"127.0.1.{1 + i // 4}", True) for i in range(32)]
    good_clients = [session(f"127.0.2.{1 + i // 4}", False) for i in range(100)]  # 25 peers, four clients each
    addresses = sorted({f"127.0.1.{1 + i // 4}" for i in range(32)} | {f"127.0.2.{1 + i // 4}" for i in range(100)})
    watcher = asyncio.create_task(watch_shares())
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(asyncio.gather(
            *(stalled_reader(i, c) for i, c in enumerate(stalled_clients)),
            *(well_behaved(i, c) for i, c in enumerate(good_clients)),
        ), timeout=240)
    finally:
        watcher.cancel()
        for client in sessions:
            await client.close()
    wall_s = time.monotonic() - t0

    summaries = [await _summary(srv, request_id) for request_id in stalled_ids]
    assert len(summaries) == 32
    for summary in summaries:  # each cut after taking nothing for the idle timeout, its engine stream cancelled
        assert summary["status"] == "client_stalled", summary
        assert IDLE_S * 1000 <= summary["stalled_ms"] <= (IDLE_S + SLACK_S) * 1000, summary
        assert summary["stream_final"] and summary["stream"]["status"] in ("cancelled", "completed"), summary
    for status, retry_after, message in refusals:  # told to come back, and why
        assert (status, retry_after) in ((429, "1"), (503, "1")), (status, message)
        assert ("busy" if status == 503 else "its share") in message, message
    assert max(most_held.values()) <= share, most_held  # no client ever held more than its share
    assert any(status == 429 for status, _, _ in refusals), "the share was never reached: the test proves nothing"
    await _until(lambda: srv.engine.active_streams() == 0 and srv.server.clients.open_streams == 0)
    stats = srv.engine.stats()
    assert stats["streams_failed"] == 0 and stats["worker_errors"] == 0
    print(f"\n32 stalled + 100 well-behaved: {wall_s:.1f} s, {stats['frames_generated']} frames, stalled cut after "
          f"{max(s['stalled_ms'] for s in summaries):.0f} ms at most, {len(refusals)} refusals "
          f"({sum(s == 503 for s, _, _ in refusals)} busy, {sum(s == 429 for s, _, _ in refusals)} over share)")


async def test_one_client_cannot_hold_more_than_its_share(serve) -> None:
    assert ServerConfig().client_limit(16) == 8 and ServerConfig().client_limit(1) == 1  # auto: half the capacity
    srv = await serve(server=ServerConfig(client_max_streams=2), max_streams=8)
    greedy, other = session_from("127.0.3.1"), session_from("127.0.3.2")
    try:
        long = {"text": LONG, "speaker": "serena", "max_frames": 200}
        held = [await greedy.post(f"{srv.base}/tts/stream", json=long) for _ in range(2)]
        assert [r.status for r in held] == [200, 200]
        async with greedy.post(f"{srv.base}/tts/stream", json=long) as resp:  # the server's own shape
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
            error = await resp.json()
            assert error["field"] is None and "127.0.3.1 already holds 2 streams" in error["error"]
        speech = {"model": "tts-1", "voice": "serena", "input": LONG, "response_format": "pcm"}
        async with greedy.post(f"{srv.base}/v1/audio/speech", json=speech) as resp:  # OpenAI's shape
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
            error = (await resp.json())["error"]
            assert error["code"] == "rate_limit_exceeded" and "its share" in error["message"]
        async with greedy.ws_connect(f"{srv.base}/tts/ws") as ws:  # an error event on the WebSocket
            await ws.send_json({"type": "start", "speaker": "serena"})
            event = await ws.receive_json()
            assert event["type"] == "error" and event["status"] == 429
        async with other.post(f"{srv.base}/tts/stream", json={**long, "max_frames": 2}) as resp:
            assert resp.status == 200 and len(await resp.read()) == 2 * FRAME_BYTES  # another client is served
        held[0].close()  # one ends: the client may start another
        await _until(lambda: srv.server.clients.held("127.0.3.1") == 1)
        async with greedy.post(f"{srv.base}/tts/stream", json={**long, "max_frames": 2}) as resp:
            assert resp.status == 200
        held[1].close()
    finally:
        await greedy.close()
        await other.close()
    await _until(lambda: srv.server.clients.open_streams == 0 and srv.engine.active_streams() == 0)


async def test_a_websocket_client_that_takes_no_audio_is_cut(serve) -> None:
    srv = await serve(server=ServerConfig(idle_timeout_s=IDLE_S, client_max_streams=0), send_buffer=4096,
                      max_streams=2)
    messages = [{"type": "start", "speaker": "serena", "max_frames": 400}, {"type": "text", "text": LONG},
                {"type": "end"}]
    sock = await stalled_websocket(srv.base, "/tts/ws", "127.0.1.9", "ws-stalled-1", messages)
    try:
        await _until(lambda: "ws-stalled-1" in srv.server.summaries, timeout_s=120)
        summary = await _summary(srv, "ws-stalled-1")
        assert summary["status"] == "client_stalled", summary
        assert IDLE_S * 1000 <= summary["stalled_ms"] <= (IDLE_S + SLACK_S) * 1000, summary
        await _until(lambda: srv.engine.active_streams() == 0 and srv.server.clients.open_streams == 0)
    finally:
        sock.close()


async def test_an_open_utterance_that_gets_no_text_is_ended_and_its_slot_freed(serve) -> None:
    srv = await serve(server=ServerConfig(idle_timeout_s=IDLE_S, client_max_streams=0), max_streams=1,
                      queue_limit=0)
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json())["type"] == "started"
        async with srv.session.post(f"{srv.base}/tts/stream", json={"text": "Hi.", "speaker": "serena"}) as resp:
            assert resp.status == 503  # the open utterance holds the only slot
        error = await asyncio.wait_for(ws.receive_json(), 10)  # no text for the idle timeout
        assert error["type"] == "error" and error["status"] == 408 and error["field"] == "text", error
        done = await asyncio.wait_for(ws.receive_json(), 10)
        assert done["type"] == "done" and done["status"] == "cancelled"
        async with srv.session.post(f"{srv.base}/tts/stream",
                                    json={"text": "Hi.", "speaker": "serena", "max_frames": 2}) as resp:
            assert resp.status == 200 and len(await resp.read()) == 2 * FRAME_BYTES
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})  # the connection goes on
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "Fine."})
        await ws.send_json({"type": "end"})
        kinds = []
        while not kinds or kinds[-1] != "done":
            msg = await asyncio.wait_for(ws.receive(), 30)
            kinds.append("audio" if msg.type.name == "BINARY" else msg.json()["type"])
        assert kinds.count("audio") == 2 and "error" not in kinds
