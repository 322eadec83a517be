"""`python -m tts_engine bench load`: many concurrent streams with open-loop arrivals.

Contract (the figures' names are the engine's own: docs/engine.md, "Load reporting and stats"):
- Levels: `--levels 1,16,...,512` concurrent streams. Per level, N streams arrive open-loop (their start times
  are fixed in advance, never waiting for earlier streams): `--arrivals window` spreads the N starts evenly over
  `--window` seconds; `--arrivals poisson` draws exponential gaps at `--rate` streams/s (seeded).
- Every stream is held to exactly `--frames` frames (the bench-only fixed frame count of bench/ours.py), first
  packet 1 frame, then the engine's packet size.
- Text input: `whole` (default) gives each stream its text at once (`Engine.stream`); `tokens` opens a
  streaming-text stream (`Engine.open_text_stream(layout="tokens")`) and pushes the text one word every
  `--word-interval-ms` as an LLM streams it (a leading space from the second word on), the words repeated until
  there are at least `--frames` of them, so the text never ends before the frames do; then closes it.
- Per stream: first audio = the call (`engine.stream()` / `open_text_stream()`, the first word pushed with it) ->
  first packet's PCM on the host (`Packet.t_ready`); in token mode also `text_wait_ms` (the call -> the first
  frame's text known: two final tokens, or the text closed) and `after_text_ms` (that -> first packet, the
  engine's share). RTF = (last packet's t_ready - call) / audio duration. Lateness of packet k for a client
  buffer of B ms: t_ready(k) - (t_ready(first) + audio delivered before k + B). A stream is *viable* at B when no
  packet is late; streaming viability = viable streams / streams that ran.
- A stream the engine refuses (`EngineBusyError`, the server's 503 + Retry-After) counts as refused, never as
  viable; refusals are reported beside viability.
- Per level: first audio P50/P95/P99, RTF P50/P95, viability and late-stream counts at each B (`--buffers-ms`,
  default 0 and 100), worst lateness, aggregate seconds of audio per wall second, peak GPU memory, and the
  engine's own step statistics over the level.
Nothing here changes the engine; the level runs through the public `Engine.stream` API like any client.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.bench.stats import BenchError, percentile


@dataclass
class StreamTrace:
    """What one client saw: when it asked, and each packet's (t_ready, samples); when the engine admitted it."""

    t_call: float
    packets: list[tuple[float, int]] = field(default_factory=list)
    refused: bool = False
    error: str | None = None
    t_admitted: float | None = None  # engine metrics: queue + prompt + prefill done (first audio = this + 1 step)
    t_request: float | None = None  # engine metrics: when `engine.stream()` ran (the client task may start late)
    t_text: float | None = None  # token mode: when the first frame's text was known

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.packets)

    def first_audio_ms(self) -> float:
        return (self.packets[0][0] - self.t_call) * 1000.0

    def rtf(self) -> float:
        return (self.packets[-1][0] - self.t_call) / (self.samples / SAMPLE_RATE)

    def worst_lateness_ms(self, buffer_ms: float) -> float:
        """Largest t_ready - deadline over the packets (<= 0: every packet in time for this buffer)."""
        t_first = self.packets[0][0]
        delivered = 0
        worst = float("-inf")
        for t_ready, n in self.packets:
            deadline = t_first + delivered / SAMPLE_RATE + buffer_ms / 1000.0
            worst = max(worst, (t_ready - deadline) * 1000.0)
            delivered += n
        return worst


def arrival_offsets(n: int, mode: str, window_s: float, rate: float, seed: int = 0) -> list[float]:
    """Start offsets (s) of n streams: evenly over window_s, or Poisson at `rate` streams/s."""
    if n < 1:
        raise BenchError(f"a level needs >= 1 stream, got {n}")
    if mode == "window":
        return [window_s * i / n for i in range(n)]
    if mode == "poisson":
        if rate <= 0:
            raise BenchError(f"--rate={rate} is out of range for poisson arrivals (allowed: > 0)")
        rng = random.Random(seed)
        t, out = 0.0, []
        for _ in range(n):
            out.append(t)
            t += rng.expovariate(rate)
        return out
    raise BenchError(f"--arrivals={mode!r} is not allowed; choose window or poisson")


