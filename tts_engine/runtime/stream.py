"""One stream's two ends: the request the worker thread executes and the asyncio-side handle.

Hand-off policy (why it looks like this):
- The worker thread never blocks on a consumer. It passes each packet to the consumer's event loop
  with `loop.call_soon_threadsafe`, into a per-stream buffer that lives on that loop.
- A slow consumer therefore cannot stall other streams. Its buffer is capped in audio frames
  (`max_buffered_frames`); when a stream's unread audio exceeds the cap the worker cancels that stream
  (its slot frees) and the consumer gets `StreamOverflowError` after the packets already buffered.
- Cancellation is a flag the worker polls before every frame step, so leaving the `async for`, calling
  `aclose()`/`cancel()`, cancelling the consuming task, or dropping the handle (garbage collection)
  stops the stream's GPU work within one frame step and frees its slot. Setting the flag is a plain
  attribute write, safe from `__del__` and from any thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from tts_engine.runtime.metrics import StreamMetrics

if TYPE_CHECKING:
    from tts_engine.runtime.codegen import SamplingParams


class TextSource(Protocol):
    """A streaming-text stream's text as the worker reads it (the caller pushes it: runtime/text_feed.py `TextFeed`)."""

    def ids_from(self, start: int) -> list[int]:
        """The final token ids from `start` on, as far as they are known."""
        ...

    def budget(self, scale: float = 1.0) -> int:
        """The frame budget of the text pushed so far."""
        ...

    def trailing_kind(self, k: int) -> str | None:
        """What frame k's feedback adds: "text", "eos", "pad", or None (not known yet)."""
        ...


class StreamOverflowError(RuntimeError):
    """The consumer read too slowly: its unread audio passed the engine's buffer cap."""


class EngineClosedError(RuntimeError):
    """The engine was closed (or its worker failed) while the stream was running."""


@dataclass(frozen=True)
class Packet:
    """A run of consecutive codec frames as 24 kHz mono int16 PCM; len(pcm) == frames * 1920."""

    pcm: np.ndarray
    index: int
    frames: int
    t_ready: float  # time.perf_counter() when the PCM existed on the host
    final: bool = False


@dataclass
class StreamRequest:
    """What the worker needs to run one stream (validated before it gets here)."""

    text: str
    speaker: str
    language: str
    instruct: str | None
    params: SamplingParams
    first_packet_frames: int
    packet_frames: int
    metrics: StreamMetrics
    max_frames: int | None = None  # explicit frame cap (benchmarks, tests); None = the text's frame budget
    codes: list[np.ndarray] = field(default_factory=list)  # valid frames' codes [16], for dumps / gates
    text_feed: TextSource | None = None  # streaming-text layout: the text, pushed as it comes


class _End:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class StreamChannel:
    """State shared by the worker and the consumer. Holds no reference to the consumer's handle, so
    dropping the handle (garbage collection) is observable while the worker still runs the stream."""

    def __init__(self, request: StreamRequest, loop: asyncio.AbstractEventLoop, max_buffered_frames: int) -> None:
        self.request = request
        self.cancel_requested = False  # polled by the worker; a plain write is thread- and __del__-safe
        self.worker_done = False  # the worker finished with this stream (its slot is free)
        self.loop = loop
        self.items: deque[Packet | _End] = deque()  # touched only on the loop thread
        self.waiter: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] = loop.create_future()  # set on the loop once the worker let the stream go
        self._max_buffered_frames = max_buffered_frames
        self._buffered_frames = 0
        self._lock = threading.Lock()

    # ---- worker side (any thread) -------------------------------------------------------------
    def offer(self, packet: Packet) -> bool:
        """Queue a packet for the consumer. False when the buffer cap is passed or the loop is gone."""
        with self._lock:
            if self._buffered_frames + packet.frames > self._max_buffered_frames:
                return False
            self._buffered_frames += packet.frames
        return self._post(packet)

    def finish(self, error: BaseException | None) -> None:
        """The stream ended (error None = completed normally)."""
        self.worker_done = True
        self._post(_End(error))

    def _post(self, item: Packet | _End) -> bool:
        try:
            self.loop.call_soon_threadsafe(self._on_item, item)
        except RuntimeError:  # the consumer's loop is closed: nobody will read this stream
            self.cancel_requested = True
            return False
        return True

    # ---- loop side ----------------------------------------------------------------------------
    def _on_item(self, item: Packet | _End) -> None:
        if isinstance(item, _End) and not self.closed.done():
            self.closed.set_result(None)
        self.items.append(item)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def consumed(self, frames: int) -> None:
        with self._lock:
            self._buffered_frames -= frames

    @property
    def buffered_frames(self) -> int:
        return self._buffered_frames


class StreamHandle:
    """Async iterator of `Packet`s for one stream. Create via `Engine.stream(...)`.

    Leave early with `break`, `aclose()`, `cancel()`, `async with`, or by cancelling the task: the
    stream's GPU work stops within one frame step. Errors (bad input found during admission, buffer
    overflow, engine closed) are raised from the iteration.
    """

    def __init__(self, channel: StreamChannel, on_release: Callable[[StreamChannel], None]) -> None:
        self._channel = channel
        self._on_release = on_release
        self.request_id = channel.request.metrics.request_id
        self.metrics = channel.request.metrics
        self._ended = False

    def __aiter__(self) -> StreamHandle:
        return self

    async def __anext__(self) -> Packet:
        ch = self._channel
        while not ch.items:
            if self._ended:
                raise StopAsyncIteration
            ch.waiter = ch.loop.create_future()
            try:
                await ch.waiter
            except asyncio.CancelledError:
                self.cancel()
                raise
            finally:
                ch.waiter = None
        item = ch.items.popleft()
        if isinstance(item, _End):
            self._ended = True
            self._on_release(ch)
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        ch.consumed(item.frames)
        return item

    def cancel(self) -> None:
        """Stop the stream: the worker drops it before its next frame step. Safe to call twice."""
        if self._ended:
            return
        self._ended = True
        self._channel.cancel_requested = True
        self._channel.items.clear()
        self._on_release(self._channel)

    async def aclose(self) -> None:
        self.cancel()

    async def wait_closed(self) -> None:
        """Return once the worker has let the stream go (ended, or dropped within one frame step of `cancel()`):
        `metrics` are final from then on."""
        await asyncio.shield(self._channel.closed)

    async def __aenter__(self) -> StreamHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    @property
    def finished(self) -> bool:
        return self._ended

    def codes(self) -> np.ndarray:
        """Codes [frames, 16] of the valid frames produced so far (complete once the stream has ended)."""
        frames = list(self._channel.request.codes)
        return np.stack(frames) if frames else np.zeros((0, 16), dtype=np.int64)

    def flag_cancel(self) -> None:
        """Only flag the stream for cancelling (a plain write: safe from `__del__` and any thread); the worker drops
        it before its next frame step and frees its slot. `cancel()` also ends the iteration at once."""
        if not self._ended:
            self._channel.cancel_requested = True

    def __del__(self) -> None:
        # Dropped before the end (e.g. `break` out of `async for`): stop the GPU work.
        self.flag_cancel()
