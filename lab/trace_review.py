"""Latency review of per-turn traces: `python -m agent trace-review FILES... [--since T] [--plot PNG] [--json]`.

Contract:
- Input: JSONL files written by the TraceCollector (traces/README.md): one JSON object per turn with the nine
  points (and `turn_committed`) in seconds relative to t0 = `vad_speech_end`, session/turn ids, and optional
  interruption records. The points may sit at the top level or under a `points` object.
- Output: per segment (below) count, P50/P95/P99/max in ms and the slowest turns with their ids; as a text
  table (default) or JSON (`--json`), plus a PNG of the latency breakdown (`--plot`).
- A line that is not a JSON object, or whose points are not numbers, is reported with its file and line
  number and skipped; a segment whose end lies before its start is reported and left out. Neither stops
  the review. Exit status 0, or 1 when no turn could be read at all, 2 for bad arguments.

Segments (end - start, names from agent/tracing.py; vad→stt .. tts_first→publish add up to e2e, which is
what the plot stacks per turn):
  user speech (vad_speech_start→vad_speech_end), vad→stt (→stt_request: endpointing wait), stt
  (→stt_done), stt→llm (→llm_request), llm ttft (→llm_first_token), bridge (→tts_first_text: first
  speakable segment cut), tts ttfa (→tts_first_packet), tts_first→publish (→first_frame_published),
  e2e (vad_speech_end→first_frame_published), cancel→silence (interrupt_detected→audio_silenced, one value
  per interruption record; the recorded `cancel_to_silence_ms` wins over the two points).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.tracing import POINTS, SEGMENTS  # the writer's names: one source of truth
from common.percentiles import percentile

CANCEL = "cancel_to_silence"
# display labels (the names); JSON output uses the writer's keys
LABELS = {
    "user_speech": "user speech",
    "vad_to_stt": "vad→stt",
    "stt": "stt",
    "stt_to_llm": "stt→llm",
    "llm_ttft": "llm ttft",
    "bridge": "bridge",
    "tts_ttfa": "tts ttfa",
    "tts_first_to_publish": "tts_first→publish",
    "e2e": "e2e",
    CANCEL: "cancel→silence",
}
# the stacked stages run one after another from the end of speech; `end_of_turn` overlaps them (the decision is
# taken while STT runs), `e2e` is their sum, `user_speech` precedes the origin
BREAKDOWN = [name for name, _, _ in SEGMENTS if name not in ("e2e", "user_speech", "end_of_turn")]
# keys under which a trace may carry its wall-clock time (for --since) and its ids
_WALL_KEYS = ("wall_time", "t0_wall", "timestamp", "ts", "time", "started_at")
_SESSION_KEYS = ("session_id", "session", "room")
_TURN_KEYS = ("turn_id", "turn", "id")


@dataclass
class Turn:
    session_id: str
    turn_id: str
    wall: float | None
    points: dict[str, float]
    cancels_ms: list[float] = field(default_factory=list)
    source: str = ""
    outcome: str = "?"
    errors: int = 0
    stale_frames: int = 0
    unsilenced: int = 0  # interruptions with no audio_silenced: the reply's audio was never cut

    @property
    def label(self) -> str:
        return f"{self.session_id}/{self.turn_id}"


@dataclass
class Problem:
    where: str
    reason: str


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _wall_time(obj: dict[str, Any]) -> float | None:
    for key in _WALL_KEYS:
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    return None


def _first(obj: dict[str, Any], keys: Sequence[str], default: str) -> str:
    for key in keys:
        if obj.get(key) is not None:
            return str(obj[key])
    return default


def _interruptions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("interruptions", "interrupts", "interruption"):
        value = obj.get(key)
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list):
            return [v for v in value if isinstance(v, dict)]
    return []


def _cancel_ms(record: dict[str, Any]) -> float | None:
    """cancel→silence of one interruption record, in ms (a recorded value wins over the two points)."""
    for key in ("cancel_to_silence_ms", "cancel_to_silence"):
        value = _number(record.get(key))
        if value is not None:
            return value if key.endswith("_ms") else value * 1000.0
    start, end = _number(record.get("interrupt_detected")), _number(record.get("audio_silenced"))
    if start is None or end is None:
        return None
    return (end - start) * 1000.0


def parse_turn(obj: Any, where: str) -> tuple[Turn | None, list[Problem]]:
    """One trace object -> Turn, or None with the reason. Problems that only affect one value are returned too."""
    if not isinstance(obj, dict):
        return None, [Problem(where, f"expected a JSON object, got {type(obj).__name__}")]
    nested = obj.get("points")
    source: dict[str, Any] = nested if isinstance(nested, dict) else obj
    points: dict[str, float] = {}
    problems: list[Problem] = []
    for name in POINTS:
        if name not in source or source[name] is None:
            continue
        value = _number(source[name])
        if value is None:
            return None, [Problem(where, f"point {name!r} is {source[name]!r}, expected a number of seconds")]
        points[name] = value
    interruptions = _interruptions(obj)
    if not points and not interruptions:
        return None, [Problem(where, f"no trace points (expected some of: {', '.join(POINTS)})")]
    turn = Turn(
        session_id=_first(obj, _SESSION_KEYS, "?"),
        turn_id=_first(obj, _TURN_KEYS, where.rsplit(":", 1)[-1]),
        wall=_wall_time(obj),
        points=points,
        source=where,
        outcome=str(obj.get("outcome", "?")),
        errors=len(obj["errors"]) if isinstance(obj.get("errors"), list) else 0,
    )
    for record in interruptions:
        stale = _number(record.get("stale_frames_after_cancel"))
        turn.stale_frames += int(stale or 0)
        value = _cancel_ms(record)
        if value is None:
            turn.unsilenced += 1
            problems.append(Problem(where, f"interruption at {record.get('interrupt_detected')!r} was never silenced"))
            continue
        if value < 0:
            problems.append(Problem(where, f"{CANCEL} is negative ({value:.1f} ms); left out"))
        else:
            turn.cancels_ms.append(value)
    return turn, problems


def read_traces(paths: Iterable[Path]) -> tuple[list[Turn], list[Problem]]:
    turns: list[Turn] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            problems.append(Problem(str(path), f"cannot read: {exc.strerror or exc}"))
            continue
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(Problem(where, f"not JSON ({exc.msg} at column {exc.colno})"))
                continue
            turn, found = parse_turn(obj, where)
            problems.extend(found)
            if turn is not None:
                turns.append(turn)
    return turns, problems


def segment_values(turns: Iterable[Turn], problems: list[Problem]) -> dict[str, list[tuple[float, Turn]]]:
    """ms values per segment, each with its turn; negative spans are reported and left out."""
    values: dict[str, list[tuple[float, Turn]]] = {name: [] for name, _, _ in SEGMENTS}
    values[CANCEL] = []
    for turn in turns:
        for name, start, end in SEGMENTS:
            if start in turn.points and end in turn.points:
                ms = (turn.points[end] - turn.points[start]) * 1000.0
                if ms < 0:
                    problems.append(Problem(turn.source, f"{name}: {end} is {-ms:.1f} ms before {start}; left out"))
                    continue
                values[name].append((ms, turn))
        values[CANCEL].extend((ms, turn) for ms in turn.cancels_ms)
    return values


def summarize(turns: list[Turn], problems: list[Problem], slowest: int = 3) -> dict[str, Any]:
    values = segment_values(turns, problems)
    segments: dict[str, Any] = {}
    for name, items in values.items():
        ms = sorted(v for v, _ in items)
        entry: dict[str, Any] = {"count": len(ms)}
        if ms:
            entry.update(
                p50=round(percentile(ms, 50), 3),
                p95=round(percentile(ms, 95), 3),
                p99=round(percentile(ms, 99), 3),
                max=round(ms[-1], 3),
            )
            top = sorted(items, key=lambda item: item[0], reverse=True)[:slowest]
            entry["slowest"] = [
                {"ms": round(v, 3), "session_id": t.session_id, "turn_id": t.turn_id, "where": t.source} for v, t in top
            ]
        segments[name] = entry
    outcomes: dict[str, int] = {}
    for t in turns:
        outcomes[t.outcome] = outcomes.get(t.outcome, 0) + 1
    return {
        "turns": len(turns),
        "sessions": len({t.session_id for t in turns}),
        "complete_turns": sum(all(p in t.points for p in POINTS) for t in turns),
        "outcomes": outcomes,
        "turns_with_errors": sum(t.errors > 0 for t in turns),
        "interruptions": sum(len(t.cancels_ms) + t.unsilenced for t in turns),
        "unsilenced_interruptions": sum(t.unsilenced for t in turns),
        "stale_frames_after_cancel": sum(t.stale_frames for t in turns),
        "segments": segments,
        "problems": [{"where": p.where, "reason": p.reason} for p in sorted(problems, key=_where_key)],
    }


def _where_key(problem: Problem) -> tuple[str, int]:
    path, _, line = problem.where.rpartition(":")
    return (path, int(line)) if line.isdigit() else (problem.where, 0)


def parse_since(text: str, now: datetime | None = None) -> float:
    """--since: ISO 8601 time, epoch seconds, or an age such as 30m / 2h / 1d. Returns epoch seconds."""
    now = now or datetime.now(UTC)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return (now - timedelta(**{unit: float(match.group(1))})).timestamp()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r} is not an ISO time (2026-01-31T12:00), epoch seconds, or an age (30m, 2h, 1d)"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _turn_label(entry: dict[str, Any]) -> str:
    turn, session = entry["turn_id"], entry["session_id"]
    return turn if turn.startswith(session) else f"{session}/{turn}"


def format_table(summary: dict[str, Any]) -> str:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items())) or "-"
    lines = [
        f"turns: {summary['turns']} ({summary['complete_turns']} with all nine points; {outcomes}), "
        f"sessions: {summary['sessions']}, turns with errors: {summary['turns_with_errors']}",
        f"interruptions: {summary['interruptions']} (never silenced: {summary['unsilenced_interruptions']}), "
        f"stale frames after cancel: {summary['stale_frames_after_cancel']}, "
        f"skipped/problems: {len(summary['problems'])}",
        f"{'segment':<18} {'count':>6} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'max ms':>9}"
        "  slowest (session/turn ms)",
    ]
    for key, entry in summary["segments"].items():
        name = LABELS.get(key, key)
        if not entry["count"]:
            lines.append(f"{name:<18} {0:>6} {'-':>9} {'-':>9} {'-':>9} {'-':>9}")
            continue
        slow = ", ".join(f"{_turn_label(s)} {s['ms']:.1f}" for s in entry["slowest"])
        lines.append(
            f"{name:<18} {entry['count']:>6} {entry['p50']:>9.1f} {entry['p95']:>9.1f} "
            f"{entry['p99']:>9.1f} {entry['max']:>9.1f}  {slow}"
        )
    for p in summary["problems"]:
        lines.append(f"problem {p['where']}: {p['reason']}")
    return "\n".join(lines)


def plot(turns: list[Turn], summary: dict[str, Any], out: Path) -> None:
    """Left: P50/P95 per segment. Right: each complete turn's e2e as stacked segments."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_pct, ax_stack) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1, 1.6]})
    names = [n for n, e in summary["segments"].items() if e["count"]]
    ys = range(len(names))
    ax_pct.barh([y + 0.2 for y in ys], [summary["segments"][n]["p50"] for n in names], 0.4, label="P50")
    ax_pct.barh([y - 0.2 for y in ys], [summary["segments"][n]["p95"] for n in names], 0.4, label="P95")
    for y, n in zip(ys, names, strict=True):
        entry = summary["segments"][n]
        ax_pct.text(entry["p95"], y - 0.2, f" {entry['p95']:.1f}", va="center", fontsize=7)
        ax_pct.text(entry["p50"], y + 0.2, f" {entry['p50']:.1f}", va="center", fontsize=7)
    ax_pct.set_yticks(list(ys), [f"{LABELS.get(n, n)} (n={summary['segments'][n]['count']})" for n in names])
    ax_pct.invert_yaxis()
    ax_pct.set_xlabel("ms")
    ax_pct.set_title("latency per segment")
    ax_pct.legend()

    complete = [t for t in turns if all(p in t.points for p in POINTS)]
    bottoms = [0.0] * len(complete)
    for name, start, end in SEGMENTS:
        if name not in BREAKDOWN:
            continue
        heights = [max(0.0, (t.points[end] - t.points[start]) * 1000.0) for t in complete]
        ax_stack.bar(range(len(complete)), heights, bottom=bottoms, label=LABELS.get(name, name), width=0.85)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax_stack.set_xlabel(f"turn (n={len(complete)} complete turns, file order)")
    ax_stack.set_ylabel("ms from user end of speech (VAD)")
    ax_stack.set_title("e2e breakdown per turn")
    if complete:
        ax_stack.legend(fontsize=8, loc="upper left")
    else:
        ax_stack.text(0.5, 0.5, "no turn has all nine points", ha="center", transform=ax_stack.transAxes)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _expand(paths: Sequence[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(path.glob("*.jsonl"))
        else:
            yield path


def main(argv: list[str] | None = None, prog: str = "python -m agent trace-review") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", help="trace JSONL files (a directory means its *.jsonl)")
    parser.add_argument("--since", help="only turns at/after this time: ISO 8601, epoch seconds, or 30m/2h/1d ago")
    parser.add_argument("--plot", type=Path, help="write a PNG of the latency breakdown here")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--slowest", type=int, default=3, help="slowest turns listed per segment (default 3)")
    args = parser.parse_args(argv)
    if args.slowest < 0:
        parser.error(f"--slowest must be >= 0, got {args.slowest}")
    since = None
    if args.since:
        try:
            since = parse_since(args.since)
        except ValueError as exc:
            parser.error(str(exc))

    turns, problems = read_traces(_expand(args.files))
    if since is not None:
        undated = sum(t.wall is None for t in turns)
        if undated:
            problems.append(Problem("--since", f"{undated} turn(s) carry no wall-clock time; left out"))
        turns = [t for t in turns if t.wall is not None and t.wall >= since]
    summary = summarize(turns, problems, args.slowest)
    if args.plot:
        plot(turns, summary, args.plot)
        summary["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(format_table(summary))
        if args.plot:
            print(f"plot: {args.plot}")
    return 0 if turns else 1


if __name__ == "__main__":
    sys.exit(main())
