"""Per-stream metrics, engine-wide counters and the frame-step timer (docs/engine.md, "Load reporting and stats").

- `StreamMetrics`: one per stream. TTFA = stream requested -> first packet's PCM on the host;
  RTF = wall time of the whole stream / audio duration. codegen_wall_ms / decode_wall_ms are the
  wall time of the batched frame steps this stream took part in (a batched step is charged in full
  to every stream in it, because each of them waited for all of it); glue_wall_ms is the rest of the
  stream's wall time (queueing, admission/prefill, host copies, packetizing, hand-off).
- `EngineCounters`: monotonically increasing totals, safe to read from any thread, plus TTFA / RTF
  percentiles (P50/P95) over the last 256 completed streams.
- `WorkerPhases`: where the worker thread's time goes, summed per phase (`worker_<phase>_ms_total` in stats):
  `text_rows` (streaming-text rows: which rows step, their text rows and caps), `admit` (prompts and prefills),
  `step` (the frame step, its host copy and the hand-out of packets), `moves` (slot moves, inside the others).
- `StepTimer`: on CUDA it times with events (no extra host syncs: the worker syncs once per step
  anyway to hand PCM out); on CPU with perf_counter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from common.audio_format import SAMPLE_RATE
from common.percentiles import percentile

RECENT_STREAMS = 256  # completed streams kept for the TTFA / RTF percentiles in stats()


@dataclass
class StreamMetrics:
    request_id: str
    text_chars: int
    speaker: str
    language: str
    t_request: float = field(default_factory=time.perf_counter)
    t_admitted: float | None = None
    t_first_packet: float | None = None
    t_done: float | None = None
    frames: int = 0
    packets: int = 0
    samples: int = 0
    codegen_wall_ms: float = 0.0
    decode_wall_ms: float = 0.0
    max_frames: int = 0
    slot: int | None = None
    nonfinite_samples: int = 0
    status: str = "pending"  # pending | running | completed | cancelled | error
    end_reason: str = ""  # eos | cap | cancelled | overflow | error
    error: str = ""

    @property
    def ttfa_ms(self) -> float | None:
        if self.t_first_packet is None:
            return None
        return (self.t_first_packet - self.t_request) * 1000.0

    @property
    def wall_ms(self) -> float | None:
        if self.t_done is None:
            return None
        return (self.t_done - self.t_request) * 1000.0

    @property
    def audio_ms(self) -> float:
        return self.samples * 1000.0 / SAMPLE_RATE

    @property
    def rtf(self) -> float | None:
        wall = self.wall_ms
        if wall is None or self.samples == 0:
            return None
        return wall / self.audio_ms

    @property
    def glue_wall_ms(self) -> float | None:
        wall = self.wall_ms
        if wall is None:
            return None
        return max(0.0, wall - self.codegen_wall_ms - self.decode_wall_ms)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("t_request", "t_admitted", "t_first_packet", "t_done"):
            out.pop(key)
        out.update(
            ttfa_ms=_round(self.ttfa_ms),
            wall_ms=_round(self.wall_ms),
            audio_ms=_round(self.audio_ms),
            rtf=_round(self.rtf, 4),
            glue_wall_ms=_round(self.glue_wall_ms),
            codegen_wall_ms=_round(self.codegen_wall_ms),
            decode_wall_ms=_round(self.decode_wall_ms),
        )
        return out


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


class EngineCounters:
    """Engine-wide totals. Written by the worker and the engine, read by stats()/metrics scrapes."""

    NAMES = (
        "streams_started",
        "streams_completed",
        "streams_cancelled",
        "streams_failed",
        "streams_rejected_busy",
        "streams_overflowed",
        "input_errors",
        "frames_generated",
        "packets_emitted",
        "samples_emitted",
        "steps",
        "step_rows",
        "worker_errors",
        "admissions_deferred",  # steps before which waiting streams stayed waiting (running streams had no slack)
        "slot_moves",  # compaction moves (a finished stream's row taken by the highest running one)
        "text_waits",  # a streaming-text stream had to wait (its row held) because its next token had not arrived
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.NAMES, 0)
        self.codegen_wall_ms_total = 0.0
        self.decode_wall_ms_total = 0.0
        self._recent_ttfa: deque[float] = deque(maxlen=RECENT_STREAMS)
        self._recent_rtf: deque[float] = deque(maxlen=RECENT_STREAMS)
        self.phases = WorkerPhases()

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def add_step(self, rows: int, codegen_ms: float, decode_ms: float) -> None:
        with self._lock:
            self._values["steps"] += 1
            self._values["step_rows"] += rows
            self.codegen_wall_ms_total += codegen_ms
            self.decode_wall_ms_total += decode_ms

    def observe_stream(self, metrics: StreamMetrics) -> None:
        """Remember TTFA / RTF of a completed stream (the last RECENT_STREAMS) for percentiles in stats()."""
        if metrics.status != "completed":
            return
        with self._lock:
            if metrics.ttfa_ms is not None:
                self._recent_ttfa.append(metrics.ttfa_ms)
            if metrics.rtf is not None:
                self._recent_rtf.append(metrics.rtf)

    def snapshot(self) -> dict[str, float | None]:
        """The totals, and the recent_* percentiles (None before the first completed stream)."""
        out: dict[str, float | None] = dict(self.phases.snapshot())
        with self._lock:
            out.update(self._values)
            out["codegen_wall_ms_total"] = round(self.codegen_wall_ms_total, 3)
            out["decode_wall_ms_total"] = round(self.decode_wall_ms_total, 3)
            ttfa, rtf = sorted(self._recent_ttfa), sorted(self._recent_rtf)
            samples = self._values["samples_emitted"]
        out["audio_seconds_emitted"] = round(samples / SAMPLE_RATE, 3)
        out["recent_streams"] = len(ttfa)
        for name, values, digits in (("ttfa_ms", ttfa, 2), ("rtf", rtf, 4)):
            out[f"recent_{name}_p50"] = _percentile(values, 50, digits)
            out[f"recent_{name}_p95"] = _percentile(values, 95, digits)
        return out


def _percentile(values: list[float], q: float, digits: int) -> float | None:
    return round(percentile(values, q), digits) if values else None


class WorkerPhases:
    """Milliseconds of the worker thread per phase (written by the worker only; read from any thread)."""

    PHASES = ("text_rows", "admit", "step", "moves")

    def __init__(self) -> None:
        self._ms = dict.fromkeys(self.PHASES, 0.0)
        self._t = time.perf_counter()

    def start(self) -> None:
        self._t = time.perf_counter()

    def lap(self, phase: str) -> None:
        """Add the time since the last `start` / `lap` to `phase`."""
        now = time.perf_counter()
        self._ms[phase] += (now - self._t) * 1000.0
        self._t = now

    def add(self, phase: str, ms: float) -> None:
        self._ms[phase] += ms

    def snapshot(self) -> dict[str, float]:
        return {f"worker_{name}_ms_total": round(ms, 3) for name, ms in list(self._ms.items())}


class StepTimer:
    """Times the codegen and decode parts of one batched frame step without adding host syncs."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.enabled = enabled  # TTS_DEEP_STREAM_METRICS=0: no timing at all (reports 0 ms)
        self.cuda = device.type == "cuda"
        if self.cuda and enabled:
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self._t: list[float] = [0.0, 0.0, 0.0]

    def mark(self, index: int) -> None:
        """0 = before codegen, 1 = after codegen / before decode, 2 = after decode."""
        if not self.enabled:
            return
        if self.cuda:
            self._events[index].record()
        else:
            self._t[index] = time.perf_counter()

    def elapsed_ms(self) -> tuple[float, float]:
        """(codegen_ms, decode_ms); call only after the host has synchronised with the step's output."""
        if not self.enabled:
            return 0.0, 0.0
        if self.cuda:
            return self._events[0].elapsed_time(self._events[1]), self._events[1].elapsed_time(self._events[2])
        return (self._t[1] - self._t[0]) * 1000.0, (self._t[2] - self._t[1]) * 1000.0
