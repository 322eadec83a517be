"""Per-turn latency traces: the nine points of a user turn, its turn decision, pauses, early answers thrown away,
overlaps and interruptions; one JSON line per user turn.

Contract (schema in traces/README.md, `schema: 2`):
- All points are `time.perf_counter()` seconds on this host (the engine's `Packet.t_ready` uses the same clock),
  stored relative to the turn's t0 = its last `vad_speech_end`. A user turn may hold pauses (the user spoke
  again before the turn was committed): `resume()` records each, with the judgement it was held in, and clears
  the utterance's STT points; the next end of speech moves t0 (`end_of_speech`).
- The first mark of a point wins (a retried STT request does not move `stt_request`); `Reply.points`
  (agent/turn/reply.py) carries an answer's own LLM/TTS points until it is the turn's answer (`adopt`).
- `complete()` is the truth check of a record: every point present, the nine in order (but `stt_request`, sent at
  the pause, may precede t0), no LLM request before the transcript, and no audio before the turn was committed.
- `Outcome` is the turn's lifecycle end, one enum; its value is the JSON string.
- `TraceCollector.finish(turn)` appends the record to `<traces_dir>/<UTC date>.jsonl` (one lock per process,
  since THREAD-executor sessions share the file), keeps it in memory for the simulator, and hands it to `sinks`.
- A write that fails (a full disk, a folder made read-only) never ends a call. Every writer under the traces
  folder (this module, agent/journal.py) reports to `WRITES`, the process's `WriteHealth`: it warns once per file
  per `WRITE_WARN_INTERVAL_S` (the warning says how many writes failed since the last one), logs once when that
  file is written again, and gives the worker's health endpoint its `snapshot()` (agent/worker.py).
- `check_traces_dir(path)` is the start-up check: the problems with the folder (missing and not creatable, not
  writable, less than `TRACES_MIN_FREE_BYTES` free), one sentence each; the worker logs them as warnings.
Nothing here knows LiveKit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("agent.tracing")

SCHEMA_VERSION = 2

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
#: The agent's turn decision: the user turn committed (answered from here on). Not in the nine's order: an early
#: answer (its LLM and TTS points) may start before it, but no audio is heard before it.
TURN_COMMITTED = "turn_committed"
ALL_POINTS: tuple[str, ...] = (*POINTS, TURN_COMMITTED)
#: An answer's own points, carried on its Reply until it is the turn's answer.
ANSWER_POINTS: tuple[str, ...] = POINTS[4:]

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
    ("end_of_turn", "vad_speech_end", TURN_COMMITTED),
)


class Outcome(enum.Enum):
    """How a user turn ended (the record's `outcome`)."""

    OPEN = "open"  # not finished yet (never written)
    ANSWERED = "answered"  # its answer played to the end
    INTERRUPTED = "interrupted"  # its answer was cut (before or after its first frame)
    NO_TRANSCRIPT = "no_transcript"  # the VAD heard speech, STT gave no words
    UNANSWERED = "unanswered"  # words, but no answer before the user spoke again or the call ended
    ERROR = "error"  # a failure (listed in `errors`) left it without a full answer
    WORKER_LOST = "worker_lost"  # the worker died with the turn open (closed for it by the next one)

_file_lock = threading.Lock()

#: called with every finished record, after it is written (agent/trace_otel.py adds one: the record as spans)
SINKS: list[Callable[[dict[str, Any]], None]] = []


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
class Pause:
    """A pause the user made inside the turn: their speech ended, the turn was not committed, they went on."""

    ended: float  # perf_counter of the end of speech before the pause
    resumed: float  # perf_counter of the next start of speech
    stt_points: dict[str, float] = field(default_factory=dict)  # the STT points of the words before the pause
    decision: dict[str, Any] = field(default_factory=dict)  # how the pause was judged before it ended, if it was


@dataclass
class Discarded:
    """An answer prepared early (on the transcript, before the turn was committed) and thrown away unheard."""

    started: float  # its LLM request (perf_counter), or when its speech was created
    reason: str  # "user went on" | "transcript changed" | ...


@dataclass
class OverlapRecord:
    """The caller spoke over this turn's answer: ducked at `onset`, then restored or cut at `decided`."""

    onset: float
    decided: float | None = None
    verdict: str = ""  # backchannel | empty | request | long | ended (the answer ended first)
    restored: bool = False
    text_chars: int = 0


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
    outcome: Outcome = Outcome.OPEN  # never ERROR without an entry in `errors`
    errors: list[str] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    discarded: list[Discarded] = field(default_factory=list)
    overlaps: list[OverlapRecord] = field(default_factory=list)
    turn_decision: dict[str, Any] = field(default_factory=dict)  # how the end of turn was judged (turn/end_of_turn.py)
    reply_id: str = ""  # the answer's id (its speech's; the frames it published carry it)
    finished: bool = False
    # called with (point, t) when a point is first marked, inside the code that marks it (lab.stress_instants)
    observer: Callable[[str, float], None] | None = field(default=None, repr=False, compare=False)

    def mark(self, point: str, t: float | None = None) -> None:
        if point not in ALL_POINTS:
            raise ValueError(f"unknown trace point {point!r}; valid points: {', '.join(ALL_POINTS)}")
        if point not in self.points:
            self.points[point] = time.perf_counter() if t is None else t
            if self.observer is not None:
                self.observer(point, self.points[point])

    def has(self, point: str) -> bool:
        return point in self.points

    def rel(self, point: str) -> float | None:
        t = self.points.get(point)
        return None if t is None else t - self.t0

    def resume(self, t: float) -> None:
        """The user spoke again before the turn was committed: a pause inside the turn. The next utterance's STT
        points replace this one's, and the pause keeps the judgement of its end (the wait it was held in; none when
        the user went on before the transcript was in): `turn_decision` is left for the turn's last end."""
        stt: dict[str, float] = {p: self.points.pop(p) for p in ("stt_request", "stt_done") if p in self.points}
        decision, self.turn_decision = self.turn_decision, {}
        self.pauses.append(Pause(ended=self.points["vad_speech_end"], resumed=t, stt_points=stt, decision=decision))

    def words_committed(self, text: str, stt_request: float | None, stt_done: float | None) -> None:
        """The framework committed this turn with `text`, transcribed by these STT points: they replace words (and
        their points) of a later utterance, which become the next turn."""
        self.user_text = text
        for point, t in (("stt_request", stt_request), ("stt_done", stt_done)):
            if t is not None:
                self.points[point] = t

    def no_new_words(self) -> None:
        """The utterance after the last pause brought no words (nothing transcribed, or STT failed): the turn's
        transcript is still the one before it, and so are its STT points."""
        if self.pauses and "stt_done" not in self.points:
            self.points.update(self.pauses[-1].stt_points)

    def end_of_speech(self, t: float, wall_t: float) -> None:
        """The user's speech ended again (after a pause): t0 moves here."""
        self.t0, self.wall_t0 = t, wall_t
        self.points["vad_speech_end"] = t

    def adopt(self, reply_id: str, points: dict[str, float], chars: int = 0, segments: int = 0) -> None:
        """Take an answer's id, points and text counts (turn/reply.py) as this turn's (points it has not marked)."""
        self.reply_id = self.reply_id or reply_id
        for point in ANSWER_POINTS:
            if point in points:
                self.mark(point, points[point])
        self.reply_chars, self.segments_sent = max(self.reply_chars, chars), max(self.segments_sent, segments)

    def complete(self) -> bool:
        """The record tells a whole, consistent story: every point present; the nine non-decreasing in POINTS
        order except `stt_request` (sent at the pause, it may precede `vad_speech_end`, never `vad_speech_start`
        nor follow `stt_done`); the LLM asked only once the transcript existed; no audio before the commit."""
        points = self.points
        if any(p not in points for p in ALL_POINTS):
            return False
        values = [points[p] for p in POINTS if p != "stt_request"]
        in_order = all(b >= a for a, b in zip(values, values[1:], strict=False))
        return (
            in_order
            and points["vad_speech_start"] <= points["stt_request"] <= points["stt_done"]
            and points["stt_done"] <= points[TURN_COMMITTED] <= points["first_frame_published"]
        )

    def to_record(self) -> dict[str, Any]:
        def rel(t: float) -> float:
            return round(t - self.t0, 6)

        points = {p: rel(self.points[p]) for p in ALL_POINTS if p in self.points}
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
            "outcome": self.outcome.value,
            "user_text_chars": len(self.user_text),
            "reply_text_chars": self.reply_chars,
            "tts_segments": self.segments_sent,
            "playout_gaps": self.playout_gaps,
            "playout_gap_ms": round(self.playout_gap_ms, 1),
            "interruptions": interruptions,
            "pauses": [
                {"at": rel(p.ended), "ms": round((p.resumed - p.ended) * 1000.0, 1)}
                | ({"decision": dict(p.decision)} if p.decision else {})
                for p in self.pauses
            ],
            "discarded": [{"at": rel(d.started), "reason": d.reason} for d in self.discarded],
            "overlaps": [
                {
                    "onset": rel(o.onset),
                    "decided": None if o.decided is None else rel(o.decided),
                    "verdict": o.verdict,
                    "restored": o.restored,
                    "text_chars": o.text_chars,
                }
                for o in self.overlaps
            ],
            "turn_decision": dict(self.turn_decision),
            "reply_id": self.reply_id,
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
        """`on_record` (and each of `sinks`, e.g. the OpenTelemetry export) is called with every written record."""
        self.session_id = session_id
        # None or "" (TRACES_DIR= empty): keep records in memory only, never write into the working directory
        self.traces_dir = Path(traces_dir) if traces_dir else None
        self.clock = clock
        self.sinks: list[Callable[[dict[str, Any]], None]] = [on_record] if on_record is not None else []
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
        """A user turn's speech ended (VAD end of speech) and no turn was pending: finish the previous turn and open
        the next one. `hold_previous`: the previous turn's answer is still in flight; its owner finishes it later."""
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
            wall_t0=self.wall(t_end),
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

    def wall(self, t: float) -> float:
        """Unix time of perf_counter time `t`."""
        return time.time() - (self.clock() - t)

    def mark(self, point: str, t: float | None = None) -> None:
        """Mark on the current turn (no-op before the first turn, e.g. an agent greeting)."""
        if self.current is not None and not self.current.finished:
            self.current.mark(point, t)

    # -- output ------------------------------------------------------------------------------
    def finish(self, turn: TurnTrace) -> dict[str, Any] | None:
        if turn.finished:
            return None
        turn.finished = True
        if turn.outcome is Outcome.OPEN:
            if turn.has("first_frame_published"):
                turn.outcome = Outcome.ANSWERED
            else:
                turn.outcome = Outcome.UNANSWERED if turn.user_text else Outcome.NO_TRANSCRIPT
        record = turn.to_record()
        self.records.append(record)
        if self.traces_dir is not None:
            self._append(record)
        publish(record, self.sinks)
        return record

    def close(self) -> None:
        for turn in [*self._held, self.current]:
            if turn is not None and not turn.finished:
                self.finish(turn)
        self._held = []

    def _append(self, record: dict[str, Any]) -> None:
        assert self.traces_dir is not None
        append_record(self.traces_dir, record)


def publish(record: dict[str, Any], sinks: Iterable[Callable[[dict[str, Any]], None]] = ()) -> None:
    """Hand a finished record to `sinks` (a collector's), then to the process's `SINKS` (agent/trace_otel.py)."""
    for sink in (*sinks, *SINKS):
        try:
            sink(record)
        except Exception:  # a sink (an exporter) must never end a call
            logger.exception("trace sink %r failed on %s", sink, record.get("turn_id"))


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
        WRITES.failed(path, f"trace {record.get('turn_id')}", exc)
    else:
        WRITES.written(path)


#: a file whose writes keep failing is warned about at most once per this many seconds
WRITE_WARN_INTERVAL_S = 60.0
#: the start-up check warns when the traces folder's file system has less free space than this
TRACES_MIN_FREE_BYTES = 100 * 2**20


@dataclass
class _FileFailures:
    failed: int = 0  # writes that failed since the last successful one
    total: int = 0  # all failed writes to this file since the process started
    unwarned: int = 0  # failures since the last warning
    warned_at: float | None = None  # monotonic time of the last warning
    last_error: str = ""
    last_failed_wall: float = 0.0


class WriteHealth:
    """Failed writes under the traces folder, per file (see the module docstring). Thread-safe: THREAD-executor
    calls share it. `clock` is monotonic seconds (tests give their own)."""

    def __init__(self, interval_s: float = WRITE_WARN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._files: dict[str, _FileFailures] = {}
        self._lock = threading.Lock()

    def failed(self, path: str | Path, what: str, exc: BaseException) -> None:
        """A write of `what` to `path` failed with `exc`: count it; warn if this file was not warned about lately."""
        now = self.clock()
        with self._lock:
            f = self._files.setdefault(str(path), _FileFailures())
            f.failed += 1
            f.total += 1
            f.unwarned += 1
            f.last_error, f.last_failed_wall = f"{type(exc).__name__}: {exc}", time.time()
            due = f.warned_at is None or now - f.warned_at >= self.interval_s
            if due:
                count, f.unwarned, f.warned_at = f.unwarned, 0, now
        if due:
            earlier = f" (and {count - 1} earlier write(s) to it since the last warning)" if count > 1 else ""
            logger.warning("cannot write %s to %s: %s%s; the call goes on without it; warned at most once every "
                           "%.0f s per file", what, path, exc, earlier, self.interval_s)  # fmt: skip

    def written(self, path: str | Path) -> None:
        """A write to `path` succeeded: after failures, say once that it is written again."""
        with self._lock:
            f = self._files.get(str(path))
            if f is None or f.failed == 0:
                return
            lost, f.failed, f.unwarned, f.warned_at = f.failed, 0, 0, None
        logger.info("%s is written again (%d write(s) to it failed before)", path, lost)

    def snapshot(self) -> dict[str, Any]:
        """For the health endpoint: `ok` while no file's last write failed; `not_written` counts failed writes since
        the process started; `failing` the files whose last write failed, with their error."""
        with self._lock:
            files = {p: dataclasses.replace(f) for p, f in self._files.items()}
        failing = {
            p: {"failed_writes": f.failed, "last_error": f.last_error, "last_failed": round(f.last_failed_wall, 3)}
            for p, f in files.items()
            if f.failed
        }
        return {"ok": not failing, "not_written": sum(f.total for f in files.values()), "failing": failing}


WRITES = WriteHealth()


def check_traces_dir(path: str | Path, min_free_bytes: int = TRACES_MIN_FREE_BYTES) -> list[str]:
    """What is wrong with the traces folder for writing, one sentence per problem (empty: nothing). The folder is
    created when missing (as the first write would)."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return [f"TRACES_DIR={path}: cannot create the traces folder ({exc}); no trace or call journal is written"]
    problems = []
    try:  # a real write, not os.access: root passes that on a read-only file system
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-") as probe:
            probe.write(b"x")
            probe.flush()
    except OSError as exc:
        problems.append(f"TRACES_DIR={path}: cannot write in the traces folder ({exc}); no trace or call journal "
                        "is written")  # fmt: skip
    free = shutil.disk_usage(folder).free
    if free < min_free_bytes:
        problems.append(f"TRACES_DIR={path}: only {free / 2**20:.1f} MiB free on its file system (warned below "
                        f"{min_free_bytes / 2**20:.0f} MiB); traces stop when it is full")  # fmt: skip
    return problems
