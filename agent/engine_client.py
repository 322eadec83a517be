"""Where the agent gets TTS packets from: the embedded `tts_engine.Engine`, or `python -m tts_engine serve`.

Both backends expose the same small surface: `stream(text, speaker=, language=)` is an async iterator
of packets (`pcm` int16 mono 24 kHz, `index`, `t_ready` = perf_counter when the PCM existed on this
host), closing it early cancels the synthesis; `active_streams` / `capacity` feed the worker's load.

- `LocalBackend` wraps the one `Engine` of this process (shared by all THREAD-executor sessions; the
  engine itself is thread-safe and batches streams). It is the only place the agent touches the engine.
  `open_text_stream(speaker=, language=)` opens one engine stream whose text is pushed as the LLM produces it
  (the model's streaming-text layout, `Engine.open_text_stream(layout="tokens")`): `push(text)`, `close()`,
  async iteration of packets, `aclose()`. Only the local backend has it (QwenTTS falls back to segments).
- `RemoteBackend` speaks the server's HTTP API: POST `<TTS_ENGINE_URL>/tts/stream` with JSON
  `{text, speaker, language}` -> chunked raw s16le 24 kHz PCM. A packet is whatever whole samples one
  read returned; `t_ready` is when those bytes arrived. 4xx answers become `RemoteTTSError` with the
  server's message; closing the iterator drops the HTTP response, which cancels the server's stream. One HTTP
  session per event loop: under the THREAD executor every call runs its own loop in its own thread, and an aiohttp
  session belongs to the loop it was made on (a process-wide one failed every call after the first call's loop
  closed: "Event loop is closed"). `aclose()` closes the calling loop's session; the worker calls it at a call's end.
  With `TTS_API_KEY` set (the server's key; its first one when it lists several), every request carries
  `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import numpy as np


class PacketLike(Protocol):
    pcm: np.ndarray
    index: int
    t_ready: float


@dataclass
class RemotePacket:
    pcm: np.ndarray
    index: int
    t_ready: float


class RemoteTTSError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"TTS server answered {status}: {message}")
        self.status = status


class TTSBackend(Protocol):
    @property
    def capacity(self) -> int: ...

    @property
    def active_streams(self) -> int: ...

    def stream(self, text: str, *, speaker: str, language: str) -> AsyncGenerator[PacketLike, None]: ...  # closable

    async def aclose(self) -> None: ...


class LocalBackend:
    """The process's embedded engine. `engine` is a `tts_engine.Engine`.

    `max_frames_per_segment` caps each segment's codec frames (80 ms each). Only for simulations on
    random-weight checkpoints, which rarely emit EOS and would otherwise speak to the runaway cap."""

    def __init__(self, engine: Any, capacity: int | None = None, *, max_frames_per_segment: int | None = None) -> None:
        self.engine = engine
        self._capacity = max(1, capacity if capacity is not None else int(engine.capacity()))
        self._active = 0
        self._count_lock = threading.Lock()  # THREAD-executor calls share this backend from several loops
        self.max_frames_per_segment = max_frames_per_segment

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def active_streams(self) -> int:
        return self._active

    async def stream(self, text: str, *, speaker: str, language: str) -> AsyncGenerator[PacketLike, None]:
        with self._count_lock:
            self._active += 1
        try:
            options = {"max_frames": self.max_frames_per_segment} if self.max_frames_per_segment else {}
            packets = self.engine.stream(text, speaker=speaker, language=language, **options)
            try:
                async for packet in packets:
                    yield packet
            finally:
                aclose = getattr(packets, "aclose", None)
                if aclose is not None:
                    await aclose()  # stops the engine's work for this stream now, not at GC time
        finally:
            with self._count_lock:
                self._active -= 1

    def open_text_stream(self, *, speaker: str, language: str) -> Any:
        """One streaming-text engine stream (see the module doc). With `max_frames_per_segment` (simulations on
        random weights) it is capped at 3x that, about what the segments of a short reply get together."""
        options = {"max_frames": 3 * self.max_frames_per_segment} if self.max_frames_per_segment else {}
        stream = self.engine.open_text_stream(speaker, language, layout="tokens", **options)
        with self._count_lock:
            self._active += 1
        counted = [True]

        def done() -> None:
            if counted[0]:
                counted[0] = False
                with self._count_lock:
                    self._active -= 1

        stream.on_end = done
        return stream

    async def aclose(self) -> None:
        return None  # the engine outlives sessions; the worker process owns it


class RemoteBackend:
    def __init__(
        self,
        base_url: str,
        *,
        capacity: int = 16,
        connect_timeout_s: float = 5.0,
        max_frames_per_segment: int | None = None,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("TTS_API_KEY", "").split(",")[0].strip()
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.max_frames_per_segment = max_frames_per_segment
        self._capacity = capacity
        self._active = 0
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=30.0)
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}  # one per calling event loop
        self._sessions_lock = threading.Lock()  # calls on other threads' loops open and close theirs

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def active_streams(self) -> int:
        return self._active

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        with self._sessions_lock:
            for gone in [other for other in self._sessions if other.is_closed()]:
                del self._sessions[gone]  # its loop ended without aclose(): nothing can close that session any more
            session = self._sessions.get(loop)
            if session is None or session.closed:
                session = self._sessions[loop] = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
            return session

    async def stream(self, text: str, *, speaker: str, language: str) -> AsyncGenerator[PacketLike, None]:
        self._active += 1
        body: dict[str, Any] = {"text": text, "speaker": speaker, "language": language}
        if self.max_frames_per_segment:
            body["max_frames"] = self.max_frames_per_segment
        try:
            async with self._client().post(f"{self.base_url}/tts/stream", json=body) as resp:
                if resp.status != 200:
                    raw = await resp.text()
                    try:
                        message = json.loads(raw).get("error", raw)
                    except (ValueError, AttributeError):
                        message = raw
                    raise RemoteTTSError(resp.status, str(message)[:500])
                carry = b""
                index = 0
                async for chunk in resp.content.iter_any():
                    t_ready = time.perf_counter()
                    data = carry + chunk
                    usable = len(data) - (len(data) % 2)
                    carry = data[usable:]
                    if usable:
                        yield RemotePacket(np.frombuffer(data[:usable], dtype=np.int16).copy(), index, t_ready)
                        index += 1
        finally:
            self._active -= 1

    async def aclose(self) -> None:
        """Close the calling event loop's session (other loops' calls keep theirs)."""
        with self._sessions_lock:
            session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()
            await asyncio.sleep(0)
