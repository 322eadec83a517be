"""Streaming text input at token level: the text-side track of the streaming-text layout (non_streaming_mode=False).

Layout (docs/model.md, "Streaming-text layout"): the prefill ends with [text(t_0) + codec_bos]; generated frame k's
feedback adds trailing[k], where trailing = [text(t_1) .. text(t_{n-1}), tts_eos] and tts_pad once it is exhausted.
So frame k can be stepped as soon as token k+1 is known (or the text is closed); until then the stream waits.

Contract:
- `IncrementalTokens(tokenizer)`: `push(piece)` appends text cut anywhere and returns the token ids that became
  final; `close()` returns the rest. The ids equal the tokenization of the whole text (inside the chat template,
  as the official code slices it) however the text was cut: a token is final only once the pre-token it belongs to
  cannot grow, i.e. every pre-token but the last (the byte-level BPE never merges across pre-tokens).
  Leading whitespace of the text and trailing whitespace at close are dropped, as the whole-text path strips them.
- `TextFeed`: one stream's text, thread-safe: the event loop pushes pieces and closes it, the engine's worker reads
  `n_ids`, `ids_from(i)`, `closed` and `budget` (the frame budget of the text pushed so far,
  text/speech_length.py). `trailing_kind(k)` says what frame k's step needs: "text" (token k+1 is known), "eos",
  "pad", or None (wait: not known yet and not closed).
- `TokenTextStream`: the caller's handle (Engine.open_text_stream(layout="tokens")): push / close text, iterate
  packets; the worker side of the same stream is runtime/text_rows.py.
- `generate_codes_streaming(model, pieces, ...)`: offline reference of the layout through the real `CodeGenerator`
  (one slot, text pushed piece by piece, a frame stepped only when its text row is known); the parity test compares
  it with the official implementation's streaming-text mode.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch

from tts_engine.errors import EmptyTextError, TextFeedFull, TextTooLongError, TTSInputError
from tts_engine.runtime.codegen import CodeGenerator, SamplingParams
from tts_engine.runtime.stream import Packet, StreamHandle
from tts_engine.text.speech_length import SpeechBudget

__all__ = ["IncrementalTokens", "TextFeed", "TextFeedFull", "TokenTextStream", "generate_codes_streaming"]


class IncrementalTokens:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        backend = getattr(tokenizer, "_backend", tokenizer)
        self._pre = backend.backend_tokenizer.pre_tokenizer  # HF fast tokenizer: the Qwen2 regex pre-tokenizer
        self.text = ""
        self.ids: list[int] = []
        self._final_chars = 0  # chars of `text` whose tokens are final
        self.closed = False

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text))

    def push(self, piece: str) -> list[int]:
        if self.closed:
            raise RuntimeError("push() after close()")
        self.text = (self.text + piece) if self.text else piece.lstrip()
        spans = self._pre.pre_tokenize_str(self.text)
        if len(spans) < 2:
            return []
        cut = spans[-1][1][0]  # the last pre-token may still grow; everything before it is final
        return self._commit(cut)

    def close(self) -> list[int]:
        if self.closed:
            return []
        self.closed = True
        self.text = self.text.rstrip()
        return self._commit(len(self.text))

    def snapshot(self) -> tuple[str, list[int], int, bool]:
        return self.text, list(self.ids), self._final_chars, self.closed

    def restore(self, state: tuple[str, list[int], int, bool]) -> None:
        self.text, self.ids, self._final_chars, self.closed = state[0], list(state[1]), state[2], state[3]

    def _commit(self, cut: int) -> list[int]:
        if cut <= self._final_chars:
            return []
        ids = self._encode(self.text[:cut])
        if ids[: len(self.ids)] != self.ids:  # cannot happen with a regex pre-tokenizer; never rewrite spoken ids
            raise RuntimeError("incremental tokenization diverged from the final ids")
        new = ids[len(self.ids):]
        self.ids = ids
        self._final_chars = cut
        return new


class TextFeed:
    """One stream's text track (see the module doc)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokens = IncrementalTokens(tokenizer)
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self.closed = False
        self.chars = 0
        self.speech = SpeechBudget()  # the runaway guard's allowance of the text pushed so far
        self.on_change: Callable[[], None] | None = None  # set by the stream: wakes the worker when text arrives

    def push(self, piece: str, max_ids: int | None = None) -> None:
        """Add a piece; with `max_ids`, a piece that would make more final tokens than that is refused whole
        (TextFeedFull) before the worker can see any of its tokens."""
        with self._lock:
            saved = self._tokens.snapshot()
            new = self._tokens.push(piece)
            if max_ids is not None and len(self._ids) + len(new) > max_ids:
                self._tokens.restore(saved)
                raise TextFeedFull(
                    f"text is too long for one streaming-text stream: at most {max_ids} tokens fit its KV positions "
                    "(TTS_DEEP_STREAM_MAX_POSITIONS); close it and speak the rest as another stream", field="text")
            self.chars += len(piece)
            self.speech.add(piece)
            self._ids.extend(new)
        self._changed()

    def close(self) -> None:
        with self._lock:
            self._ids.extend(self._tokens.close())
            self.closed = True
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    @property
    def n_ids(self) -> int:
        return len(self._ids)

    def ids_from(self, start: int) -> list[int]:
        with self._lock:
            return self._ids[start:]

    def budget(self, scale: float = 1.0) -> int:
        """The frame budget of the text pushed so far (text/speech_length.py)."""
        return self.speech.budget(scale)

    def trailing_kind(self, k: int) -> str | None:
        """What frame k's feedback adds: "text" (token k+1), "eos", "pad", or None (not known yet)."""
        n = len(self._ids)
        if k + 1 < n:
            return "text"
        if not self.closed:
            return None
        return "eos" if k + 1 == n else "pad"


