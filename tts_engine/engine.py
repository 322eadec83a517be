"""`Engine`: the one public entry point of the TTS engine: text in, 24 kHz PCM packets out.

    engine = Engine.load(model_dir, EngineConfig.from_env())     # weights + warm-up
    async for packet in engine.stream(text, speaker="serena"):    # Packet: pcm int16, index, frames, t_ready
        ...
    pcm = await engine.synthesize(text, speaker="serena")         # the same path, concatenated
    stream = engine.open_text_stream("serena", layout="tokens")    # text pushed as it comes: push(), close()

Contract (docs/engine.md has the whole story):
- All model work runs on one worker thread (runtime/scheduler.py), never on the event loop. Calls validate on the
  caller's thread (bad input raises at once, a `TTSInputError` naming the field) and return a handle to iterate.
- Leaving the iteration, `aclose()`, or cancelling the consuming task cancels the stream within one frame step. A
  slow consumer never stalls others: past `max_buffered_seconds` of unread audio its stream alone ends with
  `StreamOverflowError`.
- At most `capacity()` streams run at once (measured at load on CUDA, every slot on a CPU); up to `queue_limit` more
  wait in arrival order; one more raises `EngineBusyError` at once. Each open stream holds one reservation until it
  ends (`active_streams()`, `load_fraction()`).
- Text of any length up to `max_text_chars`: a text too long for one stream's KV positions is cut at sentence
  boundaries and spoken as one stream of consecutive segments (runtime/chained.py). Text that arrives in pieces:
  `open_text_stream`, layout "segments" (cut as it arrives, each segment spoken whole: runtime/chained.py,
  text/segment.py) or "tokens" (the model's streaming-text layout, one token per frame: runtime/text_feed.py for the
  caller's side, runtime/text_rows.py and runtime/slots.py for the worker's).
- `synthesize` is `stream` concatenated; greedy or seeded sampling gives the same bytes run after run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from common.audio_format import MAX_PACKET_FRAMES, SAMPLE_RATE, SAMPLES_PER_FRAME
from common.niceness import lower_thread
from tts_engine.config import EngineConfig
from tts_engine.errors import (
    ConfigError,
    EmptyTextError,
    EngineBusyError,
    TextTooLongError,
    TTSInputError,
    UnknownLanguageError,
    UnknownSpeakerError,
)
from tts_engine.model.loader import load_model
from tts_engine.runtime.admission import AdmissionPolicy, resolve_slots
from tts_engine.runtime.chained import ChainedStream, SegmentSource, TextFitter
from tts_engine.runtime.codedump import CodeDumper
from tts_engine.runtime.codegen import HARD_CEILING_FRAMES, CodeGenerator, SamplingParams
from tts_engine.runtime.fusion import fuse_model
from tts_engine.runtime.metrics import EngineCounters, StreamMetrics
from tts_engine.runtime.scheduler import Scheduler
from tts_engine.runtime.step_graphs import StepGraphs
from tts_engine.runtime.stream import (
    EngineClosedError,
    Packet,
    StreamChannel,
    StreamHandle,
    StreamOverflowError,
    StreamRequest,
)
from tts_engine.runtime.text_feed import TextFeed, TokenTextStream

__all__ = ["Engine", "EngineClosedError", "Packet", "StreamHandle", "StreamMetrics", "StreamOverflowError"]

log = logging.getLogger(__name__)

WARMUP_TEXT = "Hello, this is a warm-up."
LAYOUTS = ("segments", "tokens")


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise TTSInputError(f"{name}={value!r} is not allowed; give an integer {lo}..{hi}", field=name)


@dataclass(frozen=True)
class CallOptions:
    """One call's checked options: everything but its text (a chain's segments share them)."""

    speaker: str
    language: str
    instruct: str | None
    packet_frames: int | None
    first_packet_frames: int | None
    seed: int | None
    max_frames: int | None


class Engine:
    """Loads a checkpoint once and serves many concurrent streams from one worker thread."""

    def __init__(self, model: Any, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.device: torch.device = model.device
        self.counters = EngineCounters()
        fusion = fuse_model(model)  # CUDA: compiled (fused) layer pieces, before any graph is captured
        self.slots = resolve_slots(config, model)
        self.codegen = CodeGenerator(model, max_slots=self.slots, max_seq_len=config.max_positions,
                                     cap_scale=config.runaway_scale)
        self._dumper = CodeDumper(config.code_dump_dir) if config.code_dump_enable else None
        self._open: set[int] = set()  # id() of channels holding a reservation
        self._lock = threading.Lock()
        self._closed = False
        self.max_buffered_frames = max(1, int(config.max_buffered_seconds * SAMPLE_RATE / SAMPLES_PER_FRAME))
        # CUDA graphs of the two step call sites, captured once here (before the worker starts), shared by all streams
        graphs = StepGraphs(
            self.codegen, model.codec, max_slots=self.slots, device=self.device,
            talker=config.cudagraph_talker, predictor=config.cudagraph_predictor,
            decoder_graph=config.cudagraph_decoder,
            sampling_variants=(False,) if config.deterministic and config.deterministic_policy == "greedy"
            else (False, True),
        )
        graphs.stats.fusion = fusion
        self.codegen.graph_stats = graphs.stats  # stats() reports graph_steps / eager_steps / fallback_reasons
        self.scheduler = Scheduler(
            self.codegen,
            model.codec,
            max_slots=self.slots,
            device=self.device,
            eos_code=int(model.config.codec_eos_id),
            counters=self.counters,
            on_stream_end=self._on_stream_end,
            timing=config.metrics,
            graphs=graphs,
            policy=AdmissionPolicy(max_per_step=config.admit_per_step, client_buffer_ms=config.client_buffer_ms),
        )
        if self.device.type == "cuda":  # capacity from measured step costs (CPU: every slot, nothing measured)
            self.scheduler.measure_costs(self._admit_probe, config.step_budget_ms)
        worker_tid = self.scheduler.start()
        if self.device.type == "cpu":  # the media path first (common/niceness.py)
            lower_thread(worker_tid, config.cpu_nice)
        self.warmup_s: float | None = None
        self._fitter = TextFitter(self.codegen.max_seq_len, model.config.supports_instruct, model.tokenizer)

    def _admit_probe(self, slots: list[int]) -> None:
        """Real admissions (prompts + one batched prefill) for the cost measurement at load."""
        prompts = [self.codegen.prepare(WARMUP_TEXT, self.speakers[0], "auto") for _ in slots]
        self.codegen.admit_many(slots, prompts, [SamplingParams.greedy()] * len(slots))

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def load(
        cls, model_dir: str | Path | None = None, config: EngineConfig | None = None, *, warmup: bool = True
    ) -> Engine:
        """Load weights (CheckpointError names the missing/bad file) and warm the engine up."""
        config = config if config is not None else EngineConfig.from_env()
        model_dir = str(model_dir) if model_dir else config.model_dir
        if not model_dir:
            raise ConfigError("no model directory: pass model_dir or set TTS_DEEP_STREAM_MODEL_DIR")
        config = dataclasses.replace(config, model_dir=model_dir)
        model = load_model(model_dir, device=config.device, dtype=config.dtype)
        if config.cpu_threads and model.device.type == "cpu":
            torch.set_num_threads(config.cpu_threads)  # process-wide: leave the media path a core (config.py)
        engine = cls(model, config)
        if warmup:
            engine.warmup()
        return engine

    def warmup(self, frames: int = 4) -> float:
        """Run a short real stream through every stage (allocations, kernels, autotuning). Returns seconds.
        Safe to call from any thread, with or without a running event loop."""

        async def run() -> None:
            handle = self.stream(WARMUP_TEXT, speaker=self.speakers[0], first_packet_frames=1, packet_frames=1)
            async with handle:
                async for packet in handle:
                    if packet.index + 1 >= frames:
                        break

        t0 = time.perf_counter()
        error: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(run())
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                error.append(exc)

        thread = threading.Thread(target=target, name="tts-engine-warmup")
        thread.start()
        thread.join()
        if error:
            raise error[0]
        self.warmup_s = time.perf_counter() - t0
        return self.warmup_s

    # ---- requests -------------------------------------------------------------------------------
    @property
    def speakers(self) -> list[str]:
        return list(self.model.speakers)

    @property
    def languages(self) -> list[str]:
        return list(self.model.languages)

    def validate(
        self,
        text: object,
        speaker: object,
        language: object = "auto",
        *,
        packet_frames: object = None,
        first_packet_frames: object = None,
    ) -> tuple[str, str, str]:
        """Cheap checks on the caller's thread; returns normalised (text, speaker, language)."""
        text = self._check_text(text)
        speaker, language = self._check_voice(speaker, language)
        _check_int("packet_frames", packet_frames, 1, MAX_PACKET_FRAMES)
        _check_int("first_packet_frames", first_packet_frames, 1, MAX_PACKET_FRAMES)
        return text, speaker, language

    def _check_text(self, text: object) -> str:
        if not isinstance(text, str):
            raise TTSInputError(f"text must be a string, got {type(text).__name__}", field="text")
        if not text.strip():
            raise EmptyTextError()
        if len(text) > self.config.max_text_chars:
            raise TextTooLongError(len(text), self.config.max_text_chars)
        return text

    def _check_voice(self, speaker: object, language: object) -> tuple[str, str]:
        if not isinstance(speaker, str):
            raise TTSInputError(f"speaker must be a string, got {type(speaker).__name__}", field="speaker")
        if speaker.strip().lower() not in self.speakers:
            raise UnknownSpeakerError(speaker, self.speakers)
        if language is None:
            language = "auto"
        if not isinstance(language, str):
            raise TTSInputError(f"language must be a string, got {type(language).__name__}", field="language")
        if language.strip().lower() not in self.languages:
            raise UnknownLanguageError(language, self.languages)
        return speaker.strip().lower(), language.strip().lower()

    def _check_call(self, text: object, speaker: object, language: object, *, instruct: str | None = None,
                    packet_frames: object = None, first_packet_frames: object = None, seed: object = None,
                    max_frames: object = None) -> tuple[str, CallOptions]:
        """Every check of a call (text None: text still to come), counted in `input_errors` when one fails."""
        if self._closed or not self.scheduler.alive:
            raise EngineClosedError("the TTS engine " + ("is closed" if self._closed else "worker is not running"))
        try:
            checked, speaker, language = self.validate("-" if text is None else text, speaker, language,
                                                       packet_frames=packet_frames,
                                                       first_packet_frames=first_packet_frames)
            _check_int("seed", seed, 0, 2**62 - 1)
            _check_int("max_frames", max_frames, 1, HARD_CEILING_FRAMES)
        except TTSInputError:
            self.counters.add("input_errors")
            raise
        # validate() and _check_int raised unless each of these is None or an integer in its range
        return ("" if text is None else checked), CallOptions(
            speaker=speaker, language=language, instruct=instruct, packet_frames=cast("int | None", packet_frames),
            first_packet_frames=cast("int | None", first_packet_frames), seed=cast("int | None", seed),
            max_frames=cast("int | None", max_frames),
        )

    def stream(
        self,
        text: str,
        speaker: str,
        language: str = "auto",
        *,
        instruct: str | None = None,
        packet_frames: int | None = None,
        first_packet_frames: int | None = None,
        seed: int | None = None,
        max_frames: int | None = None,
        request_id: str | None = None,
    ) -> StreamHandle | ChainedStream:
        """Start one stream; iterate the returned handle with `async for`. Call from a running event loop.
        A text too long for one stream's KV positions is cut at sentence boundaries and spoken as one continuous
        stream of consecutive segments (runtime/chained.py); `max_frames` then caps each segment."""
        text, options = self._check_call(text, speaker, language, instruct=instruct, packet_frames=packet_frames,
                                         first_packet_frames=first_packet_frames, seed=seed, max_frames=max_frames)
        rid = request_id or uuid.uuid4().hex[:16]
        pieces = self._fitter.iter_split(text, instruct)
        head = list(itertools.islice(pieces, 2))  # the rest is cut while these are spoken
        if len(head) > 1:
            return self._open_chain(SegmentSource(head, closed=True, more=pieces), len(text), rid, options)
        channel = self._channel(text, rid, options)
        self._reserve(channel)
        self.counters.add("streams_started")
        self.scheduler.submit(channel)
        return StreamHandle(channel, self._release)

    def open_text_stream(self, speaker: str, language: str = "auto", *, instruct: str | None = None,
                         request_id: str | None = None, layout: str = "segments",
                         **options: Any) -> ChainedStream | TokenTextStream:
        """A stream whose text arrives in pieces: `push(text)` as it comes, `close()` at its end; iterate the handle
        for audio. Options as `stream()`. Pushed text counts against TTS_DEEP_STREAM_MAX_TEXT_CHARS; either way a
        stream whose text runs dry takes no GPU step.
        - layout "segments": the text is cut into segments as it arrives (text/segment.StreamSegmenter), each spoken
          whole as an engine stream of its own, all one `ChainedStream` (runtime/chained.py).
        - layout "tokens": one engine stream in the model's streaming-text layout, one text token joining each frame
          step (`TokenTextStream`, runtime/text_feed.py); it is submitted once its first token is known, and the
          worker parks it while its text runs dry (runtime/text_rows.py)."""
        if layout not in LAYOUTS:
            raise TTSInputError(f"layout={layout!r} is not allowed; allowed values: {', '.join(LAYOUTS)}",
                                field="layout")
        _, checked = self._check_call(None, speaker, language, instruct=instruct, **options)
        rid = request_id or uuid.uuid4().hex[:16]
        if layout == "segments":
            return self._open_chain(SegmentSource(), 0, rid, checked)
        feed = TextFeed(self.model.tokenizer)
        channel = self._channel("", rid, checked, text_feed=feed)
        self._reserve(channel)
        self.counters.add("streams_started")
        return TokenTextStream(StreamHandle(channel, self._release), feed, lambda: self.scheduler.submit(channel),
                               self.scheduler.wake, self.config.max_text_chars, self._fitter.stream_tokens(instruct))

    def _open_chain(self, source: SegmentSource, chars: int, request_id: str, options: CallOptions) -> ChainedStream:
        """The chain behind a long text and the segments layout: one reservation, its segments started one by one."""

        def open_segment(text: str, segment_id: str) -> StreamHandle:
            channel = self._channel(text, segment_id, options)
            self.counters.add("streams_started")
            self.scheduler.submit(channel)
            return StreamHandle(channel, lambda _channel: None)  # the chain holds the reservation

        metrics = StreamMetrics(request_id, chars, options.speaker, options.language)
        chain = ChainedStream(source, open_segment, metrics, self._release,
                              fit=lambda segment: self._fitter.split(segment, options.instruct),
                              max_text_chars=self.config.max_text_chars)
        self._reserve(chain)
        return chain

    def _channel(self, text: str, request_id: str, options: CallOptions,
                 text_feed: TextFeed | None = None) -> StreamChannel:
        metrics = StreamMetrics(request_id, len(text), options.speaker, options.language)
        request = StreamRequest(
            text=text, speaker=options.speaker, language=options.language, instruct=options.instruct,
            params=self._sampling_params(options.seed), metrics=metrics, max_frames=options.max_frames,
            first_packet_frames=options.first_packet_frames or self.config.first_packet_frames,
            packet_frames=options.packet_frames or self.config.packet_frames, text_feed=text_feed,
        )
        return StreamChannel(request, asyncio.get_running_loop(), self.max_buffered_frames)

    def segments(self, text: str, instruct: str | None = None) -> list[str]:
        """The pieces `stream(text)` speaks one after another (one piece when the text fits one stream)."""
        return self._fitter.split(text, instruct)

    async def synthesize(self, text: str, speaker: str, language: str = "auto", **options: Any) -> np.ndarray:
        """Offline synthesis: the streaming path, concatenated. Returns int16 PCM at 24 kHz."""
        parts = [packet.pcm async for packet in self.stream(text, speaker, language, **options)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    def _sampling_params(self, seed: int | None) -> SamplingParams:
        gen = self.model.config.generation
        if self.config.deterministic and self.config.deterministic_policy == "greedy":
            return SamplingParams.greedy()
        if self.config.deterministic:
            return SamplingParams.from_generation_config(gen, seed=self.config.seed if seed is None else seed)
        return SamplingParams.from_generation_config(gen, seed=secrets.randbelow(2**62) if seed is None else seed)

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _reserve(self, key: StreamChannel | ChainedStream) -> None:
        """One reservation per open stream (a chain holds one for all its segments), or EngineBusyError."""
        with self._lock:  # the check and the add together; `_release` needs no lock
            if len(self._open) >= self.capacity() + self.config.queue_limit:
                self.counters.add("streams_rejected_busy")
                raise EngineBusyError(
                    f"the engine is busy: {self.capacity()} streams run at once (its capacity) and "
                    f"{self.config.queue_limit} may wait (TTS_DEEP_STREAM_QUEUE); retry shortly"
                )
            self._open.add(id(key))

    def _release(self, key: StreamChannel | ChainedStream) -> None:
        """Give a reservation back (twice is harmless). Lock-free, one atomic set operation: it runs from the
        worker thread, from consumers and from `__del__`, which may interrupt a thread holding the lock."""
        self._open.discard(id(key))

    def _on_stream_end(self, channel: StreamChannel) -> None:
        """Called on the worker thread when a stream leaves the engine (any reason)."""
        self._release(channel)
        req = channel.request
        self.counters.observe_stream(req.metrics)
        if self._dumper is not None and req.metrics.status == "completed":
            self._dumper.submit(
                req.metrics.request_id,
                req.codes,
                {
                    "request_id": req.metrics.request_id,
                    "text": req.text,
                    "speaker": req.speaker,
                    "language": req.language,
                    "seed": getattr(req.params, "seed", None),
                    "end_reason": req.metrics.end_reason,
                    "frames": req.metrics.frames,
                    "sample_rate": SAMPLE_RATE,
                    "model_dir": self.config.model_dir,
                },
            )

    def flush_code_dumps(self) -> None:
        if self._dumper is not None:
            self._dumper.flush()

    # ---- load reporting -------------------------------------------------------------------------
    def capacity(self) -> int:
        """Streams that run at once without slowing past real time (measured at load on CUDA; slots on a CPU)."""
        return self.scheduler.capacity

    def active_streams(self) -> int:
        with self._lock:
            return len(self._open)

    def load_fraction(self) -> float:
        """Open streams / capacity, in [0, 1] (LiveKit's load_fnc)."""
        return min(1.0, self.active_streams() / self.capacity())

    @property
    def healthy(self) -> bool:
        return not self._closed and self.scheduler.alive

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "device": str(self.device),
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "model_dir": self.config.model_dir,
            "capacity": self.capacity(),
            "slots": self.slots,
            "queue_limit": self.config.queue_limit,
            "step_budget_ms": self.config.step_budget_ms,
            "open_streams": self.active_streams(),
            "running_streams": self.scheduler.running_count,
            "waiting_streams": self.scheduler.waiting_count,
            "pending_streams": self.scheduler.pending_count,
            "worker_alive": self.scheduler.alive,
            "warmup_s": self.warmup_s,
        }
        out.update(self.scheduler.costs.as_dict())
        out.update(self.counters.snapshot())
        graph_stats = getattr(self.codegen, "graph_stats", None)
        if graph_stats is not None and hasattr(graph_stats, "as_dict"):
            out["cuda_graphs"] = graph_stats.as_dict()
        return out

    def close(self) -> None:
        """Stop the worker (open streams end with EngineClosedError) and flush code dumps."""
        if self._closed:
            return
        self._closed = True
        self.scheduler.close()
        if self._dumper is not None:
            self._dumper.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
