"""QwenTTS: a native streaming LiveKit `tts.TTS` over our engine, plus the exact-20 ms frame path.

Two ways in, one synthesis core (`_synthesize_segments`):
- `frames(text, reply_id=, hooks=)` is what our `Agent.tts_node` uses: LLM text -> TextBridge segments ->
  engine packets -> exact `frame_ms` `rtc.AudioFrame`s, each yielded the moment its packet exists (no
  AudioEmitter in between: it would re-chunk to 10 ms tails and progressive sizes, see
  reference/livekit_agents.md §1.3). Frames carry `userdata = {"reply_id", "t_ready"}` so the audio
  output can attribute them to a reply and stamp `first_frame_published`.
- `stream()` / `synthesize()` are the framework's plugin interface (AudioEmitter protocol: initialize,
  `_mark_started`, start_segment, push, flush, end_segment), for code that uses the TTS directly.

Two text paths, chosen by `text_input` (AgentConfig.tts_text_input, TTS_TEXT_INPUT):
- "segments": the TextBridge cuts the LLM text into segments (a short starter, then clauses and
  sentences), each spoken by its own engine stream (`_synthesize_segments`).
- "tokens" (default): the LLM text goes into ONE engine stream per reply as it arrives (`_synthesize_tokens`), in
  the model's streaming-text layout (one text token joins each codec frame step), so the first audio needs only
  the first couple of tokens and no punctuation. Past what one stream's KV positions can speak, the stream is
  closed and the rest of the reply goes through the segment path after it. Backends without `open_text_stream`
  (the remote one) use segments.

The language of a reply: `TTS_LANGUAGE` when it names one; with "auto" (the default) the caller's language,
which the call hands over with each transcript (`follow_caller`, ISO 639-1 from the STT) and which a reply takes
when it starts: the Qwen3-TTS name for the ten languages it speaks (zh -> chinese, ...), "auto" for any other or
an unknown one (the model then decides from the text). A language the loaded model does not list is "auto" too.

Pipelining: a producer task runs the bridge's segments through the engine one after another into an
unbounded frame queue, so segment N+1 is synthesised while segment N plays (no gap between
segments). Cancellation: cancelling the producer (the DuplexController does on barge-in, the
framework does when it closes the node) closes the engine stream via `aclosing`, which stops its GPU
work. A failing segment is logged once with the turn id and ends the reply's audio; the call goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, APIError, tts, utils

from agent.engine_client import TTSBackend
from common.audio_format import SAMPLE_RATE
from tts_engine import SegmenterOptions, StreamSegmenter, TextFeedFull

logger = logging.getLogger("agent.tts")

#: ISO 639-1 -> the language names Qwen3-TTS takes (shared/reference/qwen3_tts.md: codec_language_id)
QWEN_LANGUAGES = {"zh": "chinese", "en": "english", "ja": "japanese", "ko": "korean", "de": "german",
                  "fr": "french", "es": "spanish", "it": "italian", "pt": "portuguese", "ru": "russian"}


@dataclass
class SynthesisHooks:
    """Per-reply callbacks (all on the session loop). Times are perf_counter seconds."""

    on_first_text: Callable[[float], None] | None = None
    on_first_packet: Callable[[float], None] | None = None
    on_segment: Callable[[str], None] | None = None
    on_task: Callable[[asyncio.Task[None]], None] | None = None
    on_error: Callable[[Exception], None] | None = None


class FrameCutter:
    """Cuts int16 PCM into exact frames; the remainder waits for the next packet, the last is zero-padded."""

    def __init__(self, samples_per_frame: int, reply_id: str) -> None:
        self.spf = samples_per_frame
        self.reply_id = reply_id
        self._rest = np.zeros(0, dtype=np.int16)

    def push(self, pcm: np.ndarray, t_ready: float) -> list[rtc.AudioFrame]:
        data = pcm.astype(np.int16, copy=False).reshape(-1)
        if self._rest.size:
            data = np.concatenate([self._rest, data])
        n = data.size // self.spf
        frames = [self._frame(data[i * self.spf : (i + 1) * self.spf], t_ready) for i in range(n)]
        self._rest = data[n * self.spf :].copy()
        return frames

    def flush(self, t_ready: float) -> list[rtc.AudioFrame]:
        if not self._rest.size:
            return []
        padded = np.zeros(self.spf, dtype=np.int16)
        padded[: self._rest.size] = self._rest
        self._rest = np.zeros(0, dtype=np.int16)
        return [self._frame(padded, t_ready)]

    def _frame(self, samples: np.ndarray, t_ready: float) -> rtc.AudioFrame:
        return rtc.AudioFrame(
            samples.tobytes(),
            SAMPLE_RATE,
            1,
            self.spf,
            userdata={"reply_id": self.reply_id, "t_ready": t_ready},
        )


class QwenTTS(tts.TTS):
    def __init__(
        self,
        backend: TTSBackend,
        *,
        speaker: str = "serena",
        language: str = "auto",
        frame_ms: int = 20,
        bridge_options: SegmenterOptions | None = None,
        text_input: str = "segments",
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=False),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
        )
        if SAMPLE_RATE * frame_ms % 1000:
            raise ValueError(f"frame_ms={frame_ms} does not give whole samples at {SAMPLE_RATE} Hz")
        self.backend = backend
        self.speaker = speaker
        self.language = language  # configured (TTS_LANGUAGE); "auto" follows the caller
        self.caller_language = "auto"  # the Qwen3-TTS name of the caller's language, set by follow_caller
        self.frame_ms = frame_ms
        self.samples_per_frame = SAMPLE_RATE * frame_ms // 1000
        self.bridge_options = bridge_options or SegmenterOptions()
        if text_input not in ("segments", "tokens"):
            raise ValueError(f"text_input={text_input!r} is not allowed; allowed values: segments, tokens")
        self.text_input = text_input if hasattr(backend, "open_text_stream") else "segments"

    @property
    def model(self) -> str:
        return "qwen3-tts"

    @property
    def provider(self) -> str:
        return "tts_engine"

    # -- the caller's language -----------------------------------------------------------------
    def follow_caller(self, code: str) -> None:
        """The caller spoke `code` (ISO 639-1, e.g. "zh" or "zh-CN"; "" = unknown): the next replies use its
        Qwen3-TTS name, or "auto" where the model does not speak it."""
        name = QWEN_LANGUAGES.get(code.split("-")[0].strip().lower(), "auto")
        known = getattr(getattr(self.backend, "engine", None), "languages", None)
        self.caller_language = name if known is None or name in known else "auto"

    @property
    def reply_language(self) -> str:
        """The language a reply starting now is spoken in."""
        return self.caller_language if self.language == "auto" else self.language

    # -- the core ----------------------------------------------------------------------------
    async def _synthesize_segments(
        self,
        segments: AsyncIterable[str],
        emit: Callable[[rtc.AudioFrame], None],
        *,
        reply_id: str,
        hooks: SynthesisHooks,
        language: str | None = None,
    ) -> None:
        language = language or self.reply_language
        first_text = first_packet = True
        async for segment in segments:
            if first_text:
                first_text = False
                if hooks.on_first_text:
                    hooks.on_first_text(time.perf_counter())
            if hooks.on_segment:
                hooks.on_segment(segment)
            stream = self.backend.stream(segment, speaker=self.speaker, language=language)
            async with contextlib.aclosing(stream):
                on_first = hooks.on_first_packet if first_packet else None
                first_packet = not await self._play(stream, reply_id, emit, on_first) and first_packet

    async def _play(
        self,
        packets: AsyncIterable[Any],
        reply_id: str,
        emit: Callable[[rtc.AudioFrame], None],
        on_first_packet: Callable[[float], None] | None,
    ) -> bool:
        """Cut each engine packet into exact frames the moment it lands; True when any packet came."""
        cutter = FrameCutter(self.samples_per_frame, reply_id)
        t_last = time.perf_counter()
        any_packet = False
        async for packet in packets:
            if not any_packet:
                any_packet = True
                if on_first_packet is not None:
                    on_first_packet(packet.t_ready)
            t_last = packet.t_ready
            for frame in cutter.push(packet.pcm, packet.t_ready):
                emit(frame)
        for frame in cutter.flush(t_last):
            emit(frame)
        return any_packet

    async def _synthesize(self, text: AsyncIterable[str], emit: Callable[[rtc.AudioFrame], None], *,
                          reply_id: str, hooks: SynthesisHooks) -> None:
        """The reply's text, by the configured path, in the language the reply starts with."""
        language = self.reply_language
        if self.text_input == "tokens":
            await self._synthesize_tokens(text, emit, reply_id=reply_id, hooks=hooks, language=language)
        else:
            await self._synthesize_segments(self._segments(text), emit, reply_id=reply_id, hooks=hooks,
                                            language=language)

    async def _synthesize_tokens(self, text: AsyncIterable[str], emit: Callable[[rtc.AudioFrame], None], *,
                                 reply_id: str, hooks: SynthesisHooks, language: str) -> None:
        """LLM text pushed into one streaming-text engine stream as it arrives; packets out as they exist."""
        # not in TTSBackend: only LocalBackend has it, and text_input is "tokens" only for a backend that does
        open_stream = self.backend.open_text_stream  # type: ignore[attr-defined]  # LocalBackend's only (__init__)
        stream = open_stream(speaker=self.speaker, language=language)
        rest: list[str] = []  # text past what the stream can speak: the segment path takes it afterwards

        pushed: list[str] = []

        async def feed() -> None:
            first = True
            try:
                async for chunk in text:
                    if rest:
                        rest.append(chunk)
                        continue
                    if first and chunk.strip():
                        first = False
                        if hooks.on_first_text:
                            hooks.on_first_text(time.perf_counter())
                    try:
                        stream.push(chunk)
                    except TextFeedFull:
                        rest.append(chunk)
                        stream.close()
                        continue
                    pushed.append(chunk)
            finally:
                stream.close()
                if pushed and hooks.on_segment:  # one engine stream = one segment in the trace
                    hooks.on_segment("".join(pushed))

        feeder = asyncio.create_task(feed(), name=f"tts-text-feed-{reply_id}")
        try:
            await self._play(stream, reply_id, emit, hooks.on_first_packet)
            await feeder  # the reply's text is complete (and surfaces an LLM-side exception)
        finally:
            await stream.aclose()  # stops the engine's work for this reply now (barge-in)
            await utils.aio.cancel_and_wait(feeder)
        if rest:
            async def remaining() -> AsyncIterator[str]:
                for chunk in rest:
                    yield chunk

            later = SynthesisHooks(on_segment=hooks.on_segment, on_task=hooks.on_task, on_error=hooks.on_error)
            await self._synthesize_segments(self._segments(remaining()), emit, reply_id=reply_id, hooks=later,
                                            language=language)

    async def _segments(self, text: AsyncIterable[str]) -> AsyncIterator[str]:
        """TextBridge over a text stream, read in its own task so synthesis never waits on the LLM."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def read() -> None:
            bridge = StreamSegmenter(self.bridge_options)
            try:
                async for chunk in text:
                    for seg in bridge.push(chunk):
                        queue.put_nowait(seg)
                for seg in bridge.flush():
                    queue.put_nowait(seg)
            finally:
                queue.put_nowait(None)

        reader = asyncio.create_task(read(), name="tts-text-reader")
        try:
            while (seg := await queue.get()) is not None:
                yield seg
            await reader  # surfaces an LLM-side exception
        finally:
            await utils.aio.cancel_and_wait(reader)

    async def frames(
        self, text: AsyncIterable[str], *, reply_id: str, hooks: SynthesisHooks | None = None
    ) -> AsyncIterator[rtc.AudioFrame]:
        hooks = hooks or SynthesisHooks()
        queue: asyncio.Queue[rtc.AudioFrame | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                await self._synthesize(text, queue.put_nowait, reply_id=reply_id, hooks=hooks)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged once by the hook owner (with the turn id)
                if hooks.on_error:
                    hooks.on_error(exc)
                else:
                    logger.error("TTS failed for reply %s: %s", reply_id, exc)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(produce(), name=f"tts-producer-{reply_id}")
        if hooks.on_task:
            hooks.on_task(task)
        try:
            while (frame := await queue.get()) is not None:
                yield frame
        finally:
            await utils.aio.cancel_and_wait(task)

    # -- framework plugin interface ----------------------------------------------------------
    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return _QwenChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> tts.SynthesizeStream:
        return _QwenSynthesizeStream(tts=self, conn_options=conn_options)


class _QwenChunkedStream(tts.ChunkedStream):
    def __init__(self, *, tts: QwenTTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._qwen = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id=uuid.uuid4().hex, sample_rate=SAMPLE_RATE, num_channels=1, mime_type="audio/pcm"
        )

        async def one() -> AsyncIterator[str]:
            yield self.input_text

        try:
            await self._qwen._synthesize_segments(
                one(), lambda f: output_emitter.push(bytes(f.data)), reply_id="chunked", hooks=SynthesisHooks()
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise APIError(f"TTS failed: {exc}", retryable=False) from exc
        output_emitter.flush()


class _QwenSynthesizeStream(tts.SynthesizeStream):
    def __init__(self, *, tts: QwenTTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._qwen = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id=uuid.uuid4().hex,
            sample_rate=SAMPLE_RATE,
            num_channels=1,
            mime_type="audio/pcm",
            frame_size_ms=self._qwen.frame_ms,
            stream=True,
        )
        output_emitter.start_segment(segment_id=uuid.uuid4().hex)

        async def text() -> AsyncIterator[str]:
            async for item in self._input_ch:
                if isinstance(item, str):
                    yield item

        hooks = SynthesisHooks(on_first_text=lambda _t: self._mark_started())
        try:
            await self._qwen._synthesize(
                text(), lambda f: output_emitter.push(bytes(f.data)), reply_id="stream", hooks=hooks
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise APIError(f"TTS failed: {exc}", retryable=False) from exc
        output_emitter.end_segment()
