"""`Engine.open_text_stream` and the long-text chain: the engine's text-in-pieces entry points (a mixin of `Engine`,
kept apart so engine.py stays short; it uses the engine's own validation, reservation and stream start).

- `open_text_stream(speaker, ..., layout="segments")`: text pushed in pieces, cut into segments as it arrives, each
  segment an engine stream, all one `ChainedStream` (runtime/chained.py).
- `open_text_stream(..., layout="tokens")`: one engine stream in the model's streaming-text layout
  (`TokenTextStream`, runtime/text_feed.py; parking in runtime/text_rows.py).
- `_open_chain(source, ...)`: the chain behind both the segments layout and `Engine.stream` of a long text.
"""

from __future__ import annotations

import uuid
from typing import Any

from tts_engine.errors import TTSInputError
from tts_engine.runtime.chained import ChainedStream, SegmentSource
from tts_engine.runtime.metrics import StreamMetrics
from tts_engine.runtime.text_feed import TextFeed, TokenTextStream


class TextStreams:
    """Mixed into `Engine` (uses its `_check_call`, `_start`, `_reserve`, `_release_chain`, `_fitter`, `config`,
    `scheduler`, `model`)."""

    _check_call: Any
    _start: Any
    _reserve: Any
    _release_chain: Any
    _fitter: Any
    config: Any
    scheduler: Any
    model: Any

    def open_text_stream(self, speaker: str, language: str = "auto", *, instruct: str | None = None,
                         request_id: str | None = None, layout: str = "segments",
                         **options: Any) -> ChainedStream | TokenTextStream:
        """A stream whose text arrives in pieces: `push(text)` as it comes, `close()` at its end; iterate the handle
        for audio. Options as `stream()`. layout "segments": cut into segments as it arrives, each spoken whole
        (runtime/chained.py); "tokens": the model's streaming-text layout, one text token joins each frame step
        (runtime/text_feed.py, text_rows.py). Either way a stream whose text runs dry takes no GPU step. Pushed
        text counts against TTS_DEEP_STREAM_MAX_TEXT_CHARS."""
        if layout not in ("segments", "tokens"):
            raise TTSInputError(f"layout={layout!r} is not allowed; allowed values: segments, tokens", field="layout")
        checked = self._check_call(None, speaker, language, **options)
        checked.pop("text")
        rid = request_id or uuid.uuid4().hex[:16]
        if layout == "segments":
            return self._open_chain(SegmentSource(), 0, rid, instruct, checked)
        feed = TextFeed(self.model.tokenizer)
        handle = self._start("", rid, instruct, checked, reserve=True, text_feed=feed)
        return TokenTextStream(handle, feed, lambda: self.scheduler.submit(handle._channel),  # noqa: SLF001
                               self.scheduler.wake, self.config.max_text_chars, self._fitter.stream_tokens(instruct))

    def _open_chain(self, source: SegmentSource, chars: int, request_id: str, instruct: str | None,
                    options: dict[str, Any]) -> ChainedStream:
        metrics = StreamMetrics(request_id, chars, options["speaker"], options["language"])
        chain = ChainedStream(source, lambda text, sid: self._start(text, sid, instruct, options, reserve=False),
                              metrics, self._release_chain, fit=lambda segment: self._fitter.split(segment, instruct),
                              max_text_chars=self.config.max_text_chars)
        self._reserve(chain)
        return chain
