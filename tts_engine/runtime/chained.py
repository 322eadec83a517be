"""One audio stream over several engine streams, one text segment after another: long text and pushed text.

Contract:
- `ChainedStream` is iterated like a `StreamHandle` (async `Packet`s, `cancel()` / `aclose()` / `async with`,
  `metrics`, `request_id`, `codes()`): it runs its segments as engine streams strictly one after another and
  re-indexes their packets, so the consumer sees ONE stream with packet indices 0, 1, 2, ... and the audio of
  every segment exactly as the model produced it (nothing inserted, nothing dropped between segments).
- Its segments come from a source: a fixed list (a long text cut at sentence boundaries by the engine), or text
  pushed piece by piece (`push(text)`, then `close()` at the end of the text), cut by
  `tts_engine.text.segment.StreamSegmenter` as it arrives. While no segment is ready the chain waits on the event
  loop: no engine stream exists for it, so it spends no GPU step and holds no row that others could use.
- The chain holds one reservation of the engine (taken when it is opened, released when it ends), so a long text
  is refused with EngineBusyError at the start or not at all; each segment queues like any stream. Its segments
  appear in the engine counters as streams of their own (request ids `<id>.<n>`).
- An error in one segment (bad input found at admission, overflow, engine closed) ends the chain with that error;
  leaving the iteration early or cancelling stops the segment that runs and drops the rest.
- Metrics: the chain's `StreamMetrics` sums frames, packets, samples and step times of its segments; TTFA is the
  first segment's first packet, from the moment the chain was opened.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tts_engine.errors import TextTooLongError, TTSInputError
from tts_engine.model.prompt import instruct_text
from tts_engine.runtime.codegen import EXPECTED_FRAMES_PER_TEXT_TOKEN
from tts_engine.runtime.metrics import StreamMetrics
from tts_engine.runtime.stream import Packet, StreamHandle
from tts_engine.text.segment import SegmenterOptions, StreamSegmenter, iter_split_to_fit, split_to_fit

#: talker prompt positions besides the text tokens: role (3) + codec prefix (at most 6) + tts_eos + the codec_bos row
PROMPT_OVERHEAD = 11


class TextFitter:
    """Cuts a text into pieces that each fit one stream: its prompt plus the frames expected for it within the KV
    positions (the room check of `CodeGenerator.prepare`, with a 2-token margin for tokenizer merges where pieces
    are joined). `split(text, instruct)` returns [text] when the whole text fits."""

    def __init__(self, max_seq_len: int, supports_instruct: bool, tokenizer: Any) -> None:
        self.max_seq_len, self.supports_instruct, self.tokenizer = max_seq_len, supports_instruct, tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def limit(self, instruct: str | None) -> int:
        extra = self.count(instruct_text(instruct)) if instruct and self.supports_instruct else 0
        return max(1, (self.max_seq_len - PROMPT_OVERHEAD - extra) // (1 + EXPECTED_FRAMES_PER_TEXT_TOKEN) - 2)

    def stream_tokens(self, instruct: str | None) -> int:
        """Text tokens one streaming-text-layout stream can speak: its prompt holds no text, every other position
        is for frames (~EXPECTED_FRAMES_PER_TEXT_TOKEN per token)."""
        extra = self.count(instruct_text(instruct)) if instruct and self.supports_instruct else 0
        return max(1, (self.max_seq_len - PROMPT_OVERHEAD - extra) // EXPECTED_FRAMES_PER_TEXT_TOKEN)

    def split(self, text: str, instruct: str | None = None) -> list[str]:
        return split_to_fit(text, self.count, self.limit(instruct if isinstance(instruct, str) else None))

    def iter_split(self, text: str, instruct: str | None = None) -> Iterator[str]:
        """`split`, lazily: a long text's first piece is ready without cutting (and tokenizing) the whole text."""
        return iter_split_to_fit(text, self.count, self.limit(instruct if isinstance(instruct, str) else None))


class SegmentSource:
    """Segments in order; `next()` waits for the next one and returns None once the text is complete. `more`, an
    iterator of further segments, is read one segment at a time once the ready ones are spoken (a long text is cut
    while its first segments play)."""

    def __init__(self, segments: list[str] | None = None, *, closed: bool = False,
                 more: Iterator[str] | None = None) -> None:
        self._ready: deque[str] = deque(segments or [])
        self._more = more
        self._closed = closed
        self._wake: asyncio.Event | None = None

    def add(self, segments: list[str]) -> None:
        self._ready.extend(segments)
        self._notify()

    def close(self) -> None:
        """No segment is added after this; `more` is still read (cancelling uses `drop`)."""
        self._closed = True
        self._notify()

    def drop(self) -> None:
        """Forget every segment not yet started and close."""
        self._ready.clear()
        self._more = None
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def next(self) -> str | None:
        while not self._ready:
            if self._more is not None:
                piece = next(self._more, None)
                if piece is None:
                    self._more = None
                else:
                    self._ready.append(piece)
                continue
            if self._closed:
                return None
            self._wake = asyncio.Event()
            await self._wake.wait()
            self._wake = None
        return self._ready.popleft()


