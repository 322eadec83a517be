"""The convbench report: JSON (every row), a markdown table and a plot, with device, versions, date and command.

`build(scored, meta)` adds the issue-28 targets and their verdicts to `score.score`'s output; `write(report, out)`
writes OUT/convbench.json, OUT/convbench.md and OUT/convbench.png; `compare_plot(reports, path)` draws several runs
(e.g. TURN_HANDLING vad / livekit / ours) as end-of-turn delay against false cut-offs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# issue 28's targets, on our corpus
TARGETS = {"false_cutoff_rate": 0.05, "decision_p50_ms": 300.0, "decision_p95_ms": 700.0,
           "false_interruption_rate": 0.10, "barge_in_missed": 0, "barge_in_silence_p95_ms": 150.0}  # fmt: skip


def verdicts(summary: dict[str, Any]) -> dict[str, str]:
    def check(value: float | None, limit: float) -> str:
        return "n/a" if value is None else "pass" if value <= limit else "MISS"

    ends, barge = summary["true_ends"]["decision_ms"], summary["barge_ins"]
    return {
        "false_cutoff_rate": check(summary["pauses"]["false_cutoff_rate"], TARGETS["false_cutoff_rate"]),
        "decision_p50_ms": check(ends["p50"], TARGETS["decision_p50_ms"]),
        "decision_p95_ms": check(ends["p95"], TARGETS["decision_p95_ms"]),
        "false_interruption_rate": check(summary["false_interruptions"]["rate"], TARGETS["false_interruption_rate"]),
        "barge_in_missed": check(barge["missed"] if barge["n"] else None, TARGETS["barge_in_missed"]),
        "barge_in_silence_p95_ms": check(barge["silence_ms"]["p95"], TARGETS["barge_in_silence_p95_ms"]),
    }


def build(scored: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    return {"benchmark": "convbench", **meta, "targets": TARGETS, "verdict": verdicts(scored["summary"]), **scored}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _wait_table(pauses: dict[str, Any], ends: dict[str, Any]) -> list[str]:
    """Pauses and true ends by the wait the worker's judgement chose (none for a report from before `by_wait`, or a
    worker that traces no judgement)."""
    p, e = pauses.get("by_wait", {}), ends.get("by_wait", {})
    if not (set(p) | set(e)) - {"none"}:
        return []
    lines = ["", "| wait the worker chose (its traces; none: not judged) | pauses | of which cut | true ends | "
             "their end -> `thinking` P50 / P95 ms |", "|---|---|---|---|---|"]  # fmt: skip
    for w in (w for w in ("short", "medium", "long", "none") if w in p or w in e):
        d = e.get(w, {}).get("decision_ms") or {}
        delay = f"{d['p50']} / {d['p95']}" if d.get("n") else "-"
        lines.append(f"| {w} | {p.get(w, {}).get('n', 0)} | {p.get(w, {}).get('cut', 0)} | {e.get(w, {}).get('n', 0)} "
                     f"| {delay} |")  # fmt: skip
    return lines


def markdown(report: dict[str, Any]) -> str:
    s, v = report["summary"], report["verdict"]
    p, e, f, b = s["pauses"], s["true_ends"], s["false_interruptions"], s["barge_ins"]
    th = report["thresholds"]
    lines = [
        f"# Conversation benchmark: {report['device']}, {report['date'][:10]}",
        "",
        f"`{report['command']}` (TURN_HANDLING={report['config']['turn_handling']}; livekit-server "
        f"{report['versions'].get('livekit-server')}, livekit-agents {report['versions'].get('livekit-agents')}, "
        f"livekit {report['versions'].get('livekit')}). {report['counts']['scripts']} scripts, "
        f"{report['counts']['items_played']}/{report['counts']['items']} items played, "
        f"{report['counts']['errors']} errors, {report['duration_s']:.0f} s.",
        "",
        "| measure | value | target | verdict |",
        "|---|---|---|---|",
        f"| false cut-offs (pauses inside a turn) | {p['cut']}/{p['n']} = {_pct(p['false_cutoff_rate'])} "
        f"(before the resume: {p['cut_before_resume']}) | <= {_pct(TARGETS['false_cutoff_rate'])} | "
        f"{v['false_cutoff_rate']} |",
        f"| end of turn: last voiced sound -> `thinking`, P50 / P95 (n={e['decision_ms']['n']}) | "
        f"{e['decision_ms']['p50']} / {e['decision_ms']['p95']} ms | <= {TARGETS['decision_p50_ms']:.0f} / "
        f"{TARGETS['decision_p95_ms']:.0f} ms | {v['decision_p50_ms']} / {v['decision_p95_ms']} |",
        f"| end of turn -> worker's commit (trace `{report.get('commit_point')}`), P50 / P95 "
        f"(n={e['commit_ms']['n']}) | "
        f"{e['commit_ms']['p50']} / {e['commit_ms']['p95']} ms | | |",
        f"| end of turn -> first agent audio heard, P50 / P95 (n={e['audio_ms']['n']}) | {e['audio_ms']['p50']} / "
        f"{e['audio_ms']['p95']} ms | | |",
        f"| false interruptions (backchannels + noises) | {f['stopped']}/{f['n']} = {_pct(f['rate'])} | "
        f"<= {_pct(TARGETS['false_interruption_rate'])} | {v['false_interruption_rate']} |",
        f"| true barge-ins missed | {b['missed']}/{b['n']} | 0 | {v['barge_in_missed']} |",
        f"| barge-in onset -> silence at the caller, P50 / P95 (n={b['silence_ms']['n']}) | "
        f"{b['silence_ms']['p50']} / {b['silence_ms']['p95']} ms | P95 <= {TARGETS['barge_in_silence_p95_ms']:.0f} ms "
        f"| {v['barge_in_silence_p95_ms']} |",
        f"| barge-in onset -> duck (>= {th['duck_db']:g} dB down), P50 / P95 | {b['duck_ms']['p50']} / "
        f"{b['duck_ms']['p95']} ms | | |",
        "",
        f"Words heard: {e['words_found']}/{e['words_expected']} expected words in the user's final transcripts. "
        f"True ends with no `thinking` within {report['windows_s']['true_end']:g} s: {e['no_decision']}.",
        "",
        "| pauses by kind | n | cut | rate |", "|---|---|---|---|",
        *[f"| {k} | {g['n']} | {g['cut']} | {_pct(g['rate'])} |" for k, g in p["by_kind"].items()],
        "", "| pauses by length (ms) | n | cut | rate |", "|---|---|---|---|",
        *[f"| {k} | {g['n']} | {g['cut']} | {_pct(g['rate'])} |" for k, g in p["by_length_ms"].items()],
        *_wait_table(p, e),
        "", "| after a ... | played | stopped | of which the reply was untraced | ducked | resumed (gap P50 ms) | "
        "answered as a turn | reply ended |", "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for kind in ("backchannel", "noise"):
        k = f[kind]
        lines.append(f"| {kind} | {k['n']} | {k['stopped']} | {k['stopped_untraced']} | {k['ducked']} | "
                     f"{k['resumed']} ({k['gap_ms']['p50']}) | {k['answered']} | {k['reply_ended']} |")  # fmt: skip
    if s["not_played"]:
        lines += ["", f"Not played ({len(s['not_played'])}):", ""]
        lines += [f"- {r['script']} {r['item']} ({r['kind']}): {r['reason']}" for r in s["not_played"]]
    c = report.get("caller", {})
    lines += [
        "",
        f"Thresholds (lab/convbench/activity.py): silent below {th['silence_db']:g} dBFS, stopped after "
        f"{th['stop_min_ms']:g} ms of that, ducked {th['duck_db']:g} dB under its level of the "
        f"{th['reference_ms']:g} ms before the cue for {th['duck_min_ms']:g} ms. Caller health: publish lateness P99 "
        f"{c.get('publish_late_ms', {}).get('p99')} ms (max {c.get('publish_late_ms', {}).get('max')}), loop lag P99 "
        f"{c.get('loop_lag_ms', {}).get('p99')} ms.",
        "",
        "Per-item rows (which pause was cut, which backchannel stopped the agent) are in convbench.json: "
        "`pause_rows`, `end_rows`, `cued_rows`; the recorded calls in timelines/ (`--rescore` scores them again).",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib  # heavy: only when a plot is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = report["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    groups = s["pauses"]["by_length_ms"]
    ax = axes[0]
    ax.bar(list(groups), [100 * (g["rate"] or 0) for g in groups.values()], color="#c0504d")
    for i, g in enumerate(groups.values()):
        ax.annotate(f"{g['cut']}/{g['n']}", (i, 100 * (g["rate"] or 0)), ha="center", va="bottom")
    ax.set(title="false cut-offs by pause length", xlabel="pause inside the turn (ms)", ylabel="cut (%)", ylim=(0, 110))
    ax = axes[1]
    curves = (("decision_ms", "-> thinking"), ("commit_ms", "-> worker commit"), ("audio_ms", "-> agent audio"))
    for key, label in curves:
        values = sorted(r[key] for r in report["end_rows"] if r[key] is not None)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=label)
    ax.set(title="end of turn: last voiced sound ->", xlabel="ms", ylabel="share of true ends")
    ax.legend(loc="lower right")
    ax = axes[2]
    rows = [r for r in report["cued_rows"] if r["played"]]
    labels = []
    for y, (kind, color) in enumerate((("barge_in", "#4f81bd"), ("backchannel", "#9bbb59"), ("noise", "#8064a2"))):
        mine = [r for r in rows if r["kind"] == kind]
        pts = [r["silence_ms"] for r in mine if r["silence_ms"] is not None and r["stopped"]]
        ax.scatter(pts, [y] * len(pts), color=color, alpha=0.6)
        labels.append(f"{kind}\n(stopped {len(pts)}/{len(mine)})")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(-0.5, len(labels) - 0.5)
    ax.set(title="onset -> agent silent at the caller", xlabel="ms")
    fig.suptitle(f"convbench, TURN_HANDLING={report['config']['turn_handling']}, {report['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_plot(reports: list[dict[str, Any]], path: Path) -> None:
    """One point per run: false cut-off rate against end-of-turn decision P50 (bar: P95); labelled by its mode and, when
    given, its `run` (the folder it was read from)."""
    import matplotlib  # heavy: only when a plot is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in reports:
        x = 100 * (r["summary"]["pauses"]["false_cutoff_rate"] or 0)
        d = r["summary"]["true_ends"]["decision_ms"]
        if d["p50"] is None:
            continue
        run = f" ({r['run']})" if r.get("run") else ""
        ax.errorbar([x], [d["p50"]], yerr=[[0], [d["p95"] - d["p50"]]], fmt="o", capsize=4,
                    label=f"{r['config']['turn_handling']}{run}: P50, bar to P95")  # fmt: skip
    ax.axvline(100 * TARGETS["false_cutoff_rate"], color="grey", ls=":")
    ax.axhline(TARGETS["decision_p50_ms"], color="grey", ls=":")
    ax.set(xlabel="false cut-offs (% of pauses inside a turn)", ylabel="end-of-turn decision (ms)",
           title="turn-taking: delay against false cut-offs")  # fmt: skip
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "convbench.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "convbench.md").write_text(markdown(report))
    plot(report, out / "convbench.png")