async def _client(engine: Any, trace: StreamTrace, text: str, speaker: str, language: str, frames: int) -> None:
    from tts_engine.errors import EngineBusyError

    try:
        handle = engine.stream(text, speaker, language, max_frames=frames, first_packet_frames=1)
    except EngineBusyError:
        trace.refused = True
        return
    try:
        async for packet in handle:
            trace.packets.append((packet.t_ready, len(packet.pcm)))
    except Exception as exc:  # noqa: BLE001 - recorded per stream, the level goes on
        trace.error = f"{type(exc).__name__}: {exc}"
    trace.t_admitted = getattr(handle.metrics, "t_admitted", None)
    trace.t_request = getattr(handle.metrics, "t_request", None)


def stream_words(text: str, frames: int) -> list[str]:
    """The pieces a token-mode stream pushes: `text`'s words as an LLM streams them (" word" from the second on),
    repeated until there are at least `frames` of them."""
    words = text.split()
    if not words:
        raise BenchError("--text has no words to push")
    out: list[str] = []
    while len(out) < frames:
        out.extend(words)
    return [word if i == 0 else " " + word for i, word in enumerate(out)]


async def _token_client(engine: Any, trace: StreamTrace, words: list[str], interval_s: float, speaker: str,
                        language: str, frames: int) -> None:
    from tts_engine.errors import EngineBusyError

    try:
        stream = engine.open_text_stream(speaker, language, layout="tokens", max_frames=frames, first_packet_frames=1)
    except EngineBusyError:
        trace.refused = True
        return
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def feed() -> None:
        for i, word in enumerate(words):
            if i:
                await asyncio.sleep(max(0.0, t0 + i * interval_s - loop.time()))  # open loop: no drift
            stream.push(word)
            if trace.t_text is None and stream.tokens >= 2:
                trace.t_text = time.perf_counter()
        stream.close()
        if trace.t_text is None:
            trace.t_text = time.perf_counter()

    feeder = asyncio.create_task(feed())
    try:
        async for packet in stream:
            trace.packets.append((packet.t_ready, len(packet.pcm)))
    except Exception as exc:  # noqa: BLE001 - recorded per stream, the level goes on
        trace.error = f"{type(exc).__name__}: {exc}"
    finally:
        feeder.cancel()
    trace.t_admitted = getattr(stream.metrics, "t_admitted", None)
    trace.t_request = getattr(stream.metrics, "t_request", None)


async def run_level(engine: Any, n: int, *, text: str, speaker: str, language: str, frames: int,
                    arrivals: str = "window", window_s: float = 2.0, rate: float = 0.0,
                    seed: int = 0, text_input: str = "whole", word_interval_ms: float = 60.0) -> list[StreamTrace]:
    """Start n streams at their fixed offsets (open loop) and wait for all of them."""
    offsets = arrival_offsets(n, arrivals, window_s, rate, seed)
    if text_input not in ("whole", "tokens"):
        raise BenchError(f"--text-input={text_input!r} is not allowed; choose whole or tokens")
    words = stream_words(text, frames) if text_input == "tokens" else []
    loop = asyncio.get_running_loop()
    t_start = loop.time() + 0.05
    traces: list[StreamTrace] = []
    tasks = []
    for offset in offsets:
        delay = t_start + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        trace = StreamTrace(t_call=time.perf_counter())
        traces.append(trace)
        if text_input == "tokens":
            client = _token_client(engine, trace, words, word_interval_ms / 1000.0, speaker, language, frames)
        else:
            client = _client(engine, trace, text, speaker, language, frames)
        tasks.append(asyncio.create_task(client))
    await asyncio.gather(*tasks)
    return traces


