"""The stress / soak summary: what `python -m lab.stress` writes to DIR/stress.json or DIR/soak.json and
plots to DIR/stress.png or DIR/soak.png, with each target, its threshold and whether it passed (the run's exit
status). Percentiles are common.percentiles' one definition; drift compares the P95 of the first and last
`window` turns of a soak.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from common.percentiles import percentiles


class Runner(Protocol):
    """What the summary reads of a run (lab/stress.py's Runner)."""

    turns: list[Any]  # TurnRecord
    harness_errors: list[str]
    stuck: list[str]
    leaked: list[str]
    illegal_transitions: int
    tasks_before_close: list[dict[str, int]]

    def engine_streams(self) -> int: ...


class StressOptions(Protocol):
    """What the summary reads of the run's options (lab/stress.py's StressOptions)."""

    mode: str
    seed: int
    min_delay_s: float
    max_delay_s: float
    turns_per_call: int
    count: int
    barge_every: int

TARGETS_STRESS = {"errors": 0, "stale_frames_after_cancel": 0, "stuck_states": 0, "cancel_to_silence_p95_ms": 20.0}
TARGETS_SOAK = {"rss_growth_mb": 50.0, "leaked_tasks": 0, "p95_drift_pct": 10.0}


def pct(values: list[float]) -> dict[str, float | int | None]:
    return {"count": len(values), **percentiles(values), "max": round(max(values), 3) if values else None}


def drift(values: list[float | None], window: int) -> dict[str, float | int | None]:
    vals = [v for v in values if v is not None]
    if len(vals) < 2 * max(1, window) or window < 1:
        return {"window": window, "first_p95": None, "last_p95": None, "drift_pct": None}
    first = float(np.percentile(vals[:window], 95))
    last = float(np.percentile(vals[-window:], 95))
    return {
        "window": window,
        "first_p95": round(first, 3),
        "last_p95": round(last, 3),
        "drift_pct": round((last - first) / first * 100.0, 2) if first > 0 else None,
    }


def summarize(
    runner: Runner,
    opts: StressOptions,
    rss: dict[str, float],
    threads: dict[str, int],
    error_log: list[str],
    wall_s: float,
) -> dict[str, Any]:
    turns = runner.turns
    cut_rounds = [t for t in turns if t.barge]
    interrupted = [t for t in cut_rounds if t.interrupted]
    error_lines = runner.harness_errors + error_log + [f"{t.turn_id or t.index}: {e}" for t in turns for e in t.errors]
    summary: dict[str, Any] = {
        "mode": opts.mode,
        "seed": opts.seed,
        "calls": len({t.call for t in turns}),
        "user_turns": len(turns),
        "answered": sum(t.outcome == "answered" for t in turns),
        "cut_rounds": len(cut_rounds),
        "rounds_interrupted": len(interrupted),
        # the reply ended before the barge-in was detected (delay past its end): not counted as a cut
        "rounds_not_interrupted": len(cut_rounds) - len(interrupted),
        "barge_delay_ms": {"min": opts.min_delay_s * 1000.0, "max": opts.max_delay_s * 1000.0},
        "cancel_to_silence_ms": pct([t.cancel_to_silence_ms for t in turns if t.cancel_to_silence_ms is not None]),
        "cancel_to_last_frame_ms": pct(
            [t.cancel_to_last_frame_ms for t in turns if t.cancel_to_last_frame_ms is not None]
        ),
        "stale_frames_after_cancel": sum(t.stale_frames for t in turns),
        "errors": len(error_lines),
        "stuck_states": len(runner.stuck),
        "illegal_transitions": runner.illegal_transitions,
        "leaked_tasks": len(runner.leaked),
        # tasks alive in the call just before it closed (not leaks: the close ends them; growth here means
        # per-turn accumulation inside a long call)
        "tasks_before_close": runner.tasks_before_close[-1] if runner.tasks_before_close else {},
        "engine_slots_in_use_at_end": runner.engine_streams(),
        "rss_mb": rss,
        "threads": threads,
        "e2e_ms": pct([t.e2e_ms for t in turns if t.e2e_ms is not None]),
        "tts_first_to_publish_ms": pct(
            [t.tts_first_to_publish_ms for t in turns if t.tts_first_to_publish_ms is not None]
        ),
        "wall_s": round(wall_s, 1),
        "error_lines": error_lines[:50],
        "stuck": runner.stuck[:50],
        "leaked": runner.leaked[:50],
    }
    if opts.mode == "soak":
        idx = [t.index for t in turns]
        mem = [t.rss_mb for t in turns]
        slope = float(np.polyfit(idx, mem, 1)[0]) if len(turns) >= 2 else 0.0
        half = len(turns) // 2
        slope_late = float(np.polyfit(idx[half:], mem[half:], 1)[0]) if len(turns) - half >= 2 else 0.0
        first_call = [t.rss_mb for t in turns if t.call == 1]
        if first_call and len(first_call) < len(turns):
            rss["after_first_call"] = first_call[-1]
            rss["growth_after_first_call"] = round(rss["end"] - first_call[-1], 2)
        window = min(100, len(turns) // 2)
        summary.update(
            turns_per_call=opts.turns_per_call or opts.count,
            barge_every=opts.barge_every,
            rss_slope_kb_per_turn=round(slope * 1024.0, 3),
            # the second half alone: a still-climbing allocator high-water mark vs. a steady leak
            rss_slope_kb_per_turn_second_half=round(slope_late * 1024.0, 3),
            p95_drift={
                "e2e_ms": drift([t.e2e_ms for t in turns], window),
                "tts_first_to_publish_ms": drift([t.tts_first_to_publish_ms for t in turns], window),
            },
            tasks_alive={
                "first_turn": turns[0].tasks if turns else None,
                "last_turn": turns[-1].tasks if turns else None,
            },
        )
    summary["targets"] = targets(summary, opts.mode)
    summary["pass"] = all(t["pass"] for t in summary["targets"].values())
    return summary


def targets(s: dict[str, Any], mode: str) -> dict[str, dict[str, Any]]:
    def gate(value: Any, threshold: float, ok: bool) -> dict[str, Any]:
        return {"value": value, "threshold": threshold, "pass": bool(ok)}

    out = {
        "stuck_states": gate(s["stuck_states"], 0, s["stuck_states"] == 0),
        "leaked_tasks": gate(s["leaked_tasks"], 0, s["leaked_tasks"] == 0),
        "engine_slots_in_use_at_end": gate(s["engine_slots_in_use_at_end"], 0, s["engine_slots_in_use_at_end"] == 0),
    }
    if mode == "stress":
        p95 = s["cancel_to_silence_ms"]["p95"]
        out["errors"] = gate(s["errors"], 0, s["errors"] == 0)
        out["stale_frames_after_cancel"] = gate(s["stale_frames_after_cancel"], 0, s["stale_frames_after_cancel"] == 0)
        limit = TARGETS_STRESS["cancel_to_silence_p95_ms"]
        out["cancel_to_silence_p95_ms"] = gate(p95, limit, p95 is not None and p95 <= limit)
        out["rounds_interrupted"] = gate(s["rounds_interrupted"], s["cut_rounds"], s["rounds_interrupted"] > 0)
    else:
        growth = s["rss_mb"]["growth"]
        out["errors"] = gate(s["errors"], 0, s["errors"] == 0)
        out["rss_growth_mb"] = gate(growth, TARGETS_SOAK["rss_growth_mb"], growth < TARGETS_SOAK["rss_growth_mb"])
        drift = s["p95_drift"]["e2e_ms"]["drift_pct"]
        limit = TARGETS_SOAK["p95_drift_pct"]
        out["e2e_p95_drift_pct"] = gate(drift, limit, drift is not None and drift < limit)
    return out


def plot(runner: Runner, summary: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = runner.turns
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    if summary["mode"] == "stress":
        cuts = [t for t in turns if t.cancel_to_silence_ms is not None]
        axes[0].hist([t.cancel_to_silence_ms for t in cuts], bins=30)
        axes[0].set_xlabel("cancel→silence (ms)")
        axes[0].set_title(f"cancel→silence, n={len(cuts)}, P95 {summary['cancel_to_silence_ms']['p95']} ms")
        axes[1].scatter([t.delay_ms for t in cuts], [t.cancel_to_silence_ms for t in cuts], s=8)
        axes[1].set_xlabel("user barge-in start after first agent frame (ms)")
        axes[1].set_ylabel("cancel→silence (ms)")
        axes[1].set_title(f"stale frames after cancel: {summary['stale_frames_after_cancel']}")
    else:
        e2e = [(t.index, t.e2e_ms) for t in turns if t.e2e_ms is not None]
        axes[0].plot([i for i, _ in e2e], [v for _, v in e2e], ".", ms=3)
        axes[0].set_xlabel("turn")
        axes[0].set_ylabel("e2e (ms)")
        d = summary["p95_drift"]["e2e_ms"]
        axes[0].set_title(f"e2e; P95 first/last {d['window']}: {d['first_p95']} / {d['last_p95']} ms")
        axes[1].plot([t.index for t in turns], [t.tasks for t in turns], lw=1)
        axes[1].set_xlabel("turn")
        axes[1].set_ylabel("asyncio tasks alive")
        axes[1].set_title(f"leaked tasks after calls: {summary['leaked_tasks']}")
    axes[2].plot([t.index for t in turns], [t.rss_mb for t in turns], lw=1)
    axes[2].set_xlabel("turn")
    axes[2].set_ylabel("RSS (MB)")
    rss = summary["rss_mb"]
    axes[2].set_title(f"RSS {rss['start']:.0f} → {rss['end']:.0f} MB (growth {rss['growth']:+.1f})")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
