"""Engine backends: the embedded engine through LocalBackend and the HTTP server through RemoteBackend give
the same PCM for the same text; closing early frees the stream; a 4xx is a clear error."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import pytest

from agent.engine_client import LocalBackend, RemoteBackend, RemoteTTSError


async def collect(backend: Any, text: str) -> np.ndarray:
    parts = [p.pcm async for p in backend.stream(text, speaker="serena", language="auto")]
    return np.concatenate(parts)


async def test_local_and_remote_give_the_same_pcm(tiny_engine: Any) -> None:
    from tts_engine.server.app import start_server

    local = LocalBackend(tiny_engine, max_frames_per_segment=3)
    runner, port, _ = await start_server(tiny_engine)
    remote = RemoteBackend(f"http://127.0.0.1:{port}", max_frames_per_segment=3)
    try:
        a = await collect(local, "Hello there.")
        b = await collect(remote, "Hello there.")
        assert a.dtype == np.int16 and a.size == 3 * 1920
        assert np.array_equal(a, b)
        with pytest.raises(RemoteTTSError, match="400.*speaker"):
            async for _ in remote.stream("hi", speaker="nobody", language="auto"):
                pass
        assert remote.active_streams == 0
    finally:
        await remote.aclose()
        await runner.cleanup()


async def test_the_remote_backend_serves_each_call_on_its_own_event_loop(tiny_engine: Any) -> None:
    """The THREAD executor runs every call on its own event loop in its own thread, and the backend is the
    process's: a call that comes after another call's loop has closed still gets its audio (one HTTP session per
    loop; a process-wide one failed with 'Event loop is closed' from the first call's end on)."""
    from tts_engine.server.app import start_server

    runner, port, _ = await start_server(tiny_engine)
    remote = RemoteBackend(f"http://127.0.0.1:{port}", max_frames_per_segment=2)

    def call_on_its_own_loop(release: bool) -> int:
        async def call() -> int:
            pcm = await collect(remote, "Hello there.")
            if release:
                await remote.aclose()  # what the worker does at a call's end
            return pcm.size

        return asyncio.run(call())  # the loop is closed when the call ends, as a job's is

    try:
        assert await asyncio.to_thread(call_on_its_own_loop, False) == 2 * 1920  # ends without aclose()
        sizes = await asyncio.gather(*(asyncio.to_thread(call_on_its_own_loop, True) for _ in range(3)))
        assert sizes == [2 * 1920] * 3  # three later calls at once, each on its own loop
    finally:
        await runner.cleanup()


async def test_the_remote_backend_sends_the_servers_api_key(tiny_engine: Any, monkeypatch: Any) -> None:
    from tts_engine.server.app import start_server
    from tts_engine.server.config import ServerConfig

    runner, port, _ = await start_server(tiny_engine, config=ServerConfig(api_keys=("k-agent", "k-other")))
    monkeypatch.setenv("TTS_API_KEY", "k-agent, k-other")  # the shared .env: the agent sends the first key
    keyed = RemoteBackend(f"http://127.0.0.1:{port}", max_frames_per_segment=2)
    keyless = RemoteBackend(f"http://127.0.0.1:{port}", max_frames_per_segment=2, api_key="")
    try:
        assert (await collect(keyed, "Hello there.")).size == 2 * 1920
        with pytest.raises(RemoteTTSError, match="401.*API key"):
            await collect(keyless, "Hello there.")
    finally:
        await keyed.aclose()
        await keyless.aclose()
        await runner.cleanup()


async def test_closing_a_local_stream_early_releases_it(tiny_engine: Any) -> None:
    local = LocalBackend(tiny_engine)
    stream = local.stream("A longer sentence to speak for a while.", speaker="serena", language="auto")
    async with contextlib.aclosing(stream):
        async for packet in stream:
            assert packet.index == 0 and local.active_streams == 1
            break
    assert local.active_streams == 0
    assert tiny_engine.active_streams() == 0
