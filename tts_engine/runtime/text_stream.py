"""The caller's handle of a streaming-text stream (Engine.open_text_stream(layout="tokens")).

Contract: `TokenTextStream` pushes and closes the stream's text (runtime/text_feed.py `TextFeed`) and iterates its
`Packet`s (runtime/stream.py); its worker side is runtime/text_rows.py. The class docstring says when the engine
stream is submitted, how it is stopped and what a piece past a cap raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tts_engine.errors import TextTooLongError, TTSInputError
from tts_engine.runtime.stream import Packet, StreamHandle
from tts_engine.runtime.text_feed import TextFeed


class TokenTextStream:
    """A streaming-text-layout stream whose text is pushed as it comes (Engine.open_text_stream(layout="tokens")).

    `push(text)` / `close()` feed the text track; iterate for `Packet`s. The engine stream is submitted once the
    first token is final (or at close), so the prefill already holds t_0. `cancel()` / `aclose()` / `async with`
    stop it (the worker is woken, so a stream waiting for its text frees its slot at once). A piece past the per-request
    character cap raises TextTooLongError, one past what the stream's KV positions can speak raises TextFeedFull
    (field "text", naming TTS_DEEP_STREAM_MAX_POSITIONS); either way the piece is not taken and the stream goes on
    (close it to have the text so far spoken).
    """

    def __init__(self, handle: StreamHandle, feed: TextFeed, submit: Callable[[], None], wake: Callable[[], None],
                 max_chars: int, max_tokens: int) -> None:
        self._handle, self._feed, self._submit, self._wake = handle, feed, submit, wake
        self._max_chars, self._max_tokens = max_chars, max_tokens
        self._submitted = False
        self.on_end: Callable[[], None] | None = None  # called once when the stream has ended, e.g. load accounting
        self.metrics = handle.metrics
        self.request_id = handle.request_id
        feed.on_change = wake

    def push(self, text: str) -> None:
        if self._feed.closed:
            raise RuntimeError("push() after close(): the text of this stream is complete")
        if not isinstance(text, str):
            raise TTSInputError(f"text must be a string, got {type(text).__name__}", field="text")
        if self._feed.chars + len(text) > self._max_chars:
            raise TextTooLongError(self._feed.chars + len(text), self._max_chars)
        self._feed.push(text, max_ids=self._max_tokens)
        self.metrics.text_chars = self._feed.chars
        if not self._submitted and self._feed.n_ids > 0:
            self._submitted = True
            self._submit()

    def close(self) -> None:
        if self._feed.closed:
            return
        self._feed.close()
        if not self._submitted:
            self._submitted = True
            self._submit()

    def __aiter__(self) -> TokenTextStream:
        return self

    async def __anext__(self) -> Packet:
        try:
            return await self._handle.__anext__()
        except BaseException:
            self._ended()
            raise

    def _ended(self) -> None:
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end()

    def cancel(self) -> None:
        self._handle.cancel()
        self._wake()
        self._ended()

    async def aclose(self) -> None:
        self.cancel()

    async def wait_closed(self) -> None:
        """Return once the engine has let the stream go (at once when it was never submitted): `metrics` are final."""
        if self._submitted:
            await self._handle.wait_closed()

    async def __aenter__(self) -> TokenTextStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    @property
    def finished(self) -> bool:
        return self._handle.finished

    @property
    def tokens(self) -> int:
        """Text tokens final so far (the first frame needs two, or the closed text)."""
        return self._feed.n_ids

    def codes(self) -> Any:
        return self._handle.codes()

    def __del__(self) -> None:
        # dropped without cancel(): the handle's own __del__ flags the stream; wake the worker so that a waiting
        # stream frees its slot now rather than at the next request (a queue put: safe from any thread)
        handle = getattr(self, "_handle", None)
        if handle is not None and not handle.finished:
            handle.flag_cancel()  # what the handle's own __del__ does, here before the wake
            self._wake()