def summarize_level(traces: list[StreamTrace], *, frames: int, buffers_ms: list[float]) -> dict[str, Any]:
    """The per-level figures (see the module docstring)."""
    ran = [t for t in traces if not t.refused and t.error is None and t.packets]
    errors = [t.error for t in traces if t.error]
    short = [t for t in ran if t.samples != frames * SAMPLES_PER_FRAME]
    if short:
        raise BenchError(f"{len(short)} stream(s) produced {short[0].samples} samples, expected "
                         f"{frames * SAMPLES_PER_FRAME} ({frames} frames); the fixed frame count did not hold")
    out: dict[str, Any] = {"streams": len(traces), "ran": len(ran),
                           "refused": sum(t.refused for t in traces), "errors": len(errors),
                           "error_examples": errors[:3]}
    if not ran:
        return out
    first = [t.first_audio_ms() for t in ran]
    rtf = [t.rtf() for t in ran]
    out["first_audio_ms"] = {f"p{q}": round(percentile(first, q), 2) for q in (50, 95, 99)}
    out["first_audio_ms"]["max"] = round(max(first), 2)
    # (call, request, admitted, first packet) of the streams whose engine metrics were read
    split = [(t.t_call, t.t_request, t.t_admitted, t.packets[0][0]) for t in ran
             if t.t_admitted is not None and t.t_request is not None]
    if split:  # first audio = client start + engine queue (+ prompt, prefill) + first step and copy
        for name, values in (("client_start_ms", [request - call for call, request, _, _ in split]),
                             ("queue_ms", [admitted - request for _, request, admitted, _ in split]),
                             ("first_step_ms", [first - admitted for _, _, admitted, first in split])):
            ms = [v * 1000.0 for v in values]
            out[name] = {f"p{q}": round(percentile(ms, q), 2) for q in (50, 95, 99)}
    texted = [(t.t_call, t.t_text, t.packets[0][0]) for t in ran if t.t_text is not None]  # (call, text, first)
    if texted:  # token mode: first audio = waiting for the first frame's text + the engine's share after it
        for name, values in (("text_wait_ms", [text - call for call, text, _ in texted]),
                             ("after_text_ms", [first - text for _, text, first in texted])):
            ms = [v * 1000.0 for v in values]
            out[name] = {f"p{q}": round(percentile(ms, q), 2) for q in (50, 95, 99)}
    out["rtf"] = {"p50": round(percentile(rtf, 50), 4), "p95": round(percentile(rtf, 95), 4),
                  "max": round(max(rtf), 4)}
    for b in buffers_ms:
        worst = [t.worst_lateness_ms(b) for t in ran]
        late = sum(w > 0 for w in worst)
        out[f"buffer_{int(b)}ms"] = {
            "viability": round((len(ran) - late) / len(traces), 4),
            "late_streams": late,
            "worst_lateness_ms": round(max(0.0, max(worst)), 2),
        }
    t0 = min(t.t_call for t in ran)
    t1 = max(t.packets[-1][0] for t in ran)
    out["audio_s_per_s"] = round(sum(t.samples for t in ran) / SAMPLE_RATE / (t1 - t0), 2)
    out["wall_s"] = round(t1 - t0, 3)
    return out


