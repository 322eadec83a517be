"""`python -m lab.capacity --max-calls N --out DIR`: how many calls one worker holds, measured at the worker.

Starts the local stack (lab/callbench/stack.py: the real LiveKit server and worker; embedded defaults
unless `--env` names production parts), with the worker's stats file on (`AGENT_STATS_PATH`) and no load limit,
then adds SDK callers one at a time (lab/callbench/rtc_caller.py, each in its own room, asking a question
every `--gap` s), holding each level `--hold` s. Per level, from the stats file and the traces:
- the worker's CPU (process, and its Python threads), the calls' event-loop lag, GC pauses, RSS;
- turns, response (trace e2e: end of the caller's speech -> first agent frame published) P50/P95, turns whose
  audio queue ran dry mid-reply (`playout_gaps`: a stutter the caller hears), failed turns.
The knee is the first level that breaks a criterion: a playout gap, a failed turn, or response P95 more than
`--response-slack-ms` over the one-call level. Capacity = the level before it. CPU per call is the least-squares
slope of process CPU over the levels up to the capacity; `cpu_budget` = the process CPU at the capacity.
Writes DIR/capacity.json and DIR/capacity.md; docs/operations.md ("Capacity and load") says how to use them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

from lab.callbench.bench import QUESTIONS
from lab.callbench.rtc_caller import RtcCaller
from lab.callbench.speech import RATE, speak
from lab.callbench.stack import LocalStack

SETTLE_S = 3.0  # after a call joins, before its level is measured (its agent joins and publishes)


def caller_wav(path: Path, index: int, gap_s: float, questions: int = 4) -> None:
    """Questions with `gap_s` after each (the agent answers in the gap), looped by the caller; each caller starts
    at a different point of its loop so the calls' turns do not line up."""
    rng = random.Random(index)
    picked = [QUESTIONS[(index + i) % len(QUESTIONS)][0] for i in range(questions)]
    parts = [np.zeros(int(rng.uniform(0.5, gap_s) * RATE), dtype=np.int16)]
    for text in picked:
        parts += [speak(text), np.zeros(int(gap_s * RATE), dtype=np.int16)]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.concatenate(parts).tobytes())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by the worker's exit
    return rows


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def level_report(calls: int, t0: float, t1: float, stats: list[dict], traces: list[dict]) -> dict[str, Any]:
    """One level's figures: stats lines with t_wall in [t0, t1), turns whose wall_t0 is in it."""
    rows = [r for r in stats if t0 <= r.get("t_wall", 0) < t1]
    turns = [t for t in traces if t0 <= t.get("wall_t0", 0) < t1]
    lag = [r["loop_lag_ms"] for r in rows if r.get("loop_lag_ms", {}).get("samples")]
    e2e = [t["segments_ms"]["e2e"] for t in turns if t.get("segments_ms", {}).get("e2e") is not None]

    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(float(np.mean(values)), 3) if values else None

    return {
        "calls": calls,
        "seconds": len(rows),
        "cpu_cores": mean("cpu_cores"),
        "cpu_python_cores": mean("cpu_python_cores"),
        "cpu_share": round(float(np.mean([r["cpu_cores"] / r["cpu_usable"] for r in rows])), 3) if rows else None,
        "host_busy": mean("host_busy"),
        "rss_mb": mean("rss_mb"),
        "gc_ms_per_s": round(sum(r["gc"]["ms"] for r in rows) / len(rows), 2) if rows else None,
        "gc_max_ms": max((r["gc"]["max_ms"] for r in rows), default=None),
        "loop_lag_p95_ms": _pct([x["p95"] for x in lag], 50),  # the typical second's P95
        "loop_lag_max_ms": max((x["max"] for x in lag), default=None),
        "late_loop_seconds": sum(1 for x in lag if x["late_loops"]),
        "sampler_ms": _pct([r["sampler_ms"] for r in rows], 50),
        "turns": len(turns),
        "answered": sum(1 for t in turns if t.get("outcome") == "answered"),
        "failed_turns": sum(1 for t in turns if t.get("errors")),
        "turns_with_gaps": sum(1 for t in turns if t.get("playout_gaps")),
        "gap_ms": round(sum(t.get("playout_gap_ms", 0.0) for t in turns), 1),
        "response_p50_ms": _pct(e2e, 50),
        "response_p95_ms": _pct(e2e, 95),
    }


