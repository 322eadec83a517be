"""Per-turn latency traces: nine points per turn plus interruption records, one JSON line per turn.

Contract (schema in traces/README.md, `schema: 1`):
- All points are `time.perf_counter()` seconds on this host (the engine's `Packet.t_ready` uses the same
  clock), stored relative to the turn's t0 = `vad_speech_end`. A turn is opened when the user turn ends,
  so every point except `vad_speech_start` (the user's speech, before t0) and `stt_request` is >= 0, and the
  nine points are non-decreasing in `POINTS` order on a healthy turn, except `stt_request`: the early
  transcriber (agent/early_stt.py) sends the utterance at the pause, so it may lie before t0 (never before
  `vad_speech_start` nor after `stt_done`).
- The first mark of a point wins (a retried STT request does not move `stt_request`).
- `TraceCollector.finish(turn)` appends the record to `<traces_dir>/<UTC date>.jsonl` (one lock per
  process, since THREAD-executor sessions share the file) and keeps it in memory for the simulator.
Everything else in the agent only calls `mark()`; nothing here knows LiveKit.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("agent.tracing")

SCHEMA_VERSION = 1

POINTS: tuple[str, ...] = (
    "vad_speech_start",
    "vad_speech_end",
    "stt_request",
    "stt_done",
    "llm_request",
    "llm_first_token",
    "tts_first_text",
    "tts_first_packet",
    "first_frame_published",
)

#: Named segments between consecutive points (what the review tool prints P50/P95 for).
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("user_speech", "vad_speech_start", "vad_speech_end"),
    ("vad_to_stt", "vad_speech_end", "stt_request"),
    ("stt", "stt_request", "stt_done"),
    ("stt_to_llm", "stt_done", "llm_request"),
    ("llm_ttft", "llm_request", "llm_first_token"),
    ("bridge", "llm_first_token", "tts_first_text"),
    ("tts_ttfa", "tts_first_text", "tts_first_packet"),
    ("tts_first_to_publish", "tts_first_packet", "first_frame_published"),
    ("e2e", "vad_speech_end", "first_frame_published"),
)

_file_lock = threading.Lock()


@dataclass
class Interruption:
    """One barge-in: decision time, the moment no further agent audio can play, and what was cut."""

    interrupt_detected: float
    audio_silenced: float | None = None
    source: str = "vad"
    frames_published: int = 0  # frames of this reply captured before the cut
    stale_frames_after_cancel: int = 0  # frames captured after audio_silenced (must stay 0)
    llm_cancelled: bool = False
    tts_cancelled: bool = False


@dataclass
class TurnTrace:
    session_id: str
    turn_id: str
    index: int
    t0: float
    wall_t0: float  # time.time() at t0: the record's timestamp, and how a browser on the same host lines up
    points: dict[str, float] = field(default_factory=dict)
    user_text: str = ""
    reply_chars: int = 0
    segments_sent: int = 0
    playout_gaps: int = 0  # times the reply's audio queue ran dry mid-segment (a stutter the listener hears)
    playout_gap_ms: float = 0.0
    # open | answered | interrupted | no_transcript | error | unanswered (a transcript, no reply: the user
    # spoke again before the agent answered and the next turn carries it; never "error" without an error)
    outcome: str = "open"
    errors: list[str] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    finished: bool = False
    # called with (point, t) when a point is first marked, inside the code that marks it (agent.tools.stress_instants)
    observer: Callable[[str, float], None] | None = field(default=None, repr=False, compare=False)

    def mark(self, point: str, t: float | None = None) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown trace point {point!r}; valid points: {', '.join(POINTS)}")
        if point not in self.points:
            self.points[point] = time.perf_counter() if t is None else t
            if self.observer is not None:
                self.observer(point, self.points[point])

    def has(self, point: str) -> bool:
        return point in self.points

    def rel(self, point: str) -> float | None:
        t = self.points.get(point)
        return None if t is None else t - self.t0

    def complete(self) -> bool:
        """All nine points present and in order: non-decreasing in POINTS order, except that `stt_request` may
        precede `vad_speech_end` (sent at the pause: see the module docstring)."""
        if any(p not in self.points for p in POINTS):
            return False
        values = [self.points[p] for p in POINTS if p != "stt_request"]
        in_order = all(b >= a for a, b in zip(values, values[1:], strict=False))
        points = self.points
        return in_order and points["vad_speech_start"] <= points["stt_request"] <= points["stt_done"]

    def to_record(self) -> dict[str, Any]:
        points = {p: round(self.points[p] - self.t0, 6) for p in POINTS if p in self.points}
        segments: dict[str, float] = {}
        for name, start, end in SEGMENTS:
            if start in self.points and end in self.points:
                segments[name] = round((self.points[end] - self.points[start]) * 1000.0, 3)
        interruptions = []
        for irq in self.interruptions:
            rec: dict[str, Any] = {
                "interrupt_detected": round(irq.interrupt_detected - self.t0, 6),
                "audio_silenced": None if irq.audio_silenced is None else round(irq.audio_silenced - self.t0, 6),
                "cancel_to_silence_ms": None
                if irq.audio_silenced is None
                else round((irq.audio_silenced - irq.interrupt_detected) * 1000.0, 3),
                "source": irq.source,
                "frames_published": irq.frames_published,
                "stale_frames_after_cancel": irq.stale_frames_after_cancel,
                "llm_cancelled": irq.llm_cancelled,
                "tts_cancelled": irq.tts_cancelled,
            }
            interruptions.append(rec)
        return {
            "schema": SCHEMA_VERSION,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "turn_index": self.index,
            "timestamp": dt.datetime.fromtimestamp(self.wall_t0, dt.UTC).isoformat(timespec="milliseconds"),
            "wall_t0": round(self.wall_t0, 6),
            "points": points,
            "segments_ms": segments,
            "complete": self.complete(),
            "outcome": self.outcome,
            "user_text_chars": len(self.user_text),
            "reply_text_chars": self.reply_chars,
            "tts_segments": self.segments_sent,
            "playout_gaps": self.playout_gaps,
            "playout_gap_ms": round(self.playout_gap_ms, 1),
            "interruptions": interruptions,
            "errors": list(self.errors),
        }


class TraceCollector:
    """Opens one trace per user turn, routes marks to the current turn, writes finished turns."""

    def __init__(
        self,
        session_id: str,
        traces_dir: str | Path | None = "traces",
        *,
        clock: Callable[[], float] = time.perf_counter,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.session_id = session_id
        # None or "" (TRACES_DIR= empty): keep records in memory only, never write into the working directory
        self.traces_dir = Path(traces_dir) if traces_dir else None
        self.clock = clock
        self.on_record = on_record
        self.records: list[dict[str, Any]] = []
        self.current: TurnTrace | None = None
        self._pending_speech_start: float | None = None
        self._count = 0
        self.on_mark: Callable[[str, float], None] | None = None  # given to every new turn as its observer
        self.on_open: Callable[[TurnTrace], None] | None = None  # called with each new turn (agent/journal.py)
        self._held: list[TurnTrace] = []  # earlier turns still open: their reply outlives the next turn's start

    # -- user side ---------------------------------------------------------------------------
    def speech_started(self, t: float | None = None) -> None:
        self._pending_speech_start = self.clock() if t is None else t

    def open_turn(self, t_end: float | None = None, *, hold_previous: bool = False) -> TurnTrace:
        """The user turn ended (VAD end of speech): finish the previous turn and open the next one.
        `hold_previous`: the previous turn's reply is still in flight; its owner finishes it later."""
        t_end = self.clock() if t_end is None else t_end
        if self.current is not None and not self.current.finished:
            if hold_previous:
                self._held.append(self.current)
            else:
                self.finish(self.current)
        self._held = [t for t in self._held if not t.finished]
        self._count += 1
        turn = TurnTrace(
            session_id=self.session_id,
            turn_id=f"{self.session_id}-t{self._count}",
            index=self._count,
            t0=t_end,
            wall_t0=time.time() - (self.clock() - t_end),
            observer=self.on_mark,
        )
        start = self._pending_speech_start
        turn.mark("vad_speech_start", start if start is not None and start <= t_end else t_end)
        turn.mark("vad_speech_end", t_end)
        self._pending_speech_start = None
        self.current = turn
        if self.on_open is not None:
            self.on_open(turn)
        return turn

    def mark(self, point: str, t: float | None = None) -> None:
        """Mark on the current turn (no-op before the first turn, e.g. an agent greeting)."""
        if self.current is not None and not self.current.finished:
            self.current.mark(point, t)

    # -- output ------------------------------------------------------------------------------
    def finish(self, turn: TurnTrace) -> dict[str, Any] | None:
        if turn.finished:
            return None
        turn.finished = True
        if turn.outcome == "open":
            if turn.has("first_frame_published"):
                turn.outcome = "answered"
            else:
                turn.outcome = "unanswered" if turn.user_text else "no_transcript"
        record = turn.to_record()
        self.records.append(record)
        if self.traces_dir is not None:
            self._append(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def close(self) -> None:
        for turn in [*self._held, self.current]:
            if turn is not None and not turn.finished:
                self.finish(turn)
        self._held = []

    def _append(self, record: dict[str, Any]) -> None:
        assert self.traces_dir is not None
        append_record(self.traces_dir, record)


def append_record(traces_dir: Path, record: dict[str, Any]) -> None:
    """Append one record to `<traces_dir>/<UTC date>.jsonl` (also used for a dead worker's turn: agent/journal.py)."""
    path = traces_dir / f"{dt.datetime.now(dt.UTC):%Y-%m-%d}.jsonl"
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        with _file_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(line)
    except OSError as exc:  # a full disk must not end a call
        logger.warning("cannot write trace %s to %s: %s", record["turn_id"], path, exc)