def _step_stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the engine did during a level (counter deltas) and its running figures at the end of it."""
    keys = ("steps", "step_rows", "frames_generated", "admissions_deferred", "slot_moves", "streams_rejected_busy",
            "text_waits", "worker_text_rows_ms_total", "worker_admit_ms_total", "worker_step_ms_total",
            "worker_moves_ms_total")
    out: dict[str, Any] = {k.removesuffix("_total"): round(after.get(k, 0) - before.get(k, 0), 3)
                           for k in keys if k in after}
    if out.get("steps"):
        out["mean_rows_per_step"] = round(out.get("step_rows", 0) / out["steps"], 1)
    for key in ("recent_iteration_ms", "step_overrun", "capacity"):
        out[key] = after.get(key)
    return out


def run_load(engine: Any, levels: list[int], *, text: str, speaker: str, language: str, frames: int,
             arrivals: str, window_s: float, rate: float, buffers_ms: list[float], seed: int = 0,
             pause_s: float = 1.0, progress: Any = print, text_input: str = "whole",
             word_interval_ms: float = 60.0) -> list[dict[str, Any]]:
    """Every level in turn on one loaded engine (idle between levels); returns one summary per level."""
    from common.process import gc_pauses

    pauses = gc_pauses()
    iterations = _IterationTrace(engine)
    results = []
    for n in levels:
        before = engine.stats()
        pauses.reset()
        iterations.reset()
        traces = asyncio.run(run_level(engine, n, text=text, speaker=speaker, language=language, frames=frames,
                                       arrivals=arrivals, window_s=window_s, rate=rate, seed=seed,
                                       text_input=text_input, word_interval_ms=word_interval_ms))
        summary = {"concurrency": n, **summarize_level(traces, frames=frames, buffers_ms=buffers_ms)}
        summary["engine"] = _step_stats_delta(before, engine.stats())
        summary["gc_pauses"] = pauses.snapshot()
        summary["iterations"] = iterations.summary()
        try:
            import torch

            if torch.cuda.is_available():
                summary["gpu_max_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 3)
        except ImportError:  # pragma: no cover
            pass
        results.append(summary)
        if progress is not None:
            progress(f"[bench load] {format_level(summary)}")
        time.sleep(pause_s)  # let the engine drain completely before the next level
    return results


class _IterationTrace:
    """Per worker iteration with streams waiting: how many waited and how many were admitted (the scheduler's
    `on_admission` observer)."""

    def __init__(self, engine: Any) -> None:
        self.records: list[tuple[int, int]] = []
        scheduler = getattr(engine, "scheduler", None)
        if scheduler is not None and hasattr(scheduler, "on_admission"):
            scheduler.on_admission = lambda waiting, admitted: self.records.append((waiting, admitted))

    def reset(self) -> None:
        self.records = []

    def summary(self) -> dict[str, Any]:
        if not self.records:
            return {"with_waiting": 0}
        admitted = [a for _, a in self.records]
        return {"with_waiting": len(self.records), "admitted_none": sum(a == 0 for a in admitted),
                "admitted_mean": round(sum(admitted) / len(admitted), 2),
                "waiting_max": max(w for w, _ in self.records)}


def format_level(s: dict[str, Any]) -> str:
    if "first_audio_ms" not in s:
        return f"N={s['concurrency']}: nothing ran (refused {s.get('refused')}, errors {s.get('errors')})"
    parts = [f"N={s['concurrency']}", f"first audio P50/P95/P99 {s['first_audio_ms']['p50']}/"
             f"{s['first_audio_ms']['p95']}/{s['first_audio_ms']['p99']} ms",
             f"RTF P50/P95 {s['rtf']['p50']}/{s['rtf']['p95']}"]
    for key, v in s.items():
        if key.startswith("buffer_"):
            parts.append(f"viability@{key[7:]} {v['viability']:.3f} (late {v['late_streams']}, "
                         f"worst {v['worst_lateness_ms']} ms)")
    parts.append(f"{s['audio_s_per_s']} audio s/s, refused {s['refused']}, errors {s['errors']}")
    if "text_wait_ms" in s:
        parts.append(f"text wait P95 {s['text_wait_ms']['p95']} ms, after text P95 {s['after_text_ms']['p95']} ms")
    engine = s.get("engine", {})
    if engine.get("steps"):
        per_step = {k[len("worker_"):-len("_ms")]: round(v / engine["steps"], 2) for k, v in engine.items()
                    if k.startswith("worker_")}
        parts.append(f"worker ms per step {per_step}, slot moves {engine.get('slot_moves')}, "
                     f"text waits {engine.get('text_waits')}")
    return ", ".join(parts)


def gate_failures(levels: list[dict[str, Any]], first_p95_ms: float) -> list[str]:
    """What misses the target at each level: a stream with a late packet for the listener buffer the engine was
    told of, a refused or failed stream, or first audio P95 over `first_p95_ms`."""
    out = []
    for s in levels:
        told = int(s.get("client_buffer_ms", 0.0))
        name = f"N={s['concurrency']} ({s.get('text_input', 'whole')} text, told {told} ms)"
        late = s.get(f"buffer_{told}ms", {}).get("late_streams")
        if "first_audio_ms" not in s or s.get("refused") or s.get("errors"):
            out.append(f"{name}: {s.get('refused')} refused, {s.get('errors')} failed")
            continue
        if late:
            out.append(f"{name}: {late} stream(s) with a late packet at B = {told} ms")
        if s["first_audio_ms"]["p95"] > first_p95_ms:
            out.append(f"{name}: first audio P95 {s['first_audio_ms']['p95']} ms > {first_p95_ms:g} ms")
    return out


LEVEL_COLUMNS = ["N", "text", "told_buf_ms", "first_p50_ms", "first_p95_ms", "first_p99_ms", "text_wait_p95_ms",
                 "rtf_p50", "rtf_p95", "viab_B0", "viab_B100", "late_B0", "worst_late_B0_ms", "audio_s/s", "refused"]


def level_row(s: dict[str, Any]) -> dict[str, Any]:
    fa, rtf = s.get("first_audio_ms", {}), s.get("rtf", {})
    b0, b100 = s.get("buffer_0ms", {}), s.get("buffer_100ms", {})
    return {"N": s["concurrency"], "text": s.get("text_input", "whole"),
            "told_buf_ms": s.get("client_buffer_ms", 0.0), "first_p50_ms": fa.get("p50"),
            "first_p95_ms": fa.get("p95"), "first_p99_ms": fa.get("p99"),
            "text_wait_p95_ms": s.get("text_wait_ms", {}).get("p95"), "rtf_p50": rtf.get("p50"),
            "rtf_p95": rtf.get("p95"),
            "viab_B0": b0.get("viability"), "viab_B100": b100.get("viability"), "late_B0": b0.get("late_streams"),
            "worst_late_B0_ms": b0.get("worst_lateness_ms"), "audio_s/s": s.get("audio_s_per_s"),
            "refused": s.get("refused")}