def find_knee(levels: list[dict], response_slack_ms: float) -> tuple[int | None, str]:
    """(calls at the first level that breaks a criterion, why); (None, "") when none does."""
    base = next((lv["response_p95_ms"] for lv in levels if lv["calls"] == 1), None)
    for lv in levels:
        if lv["calls"] == 0:
            continue
        if lv["turns_with_gaps"]:
            return lv["calls"], f"{lv['turns_with_gaps']} turn(s) with a playout gap"
        if lv["failed_turns"]:
            return lv["calls"], f"{lv['failed_turns']} failed turn(s)"
        if base is not None and lv["response_p95_ms"] is not None and lv["response_p95_ms"] > base + response_slack_ms:
            return lv["calls"], f"response P95 {lv['response_p95_ms']} ms > one call's {base} + {response_slack_ms:g}"
    return None, ""


def summarise(levels: list[dict], knee: int | None, why: str, max_calls: int) -> dict[str, Any]:
    """Capacity (the level before the knee), CPU per call (least-squares slope of the worker's CPU over the levels up
    to the capacity) and the CPU limit that stops calls between the capacity and the knee: the midpoint of the
    worker's CPU share of its cores at those two levels (without a knee: the capacity level's plus half a call's)."""
    capacity = (knee - 1) if knee is not None else max_calls
    fit = [lv for lv in levels if lv["calls"] <= max(capacity, 1) and lv["cpu_cores"] is not None]
    slope = intercept = None
    if len({lv["calls"] for lv in fit}) >= 2:
        slope, intercept = np.polyfit([lv["calls"] for lv in fit], [lv["cpu_cores"] for lv in fit], 1)
    busy = {lv["calls"]: lv["cpu_share"] for lv in levels if lv["cpu_share"] is not None}
    cpu_limit = None
    if capacity >= 1 and capacity in busy:
        step = busy.get(knee) if knee is not None else None
        if step is None and capacity - 1 in busy:
            step = busy[capacity] + (busy[capacity] - busy[capacity - 1])
        if step is not None:
            cpu_limit = round(min(1.0, (busy[capacity] + step) / 2), 2)
    return {
        "knee_calls": knee,
        "knee_reason": why or f"none up to {max_calls} calls",
        "capacity_calls": capacity,
        "cpu_per_call": round(float(slope), 3) if slope is not None else None,
        "cpu_idle": round(float(intercept), 3) if intercept is not None else None,
        "cpu_share_at_capacity": busy.get(capacity),
        "cpu_share_at_knee": busy.get(knee) if knee is not None else None,
        "cpu_limit": cpu_limit,
    }