class ChainedStream:
    """Async iterator of `Packet`s over consecutive segment streams (see the module doc)."""

    def __init__(
        self,
        source: SegmentSource,
        open_segment: Callable[[str, str], StreamHandle],
        metrics: StreamMetrics,
        on_release: Callable[[ChainedStream], None],
        *,
        fit: Callable[[str], list[str]] | None = None,
        segmenter_options: SegmenterOptions | None = None,
        max_text_chars: int | None = None,
    ) -> None:
        self._max_text_chars = max_text_chars
        self._source = source
        self._open_segment = open_segment
        self._on_release = on_release
        self._fit = fit or (lambda text: [text])
        self._segmenter = StreamSegmenter(segmenter_options)
        self.metrics = metrics
        self.request_id = metrics.request_id
        self._current: StreamHandle | None = None
        self._dropped: StreamHandle | None = None  # the segment cancel() stopped, added to metrics by wait_closed()
        self._segments_started = 0
        self._index = 0
        self._codes: list[np.ndarray] = []
        self._ended = False

    # ---- text in (pushed text) ---------------------------------------------------------------
    def push(self, text: str) -> None:
        """Add a piece of text (any size, cut anywhere); segments start as soon as they are complete."""
        if self._source.closed:
            raise RuntimeError("push() after close(): the text of this stream is complete")
        if not isinstance(text, str):
            raise TTSInputError(f"text must be a string, got {type(text).__name__}", field="text")
        if self._max_text_chars is not None and self.metrics.text_chars + len(text) > self._max_text_chars:
            raise TextTooLongError(self.metrics.text_chars + len(text), self._max_text_chars)
        self.metrics.text_chars += len(text)
        self._source.add([piece for segment in self._segmenter.push(text) for piece in self._fit(segment)])

    def close(self) -> None:
        """The text is complete: the rest is spoken, then the stream ends."""
        if not self._source.closed:
            self._source.add([piece for segment in self._segmenter.flush() for piece in self._fit(segment)])
            self._source.close()

    # ---- audio out ---------------------------------------------------------------------------
    def __aiter__(self) -> ChainedStream:
        return self

    async def __anext__(self) -> Packet:
        while True:
            if self._ended:
                raise StopAsyncIteration
            if self._current is None:
                try:
                    text = await self._source.next()
                except asyncio.CancelledError:
                    self.cancel()
                    raise
                except Exception as exc:  # cutting the rest of a long text failed: end here, reservation back
                    self._source.drop()
                    self._finish("error", str(exc))
                    raise
                if text is None:
                    self._finish("completed")
                    raise StopAsyncIteration
                if self._ended:  # cancelled while waiting for text
                    raise StopAsyncIteration
                try:
                    self._current = self._open_segment(text, f"{self.request_id}.{self._segments_started}")
                except BaseException as exc:  # engine closed: this chain ends and gives its reservation back
                    self._finish("error", str(exc))
                    raise
                self._segments_started += 1
            try:
                packet = await self._current.__anext__()
            except StopAsyncIteration:
                self._absorb(self._current)
                self._current = None
                continue
            except asyncio.CancelledError:
                self.cancel()
                raise
            except BaseException as exc:
                self._absorb(self._current)
                self._current = None
                self._finish("error", str(exc))
                raise
            out = Packet(pcm=packet.pcm, index=self._index, frames=packet.frames, t_ready=packet.t_ready)
            self._index += 1
            m = self.metrics
            if m.t_first_packet is None:
                m.t_first_packet = packet.t_ready
            m.packets += 1
            m.samples += packet.pcm.shape[0]
            return out

    def _absorb(self, handle: StreamHandle) -> None:
        """Add a finished segment's figures to the chain's metrics."""
        sub, m = handle.metrics, self.metrics
        self._codes.extend(handle.codes())
        if m.t_admitted is None:
            m.t_admitted = sub.t_admitted
        m.frames += sub.frames
        m.max_frames += sub.max_frames
        m.codegen_wall_ms += sub.codegen_wall_ms
        m.decode_wall_ms += sub.decode_wall_ms
        m.nonfinite_samples += sub.nonfinite_samples
        m.slot = sub.slot
        if not self._ended:  # a segment dropped by cancel() is added after the chain's own end
            m.end_reason = sub.end_reason
            m.status = "running"

    def _finish(self, status: str, error: str = "") -> None:
        if self._ended:
            return
        self._ended = True
        m = self.metrics
        m.t_done = time.perf_counter()
        m.status = status
        if status == "cancelled":
            m.end_reason = "cancelled"
        if error:
            m.error = error
            m.end_reason = "error"
        self._on_release(self)

    def cancel(self) -> None:
        """Stop the segment that runs and drop the rest. Safe to call twice."""
        if self._current is not None:
            self._current.cancel()
            self._dropped, self._current = self._current, None
        self._source.drop()
        self._finish("cancelled")

    async def aclose(self) -> None:
        self.cancel()

    async def wait_closed(self) -> None:
        """Return once the engine has let every segment go; a segment stopped by `cancel()` is then added to
        `metrics` (its frames included), so they are final."""
        dropped, self._dropped = self._dropped, None
        if dropped is not None:
            await dropped.wait_closed()
            self._absorb(dropped)

    async def __aenter__(self) -> ChainedStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    @property
    def finished(self) -> bool:
        return self._ended

    @property
    def segments_started(self) -> int:
        return self._segments_started

    def codes(self) -> np.ndarray:
        """Codes [frames, 16] of the finished segments (complete once the stream has ended)."""
        return np.stack(self._codes) if self._codes else np.zeros((0, 16), dtype=np.int64)

    def __del__(self) -> None:
        # Dropped before the end: the running segment's own handle stops its GPU work when it is dropped too (a
        # flag write); here only the reservation goes back (`on_release` must be lock-free: see Engine).
        if not getattr(self, "_ended", True):
            self._ended = True
            release: Any = self._on_release
            release(self)