@torch.no_grad()
def generate_codes_streaming(model: Any, pieces: Iterable[str], speaker: str, language: str = "auto",
                             params: Any = None, max_frames: int | None = None,
                             instruct: str | None = None) -> torch.Tensor:
    """Offline: [T, 16] codes of text arriving in `pieces`, streaming-text layout (EOS frame dropped)."""
    gen = CodeGenerator(model, max_slots=1)
    feed = TextFeed(model.tokenizer)
    source = iter(pieces)

    def more() -> bool:
        piece = next(source, None)
        if piece is None:
            if feed.closed:
                return False
            feed.close()
        else:
            feed.push(piece)
        return True

    while feed.n_ids == 0 and more():
        pass
    if feed.n_ids == 0:
        raise EmptyTextError()
    prompt = gen.prepare_streaming(feed.ids_from(0)[0], speaker, language, instruct, max_frames)
    gen.admit(0, prompt, params or SamplingParams.greedy())
    prompt_len = prompt.embeds.shape[0]
    rows: list[torch.Tensor] = []  # text rows of tokens 1.. projected so far
    frames: list[torch.Tensor] = []
    k = 0
    while True:
        kind = feed.trailing_kind(k)
        if kind is None:
            more()
            continue
        cap = prompt.max_frames if max_frames is not None else gen.cap(feed.budget(gen.cap_scale), prompt_len)
        if kind == "text":
            if len(rows) <= k:
                rows.extend(gen.prompts.project(feed.ids_from(len(rows) + 1)).unbind(0))
            row = rows[k]
        else:
            row = gen.prompts.tts_eos if kind == "eos" else gen.tts_pad
        gen.set_stream_rows([0], row[None], [cap])
        codes, done = gen.step(1)
        k += 1
        if bool(done[0]):
            if int(codes[0, 0]) != model.config.codec_eos_id:
                frames.append(codes[0])
            break
        frames.append(codes[0])
    gen.release(0)
    if not frames:
        return torch.zeros((0, model.config.num_code_groups), dtype=torch.long, device=model.device)
    return torch.stack(frames)


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