async def ramp(stack: LocalStack, wavs: list[Path], hold_s: float) -> list[tuple[int, float, float]]:
    """Level 0 (no call) then one more caller per level; returns (calls, t0, t1) wall-clock windows."""
    windows = []
    callers: list[RtcCaller] = []
    tag = f"{int(time.time()) % 100000}"
    try:
        t0 = time.time()
        await asyncio.sleep(hold_s)
        windows.append((0, t0, time.time()))
        for n, wav in enumerate(wavs, start=1):
            caller = await RtcCaller.join(stack.page_url, f"capacity-{tag}-{n}", wav)
            callers.append(caller)
            await asyncio.wait_for(caller.agent_joined.wait(), 60)
            await asyncio.sleep(SETTLE_S)
            t0 = time.time()
            await asyncio.sleep(hold_s)
            windows.append((n, t0, time.time()))
            print(f"[capacity] {n} call(s) held {hold_s:.0f} s", file=sys.stderr, flush=True)
    finally:
        for caller in callers:
            await caller.aclose()
    return windows


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="capacity-"))
    stats_path = workdir / "stats.jsonl"
    env = {
        "AGENT_STATS_PATH": str(stats_path),
        "AGENT_MAX_SESSIONS": "1024",  # no load limit: the ramp finds it
        "AGENT_CPU_LIMIT": "off",
        "AGENT_LOAD_THRESHOLD": "1.0",
        "PYTHON": os.environ.get("PYTHON", sys.executable),  # start_all's services run on this interpreter
        "LLM_MAX_TOKENS": str(args.max_tokens),
        **dict(kv.split("=", 1) for kv in args.env),
    }
    wavs = []
    for n in range(1, args.max_calls + 1):
        wavs.append(workdir / f"caller-{n}.wav")
        caller_wav(wavs[-1], n, args.gap)
    stack = LocalStack(workdir, **env)
    started = time.time()
    stack.start()
    try:
        windows = asyncio.run(ramp(stack, wavs, args.hold))
    finally:
        stack.stop()
    stats, traces = read_jsonl(stats_path), stack.traces()
    levels = [level_report(n, t0, t1, stats, traces) for n, t0, t1 in windows]
    knee, why = find_knee(levels, args.response_slack_ms)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m lab.capacity " + " ".join(sys.argv[1:]),
        "host": {"cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
                 "cpu_model": _cpu_model(), "python": platform.python_version()},  # fmt: skip
        "git": _git_head(),
        "settings": {"hold_s": args.hold, "gap_s": args.gap, "max_tokens": args.max_tokens, "env": env,
                     "response_slack_ms": args.response_slack_ms},  # fmt: skip
        "wall_s": round(time.time() - started, 1),
        "levels": levels,
        "summary": summarise(levels, knee, why, args.max_calls),
        "stats_file": str(stats_path),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _git_head() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip()


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        f"# Worker capacity, {report['date']}",
        "",
        f"`{report['command']}` on {report['host']['cpus']} CPUs ({report['host']['cpu_model']}), commit "
        f"{report['git']}; each level held {report['settings']['hold_s']:g} s, a question every "
        f"{report['settings']['gap_s']:g} s per call.",
        "",
        "| calls | worker CPU (cores) | its Python threads | share of its cores | host busy | loop lag P95 / max (ms) "
        "| s with a late loop | GC ms/s | RSS MB | turns | gaps | failed | response P50 / P95 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in report["levels"]:
        lines.append(
            f"| {lv['calls']} | {lv['cpu_cores']} | {lv['cpu_python_cores']} | {lv['cpu_share']} | {lv['host_busy']} | "
            f"{lv['loop_lag_p95_ms']} / {lv['loop_lag_max_ms']} | {lv['late_loop_seconds']}/{lv['seconds']} | "
            f"{lv['gc_ms_per_s']} | {lv['rss_mb']} | {lv['turns']} | {lv['turns_with_gaps']} | {lv['failed_turns']} | "
            f"{lv['response_p50_ms']} / {lv['response_p95_ms']} |"
        )
    settings = [f"AGENT_MAX_SESSIONS={s['capacity_calls']}"] if s["capacity_calls"] else []
    settings += [f"AGENT_CPU_LIMIT={s['cpu_limit']}"] if s["cpu_limit"] else []
    lines += [
        "",
        f"Knee: {s['knee_calls']} ({s['knee_reason']}). Capacity: **{s['capacity_calls']} calls**; worker CPU per "
        f"call {s['cpu_per_call']} cores (idle {s['cpu_idle']}); its share of its cores {s['cpu_share_at_capacity']} "
        f"at capacity, {s['cpu_share_at_knee']} at the knee.",
        f"For this host and setup: `{' '.join(settings)}`" if settings else "No call held within the criteria.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--max-calls", type=int, default=6, help="the last level (default 6)")
    parser.add_argument("--hold", type=float, default=40.0, help="seconds each level is measured (default 40)")
    parser.add_argument("--gap", type=float, default=8.0, help="seconds after each question (default 8)")
    parser.add_argument("--max-tokens", type=int, default=40, help="LLM_MAX_TOKENS of the worker (default 40)")
    parser.add_argument("--response-slack-ms", type=float, default=50.0,
                        help="response P95 over one call's that marks the knee (default 50)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="worker/stack variable, e.g. LLM_BASE_URL=... (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="folder for capacity.json and capacity.md")
    args = parser.parse_args(argv)
    if not 1 <= args.max_calls <= 512:
        parser.error(f"--max-calls={args.max_calls} is out of range (allowed: 1..512)")
    if not 10 <= args.hold <= 600:
        parser.error(f"--hold={args.hold} is out of range (allowed: 10..600 seconds)")
    if not 3 <= args.gap <= 60:
        parser.error(f"--gap={args.gap} is out of range (allowed: 3..60 seconds)")
    if bad := [kv for kv in args.env if "=" not in kv or not kv.split("=", 1)[0]]:
        parser.error(f"--env takes KEY=VALUE, got {bad[0]!r}")
    report = run(args)
    (args.out / "capacity.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "capacity.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
