"""`python -m lab.convbench.many --calls 1,2,4 --out DIR`: N calls at once through one worker (issue 32).

For each N in `--calls` (one after the other, on one stack): N scripted SDK callers (caller.ScriptedCaller, no
browser), each in its own room so each call is dispatched a job, arriving evenly over `--arrival-window` seconds,
each playing the many-calls script (corpus.py: questions after the agent is done and a reading gap, two answers
cut by a barge-in). `--caller-procs P` spreads the callers over P processes, each with one 10 ms pacer; every
process records its publish lateness and loop lag, so a caller that falls behind is not blamed on the worker.
Per call and per N: response (the caller's end of speech -> first agent audio at the caller) P50/P95/P99, gaps in
what the caller receives inside an agent reply (a silent run of over `GAP_MS` while the agent's state is
`speaking`; arrival stalls of the received track over `GAP_MS`; WebRTC's concealed audio), barge-in onset ->
silence, failed calls and turns never answered; per worker the stats file (`AGENT_STATS_PATH`, worker_stats.py);
for the host, every process's CPU by role (host_cpu.py: workers, callers, LiveKit's server, engine servers ...).
Writes DIR/many.json, DIR/many.md, DIR/many.png (response and gaps against N), DIR/timelines/n<N>/ (the recorded
calls) and DIR/stack/ (logs, traces, worker stats). `--stand-in production` puts lab.fake_openai (real
HTTP) in place of the LLM and STT with production-like times (first token 150 ms, then 40 tokens/s; STT 150 ms);
`--tts-model DIR` gives the worker real (or random 0.6B) weights on a GPU host. `--workers K` runs K worker
processes behind the one LiveKit server (each with its own engine, stats file and an even share of the largest N
as `AGENT_MAX_SESSIONS`), `--gpus G` spreads them over G GPUs: LiveKit's dispatch places the calls.
`--engine-servers` gives each GPU (or the host) one engine process (`python -m tts_engine serve`) that its workers
share over HTTP (`TTS_ENGINE_URL`) instead of an engine in every worker; then each level also says how many
streams each engine server started and each GPU's memory (engines.py). Exit 0 when no call failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime as dt
import json
import math
import multiprocessing
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.local.defaults import ensure_random_checkpoint
from agent.tracing import Outcome
from common.percentiles import percentiles
from lab.callbench.bench import device, versions
from lab.callbench.rtc_caller import worker_info
from lab.callbench.stack import LocalStack, free_port, room_traces, wait_for_line
from lab.convbench import corpus, engines, host_cpu
from lab.convbench import worker_stats as stats_file
from lab.convbench.activity import DEFAULT_THRESHOLDS, FRAME_S, Thresholds, runs
from lab.convbench.caller import Pacer, ScriptedCaller
from lab.convbench.conductor import play_script
from lab.convbench.runner import JOIN_TIMEOUT_S, STACK_ENV, read_traces
from lab.convbench.score import EOT_WINDOW_S, Signals, cued_rows
from lab.convbench.script import Script, Turn, load_script
from lab.convbench.timeline import Timeline
from lab.fake_openai import PRESETS
from tts_engine.config import EngineConfig

GAP_MS = 40.0  # issue 32: an audible gap is no agent audio for more than 40 ms inside a reply
FAILED_OUTCOMES = (Outcome.ERROR.value, Outcome.WORKER_LOST.value)  # the agent did not answer (its apology may play)
SPOKEN_OUTCOMES = (Outcome.ANSWERED.value, Outcome.INTERRUPTED.value)  # an answer played, whole or cut
STAND_INS = {"production": PRESETS["production"]}  # lab.fake_openai --preset production
SPAWN_LEAD_S = 6.0  # caller processes import livekit and numpy before the first arrival
MATCH_S = 2.0  # a caller's end of speech and the worker's (VAD hangover, transport) are at most this far apart


@dataclass(frozen=True)
class Worker:
    """One worker process of the run: start_all's `agent`, or an extra one the run starts."""

    name: str
    health_port: int
    stats_path: Path


@dataclass
class CallSpec:
    index: int
    room: str
    start_at: float  # Unix s


def first_turns(script: Script, turns: int | None) -> Script:
    """The script up to its `turns`-th turn and the items cued on that turn's reply."""
    if not turns:
        return script
    items, seen = [], 0
    for item in script.items:
        seen += isinstance(item, Turn)
        if seen > turns:
            break
        items.append(item)
    return Script(path=script.path, name=script.name, speaker=script.speaker, items=items)


# -- the callers (one process or several) -----------------------------------------------------------------------
async def _callers(page_url: str, script: Script, specs: list[CallSpec], th: Thresholds) -> tuple[list, dict]:
    pacer = Pacer.shared()

    async def one(spec: CallSpec) -> Timeline:
        await asyncio.sleep(max(0.0, spec.start_at - time.time()))
        tl = Timeline(script=script.name, room=spec.room, speaker={"call": spec.index})
        caller = None
        try:
            caller = await ScriptedCaller.join(page_url, spec.room, pacer=pacer, thresholds=th)
            await caller.ready(JOIN_TIMEOUT_S)
            await play_script(caller, script, tl)
        except Exception as exc:  # noqa: BLE001 -- a failed call is a result, recorded with its reason
            tl.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            if caller is not None:
                caller.record_into(tl)
                await caller.aclose()
        return tl

    timelines = await asyncio.gather(*(one(s) for s in specs))
    return list(timelines), pacer.health()


def caller_process(page_url: str, script_path: str, turns: int | None, specs: list[dict], th: dict) -> dict:
    """One caller process's work (also run in-process when P is 1): JSON in, JSON out."""
    script = first_turns(load_script(Path(script_path)), turns)
    timelines, health = asyncio.run(_callers(page_url, script, [CallSpec(**s) for s in specs], Thresholds(**th)))
    return {"timelines": [tl.to_json() for tl in timelines], "health": health}


def run_calls(page_url: str, script_path: Path, n: int, *, window_s: float, procs: int, turns: int | None,
              th: Thresholds = DEFAULT_THRESHOLDS, tag: str = "") -> tuple[list[Timeline], list[dict]]:  # fmt: skip
    tag = tag or secrets.token_hex(3)
    start = time.time() + (SPAWN_LEAD_S if procs > 1 else 1.0)
    specs = [CallSpec(i, f"mc-{tag}-n{n}-{i:03d}", start + (window_s * i / n if n > 1 else 0.0)) for i in range(n)]
    chunks = [[vars(s) for s in specs[p::procs]] for p in range(procs)]
    args = (page_url, str(script_path), turns)
    if procs == 1:
        results = [caller_process(*args, chunks[0], th.to_json())]
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=procs, mp_context=context) as pool:
            futures = [pool.submit(caller_process, *args, chunk, th.to_json()) for chunk in chunks if chunk]
            results = [f.result() for f in futures]
    timelines = [Timeline.from_json(t) for r in results for t in r["timelines"]]
    return sorted(timelines, key=lambda tl: tl.room), [r["health"] for r in results]


# -- scoring ----------------------------------------------------------------------------------------------------
def reply_spans(tl: Timeline) -> list[tuple[float, float]]:
    """The agent's replies on the caller's clock: from each `speaking` state to the next other state."""
    spans, start = [], None
    for t, state in tl.states:
        if state == "speaking" and start is None:
            start = t
        elif state != "speaking" and start is not None:
            spans.append((start, t))
            start = None
    if start is not None:
        spans.append((start, tl.ended or start))
    return spans


def reply_gaps(tl: Timeline, th: Thresholds) -> dict[str, Any]:
    """Inside each reply, between its first and last audible frame: silent runs over GAP_MS (content: the agent's
    audio came late) and arrival stalls over GAP_MS (the received track's own timing)."""
    t, db = tl.agent_audio()
    silent_ms, stalls_ms, replies, with_gap = [], [], 0, 0
    for lo, hi in reply_spans(tl):
        inside = np.flatnonzero((t >= lo) & (t < hi + 0.3) & (db >= th.silence_db))
        if inside.size < 2:
            continue
        replies += 1
        a, b = inside[0], inside[-1]
        gaps = [(e - s) * FRAME_S * 1000 for s, e in runs(db[a:b] < th.silence_db) if (e - s) * FRAME_S * 1000 > GAP_MS]
        stalls = [float(d) * 1000 for d in np.diff(t[a : b + 1]) if d * 1000 > GAP_MS]
        silent_ms += gaps
        stalls_ms += stalls
        with_gap += bool(gaps)
    return {"replies": replies, "replies_with_gap": with_gap, "gaps_ms": [round(g, 1) for g in silent_ms],
            "stalls_ms": [round(s, 1) for s in stalls_ms]}  # fmt: skip


def concealed_ms(tl: Timeline) -> float | None:
    """Audio WebRTC made up at the caller (late or lost packets), silence excluded, over the call."""
    if len(tl.rtc) < 2:
        return None
    first, last = tl.rtc[0], tl.rtc[-1]
    loud = (last["concealed_samples"] - last["silent_concealed_samples"]) - (
        first["concealed_samples"] - first["silent_concealed_samples"])  # fmt: skip
    return round(loud / 48.0, 1)


def call_row(tl: Timeline, th: Thresholds) -> dict[str, Any]:
    sig = Signals(tl, th)
    responses, ends = [], []
    for rec in (r for r in tl.items if r.kind == "turn" and r.played):
        end = tl.plays_of(rec.item_id)[-1].last_voiced
        onset = next((o for o in sig.onsets if end <= o < end + EOT_WINDOW_S), None)
        responses.append(None if onset is None else round((onset - end) * 1000.0, 1))
        ends.append(round(end, 3))
    barges = [r for r in cued_rows(tl, sig) if r["kind"] == "barge_in" and r["played"]]
    return {
        "room": tl.room, "errors": tl.errors, "turns": len(responses),
        "failed": bool(tl.errors) or not responses, "unanswered": sum(r is None for r in responses),
        "response_ms": responses, "response_ends": ends,  # each turn's last voiced sound, Unix s (caller's clock)
        "barge_in_silence_ms": [r["silence_ms"] for r in barges],
        "barge_in_missed": sum(r["silence_ms"] is None for r in barges), "concealed_ms": concealed_ms(tl),
        **reply_gaps(tl, th),
    }  # fmt: skip


def traced_turns(records: list[dict], room: str, ends: list[float] | None = None) -> dict[str, Any]:
    """The worker's own account of a call's turns (its trace records of `room`), as fields of that call's row:
    outcomes, the turns it failed, the turns it answered, and the errors. A failed turn is answered by the apology,
    which the caller hears as a response; one failed by an error whose apology the caller then cut reads
    `interrupted`, so a turn with an error recorded counts as failed too. With `ends` (the row's `response_ends`):
    `response_waits`, for each response the wait the worker's turn decision chose (short, medium, long; None when
    no trace matches), from the turn whose end of speech the worker saw within MATCH_S after the caller's."""
    turns = room_traces(records, room)
    failed = [r for r in turns if r.get("outcome") in FAILED_OUTCOMES or r.get("errors")]
    answered = [r for r in turns if r.get("outcome") in SPOKEN_OUTCOMES and not r.get("errors")]
    errors = sorted({e for r in failed for e in r.get("errors") or []})
    out = {
        "outcomes": dict(Counter(str(r.get("outcome")) for r in turns)),
        "failed_turns": len(failed),
        "answered_turns": len(answered),
        "traced_errors": errors,
    }
    if ends is not None:
        timed = [r for r in turns if isinstance(r.get("wall_t0"), (int, float))]
        heard = sorted(((r["wall_t0"], (r.get("turn_decision") or {}).get("wait")) for r in timed),
                       key=lambda tw: tw[0])  # fmt: skip
        out["response_waits"] = [next((w for t, w in heard if end <= t < end + MATCH_S), None) for end in ends]
    return out


def by_wait(rows: list[dict]) -> dict[str, dict]:
    """Response percentiles per turn-decision wait: the load's cost apart from the turn-taking policy's (a turn
    whose words read NEUTRAL waits `medium`, over a second more, at any load)."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        for ms, wait in zip(r["response_ms"], r.get("response_waits") or [], strict=False):
            if ms is not None:
                groups.setdefault(str(wait), []).append(ms)
    return {w: {"n": len(v), **percentiles(v, (50, 95, 99), 1)} for w, v in sorted(groups.items())}


def level_summary(n: int, rows: list[dict], health: list[dict], workers: list[dict],
                  host: dict | None = None, engine_load: dict | None = None) -> dict[str, Any]:  # fmt: skip
    """One level's figures; `workers` holds each worker's stats summary (worker_stats.summarize), in start order;
    `host` the host's CPU by role over the level (host_cpu.summarize); `engine_load` each engine server's streams
    and each GPU's memory (engines.summarize), with `--engine-servers`."""
    responses = [v for r in rows for v in r["response_ms"] if v is not None]
    gaps = [g for r in rows for g in r["gaps_ms"]]
    stalls = [s for r in rows for s in r["stalls_ms"]]
    silences = [v for r in rows for v in r["barge_in_silence_ms"] if v is not None]
    concealed = [r["concealed_ms"] for r in rows if r["concealed_ms"] is not None]
    outcomes = sum((Counter(r.get("outcomes") or {}) for r in rows), Counter())
    errors = sorted({e for r in rows for e in r.get("traced_errors") or []})
    return {
        "calls": n, "failed_calls": sum(r["failed"] for r in rows),
        "turns": sum(r["turns"] for r in rows), "unanswered_turns": sum(r["unanswered"] for r in rows),
        # the worker's own account of each turn (traced_turns): what the callers heard as a response may have been
        # the apology for a failed turn
        "turn_outcomes": dict(outcomes), "failed_turns": sum(r.get("failed_turns", 0) for r in rows),
        "traced_errors": errors[:20],
        "response_ms": {"n": len(responses), **percentiles(responses, (50, 95, 99), 1)},
        "response_ms_by_wait": by_wait(rows),
        "replies": sum(r["replies"] for r in rows),
        "calls_with_gap": sum(r["replies_with_gap"] > 0 for r in rows), "gaps": len(gaps),
        "gap_ms_max": max(gaps, default=None), "stalls": len(stalls), "stall_ms_max": max(stalls, default=None),
        "concealed_ms_total": round(sum(concealed), 1) if concealed else None,
        "barge_in_silence_ms": {"n": len(silences), **percentiles(silences, (50, 95), 1)},
        "barge_in_missed": sum(r["barge_in_missed"] for r in rows),
        "caller_processes": health, "workers": workers, "host": host, "engines": engine_load,
    }  # fmt: skip


# -- the whole command ------------------------------------------------------------------------------------------
def stand_in(kind: str, log: Path) -> tuple[subprocess.Popen, str]:
    """lab.fake_openai on a free port with `kind`'s times; returns the process and its base URL."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.fake_openai", "--port", str(port), "--preset", kind],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    wait_for_line(log, "fake OpenAI server on", 30, proc=proc)
    return proc, f"http://127.0.0.1:{port}/v1"


def wait_idle(health_ports: list[int], timeout_s: float = 90.0) -> None:
    """Until no worker has a job left (LiveKit closes a room some seconds after its caller left)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(int(worker_info(port).get("active_jobs", 0)) == 0 for port in health_ports):
                return
        except OSError:
            pass
        time.sleep(1.0)


def engine_server(gpu: int | None, model: Path, log: Path, timeout_s: float = 900.0) -> tuple[subprocess.Popen, str]:
    """`python -m tts_engine serve` on a free port (on GPU `gpu` when given, no per-client stream limit: all of a
    host's workers come from one address), awaited until /healthz answers; returns the process and its URL."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tts_engine", "serve", "--port", str(port), "--client-max-streams", "0",
           "--env-file", "/dev/null", "--model", str(model)]  # fmt: skip
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {})}
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the engine server exited ({proc.returncode}) before it answered; see {log}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(1.0)
    proc.kill()
    raise TimeoutError(f"the engine server did not answer /healthz within {timeout_s:.0f} s; see {log}")


def worker_env(index: int, workers: int, gpus: int, stats_path: Path, sessions: int,
               engine_urls: list[str] | None = None) -> dict[str, str]:  # fmt: skip
    """Worker `index`'s own settings: its stats file, its share of the calls and either its engine server (round
    robin over `engine_urls`) or, with `gpus`, its GPU (round robin) and, where several share one GPU, an even share
    of that GPU's memory for its own engine."""
    env = {"AGENT_STATS_PATH": str(stats_path.resolve()), "AGENT_MAX_SESSIONS": str(sessions)}
    if engine_urls:
        env["TTS_ENGINE_URL"] = engine_urls[index % len(engine_urls)]
    elif gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
        sharing = math.ceil(workers / gpus)
        if sharing > 1:
            env["TTS_DEEP_STREAM_GPU_MEMORY_FRACTION"] = f"{EngineConfig.gpu_memory_fraction / sharing:.3f}"
    return env


def start_extra_workers(stack: LocalStack, envs: dict[str, dict[str, str]], timeout_s: float = 600.0) -> list[Worker]:
    """The workers named in `envs`, each with its own settings, started at once (each loads its own engine: minutes
    on a cold GPU host) and awaited until registered."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(envs))) as pool:
        procs = dict(zip(envs, pool.map(lambda name: stack.start_worker(name, timeout_s, **envs[name]), envs),
                         strict=True))  # fmt: skip
    return [Worker(name, procs[name].health_port, Path(envs[name]["AGENT_STATS_PATH"])) for name in envs]


def measure(stack: LocalStack, levels: list[int], script_path: Path, *, window_s: float, procs: int,
            turns: int | None, workers: list[Worker], keep: Path | None = None, host_path: Path | None = None,
            engines_path: Path | None = None, progress=print) -> list[dict]:  # fmt: skip
    """Each level in turn; the recorded calls go to `keep`/n<N>/ when given; `host_path`: the HostSampler's file,
    `engines_path` the EngineSampler's."""
    out = []
    for n in levels:  # each level starts idle: the one before waited for its jobs to end
        t0 = time.time()
        timelines, health = run_calls(stack.page_url, script_path, n, window_s=window_s, procs=procs, turns=turns)
        t1 = time.time()
        if keep is not None:
            (keep / f"n{n}").mkdir(parents=True, exist_ok=True)
            for tl in timelines:
                (keep / f"n{n}" / f"{tl.room}.json").write_text(json.dumps(tl.to_json()) + "\n")
        rows = [call_row(tl, DEFAULT_THRESHOLDS) for tl in timelines]
        wait_idle([w.health_port for w in workers])  # a job writes its last turn when it ends
        records = stack.traces()
        for tl, row in zip(timelines, rows, strict=True):
            row.update(traced_turns(records, tl.room, row["response_ends"]))
        per_worker = [stats_file.summarize(stats_file.read(w.stats_path), t0, t1) for w in workers]
        host = host_cpu.summarize(host_cpu.read(host_path), t0, t1) if host_path else None
        engine_load = engines.summarize(engines.read(engines_path), t0, t1) if engines_path else None
        summary = level_summary(n, rows, health, per_worker, host, engine_load)
        out.append({**summary, "rows": rows, "seconds": round(t1 - t0, 1)})
        r = summary["response_ms"]
        spread = "/".join(str(w.get("calls_max")) for w in summary["workers"]) if len(workers) > 1 else ""
        progress(f"[many] N={n}: response P50/P95/P99 {r['p50']}/{r['p95']}/{r['p99']} ms, calls with a gap "
                 f"{summary['calls_with_gap']}, failed {summary['failed_calls']}, {t1 - t0:.0f} s"
                 + (f", calls per worker (max) {spread}" if spread else "")
                 + (f", streams per engine {shares(engine_load)}" if engine_load else ""))  # fmt: skip
    return out


def host_busy(host: dict | None) -> str | None:
    """'0.52 / 0.84': the host's busy share of its cores over a level, mean / max."""
    busy = (host or {}).get("busy") or {}
    return None if busy.get("mean") is None else f"{busy['mean']} / {busy['max']}"


def host_roles(host: dict | None) -> str | None:
    """'workers 5.6, callers 3.1, ...': each role's mean cores over a level, the busiest first."""
    roles = [(v["mean"], name) for name, v in ((host or {}).get("roles") or {}).items() if v.get("mean")]
    return ", ".join(f"{name} {cores}" for cores, name in sorted(roles, reverse=True)) or None


def shares(engine_load: dict | None) -> str | None:
    """'131 (0.51) / 125 (0.49), 2.3 % off even': streams each engine server started over a level, with its share."""
    if not engine_load:
        return None
    each = " / ".join(f"{e['started']:g} ({e['share']})" if e["started"] is not None else "None"
                      for e in engine_load["engines"])  # fmt: skip
    off = engine_load.get("off_even")
    return each + (f", {off * 100:.1f} % off even" if off is not None else "")


def gpu_memory(engine_load: dict | None) -> str | None:
    """'0: 31,204 / 1: 30,988': the most MiB each GPU had in use over a level."""
    mib = (engine_load or {}).get("gpu_mib_max") or {}
    return " / ".join(f"{g}: {v:,}" for g, v in mib.items()) or None


def waits(groups: dict | None) -> str | None:
    """'short 652 / 767 (26); medium 1924 / 1949 (6)': response P50 / P95 per turn-decision wait."""
    return "; ".join(f"{w} {g['p50']} / {g['p95']} ({g['n']})" for w, g in (groups or {}).items()) or None


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Many calls: {report['device']}, {report['date'][:10]}", "", f"`{report['command']}` "
             f"(stand-in: {report['config']['stand_in']}, {report['config']['caller_procs']} caller process(es), "
             f"arrivals over {report['config']['arrival_window_s']} s)", "",
             "| N | failed | unanswered | failed turns (worker) | response P50 / P95 / P99 (ms) | calls with a gap | "
             "gaps (max ms) | "
             "stalls (max ms) | concealed ms | barge-in -> silence P50 / P95 | caller late P99 / max (ms) | "
             "worker CPU cores (with its job processes) | loop lag P99 max (ms) | "
             "calls per worker, max (LiveKit's jobs) | "
             "host busy mean / max | host cores by role (mean) | response P50 / P95 by the worker's wait (n) |",
             "|" + "---|" * 17]  # fmt: skip
    for lv in report["levels"]:
        r, b, ws = lv["response_ms"], lv["barge_in_silence_ms"], lv["workers"]
        late = max((h["publish_late_ms"]["p99"] or 0 for h in lv["caller_processes"]), default=None)
        worst = max((h["publish_late_ms"]["max"] or 0 for h in lv["caller_processes"]), default=None)
        # each worker's process, plus its child processes (a PROCESS worker's calls) where its stats file has them
        cpus = [round(c + (w.get("cpu_children_cores_mean") or 0.0), 3) for w in ws
                if (c := (w.get("cpu_cores") or {}).get("mean")) is not None]  # fmt: skip
        lags = [v for w in ws if (v := (w.get("loop_lag_ms") or {}).get("p99_max")) is not None]
        cpu = " + ".join(str(c) for c in cpus) or None
        spread = " / ".join(f"{w.get('calls_max')} ({w.get('livekit_jobs_max')})" for w in ws) or None
        lines.append(f"| {lv['calls']} | {lv['failed_calls']} | {lv['unanswered_turns']}/{lv['turns']} | "
                     f"{lv.get('failed_turns')} | {r['p50']} / "
                     f"{r['p95']} / {r['p99']} | {lv['calls_with_gap']} | {lv['gaps']} ({lv['gap_ms_max']}) | "
                     f"{lv['stalls']} ({lv['stall_ms_max']}) | {lv['concealed_ms_total']} | {b['p50']} / {b['p95']} | "
                     f"{late} / {worst} | {cpu} | {max(lags, default=None)} | {spread} | "
                     f"{host_busy(lv.get('host'))} | {host_roles(lv.get('host'))} | "
                     f"{waits(lv.get('response_ms_by_wait'))} |")  # fmt: skip
    if any(lv.get("engines") for lv in report["levels"]):
        lines += ["", "| N | streams each engine server started (share) | open streams per engine, max | GPU memory "
                      "in use, max (MiB) |", "|---|---|---|---|"]  # fmt: skip
        for lv in report["levels"]:
            load = lv.get("engines") or {}
            opened = " / ".join(str(e["open_max"]) for e in load.get("engines") or []) or None
            lines.append(f"| {lv['calls']} | {shares(load)} | {opened} | {gpu_memory(load)} |")
    lines += ["", f"A gap: the agent silent for over {GAP_MS:g} ms inside a reply (its state `speaking`), at the "
              "caller; a stall: no received frame for that long; concealed: audio WebRTC made up for late or lost "
              "packets. Worker figures from its stats file (lab/convbench/worker_stats.py); none when the "
              "worker writes none. Host: every process's CPU each second, by role (convbench/host_cpu.py)."]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib  # heavy: only when a plot is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = report["levels"]
    ns = [lv["calls"] for lv in levels]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for q in ("p50", "p95", "p99"):
        a.plot(ns, [lv["response_ms"][q] for lv in levels], marker="o", label=q.upper())
    a.set(title="response at the caller", xlabel="concurrent calls", ylabel="ms")
    a.legend()
    b.plot(ns, [lv["calls_with_gap"] for lv in levels], marker="o", label="calls with a gap")
    b.plot(ns, [lv["failed_calls"] for lv in levels], marker="x", label="failed calls")
    b.set(title=f"gaps > {GAP_MS:g} ms inside replies", xlabel="concurrent calls", ylabel="calls")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def host_device() -> str:
    """The host: its CPU and cores (callbench's `device()` without its CPU-only note) and its GPUs, by nvidia-smi."""
    cpu = device().split(" (")[0]
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return f"{cpu}, no GPU"
    gpus = [g.strip() for g in gpus if g.strip()]
    return f"{cpu}, {len(gpus)} GPU(s): {'; '.join(gpus)}" if gpus else f"{cpu}, no GPU"


def rescore(out: Path, command: str) -> dict[str, Any]:
    """A report from what a run left in `out` (timelines/n<N>/, stack/traces, worker and host stats): the levels it
    recorded, each scored as `measure` does, its stats window from the level before to its last recorded call
    (file times). For a run cut short (scripts/gpu_many.sh) and for scoring old runs with a newer scorer."""
    levels, since = [], 0.0
    stats = [stats_file.read(p) for p in sorted((out / "stack").glob("worker_stats*.jsonl"))]  # one file a worker
    host_records = host_cpu.read(out / "stack" / "host_cpu.jsonl")
    engine_records = engines.read(out / "stack" / "engines.jsonl")
    traces = read_traces(out / "stack" / "traces")
    for d in sorted((out / "timelines").glob("n*"), key=lambda p: int(p.name[1:])):
        files = sorted(d.glob("*.json"))
        if not files:
            continue
        tls = [Timeline.from_json(json.loads(p.read_text())) for p in files]
        rows = [call_row(tl, DEFAULT_THRESHOLDS) for tl in tls]
        for tl, row in zip(tls, rows, strict=True):
            row.update(traced_turns(traces, tl.room, row["response_ends"]))
        written = max(p.stat().st_mtime for p in files)
        per_worker = [stats_file.summarize(records, since, written) for records in stats]
        host = host_cpu.summarize(host_records, since, written) if host_records else None
        engine_load = engines.summarize(engine_records, since, written) if engine_records else None
        since = written
        levels.append({**level_summary(len(tls), rows, [], per_worker, host, engine_load), "rows": rows,
                       "rescored": True})  # fmt: skip
    # the run's own device, versions and settings when it wrote a report (rescoring happens on another machine)
    prior = next((json.loads(p.read_text()) for p in (out / "many.json", out / "many_partial.json") if p.is_file()), {})
    return {
        "benchmark": "convbench.many", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command, "run_command": prior.get("command"), "run_date": prior.get("date"),
        "device": prior.get("device") or host_device(), "versions": prior.get("versions") or versions(),
        "config": prior.get("config") or {"stand_in": "production", "caller_procs": 0, "arrival_window_s": 0},
        "levels": levels,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.convbench.many", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", help="concurrent calls per level, e.g. 1,2,4,8")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rescore", action="store_true",
                        help="run nothing: score what a run left in --out (its timelines, traces, stats) into "
                             "OUT/many_rescored.json and .md (a run cut short; an old run, newer scorer)")  # fmt: skip
    parser.add_argument("--arrival-window", type=float, default=5.0, help="seconds over which a level's calls arrive")
    parser.add_argument("--caller-procs", type=int, default=1, help="caller processes (default 1)")
    parser.add_argument("--script", type=Path, help="the script each caller plays (default: the corpus's calls script)")
    parser.add_argument("--turns", type=int, help="play only the first N turns of the script")
    parser.add_argument("--stand-in", choices=("local", *STAND_INS), default="local",
                        help="local: the embedded defaults (whisper, llama.cpp); production: fake_openai with "
                             "production-like times")  # fmt: skip
    parser.add_argument("--tts-model", type=Path, help="TTS_DEEP_STREAM_MODEL_DIR for the worker (GPU host)")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes behind the one LiveKit server (default 1); each gets an even share "
                             "of the largest N as AGENT_MAX_SESSIONS")  # fmt: skip
    parser.add_argument("--engine-servers", action="store_true",
                        help="one engine process per GPU (or one on the host) shared by the workers over HTTP, "
                             "instead of an engine in each worker")  # fmt: skip
    parser.add_argument(
        "--gpus",
        type=int,
        default=0,
        help="spread the workers over this many GPUs (CUDA_VISIBLE_DEVICES round robin; 0: unset)",
    )
    args = parser.parse_args(argv)
    if args.rescore:
        if not (args.out / "timelines").is_dir():
            parser.error(f"--rescore: {args.out}/timelines is missing: not a many-calls run's folder")
        report = rescore(args.out, "python -m lab.convbench.many " + " ".join(sys.argv[1:]))
        (args.out / "many_rescored.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "many_rescored.md").write_text(markdown(report))
        print(markdown(report))
        return 0
    if not args.calls:
        parser.error("--calls is required (or --rescore)")
    try:
        levels = [int(x) for x in args.calls.split(",")]
    except ValueError:
        parser.error(f"--calls={args.calls!r} must be numbers separated by commas, e.g. 1,2,4")
    if not levels or min(levels) < 1 or max(levels) > 1024:
        parser.error(f"--calls={args.calls!r}: each level must be in 1..1024")
    if not 1 <= args.caller_procs <= 64:
        parser.error(f"--caller-procs={args.caller_procs} is out of range (allowed: 1..64)")
    if not 1 <= args.workers <= 64:
        parser.error(f"--workers={args.workers} is out of range (allowed: 1..64)")
    if not 0 <= args.gpus <= 64:
        parser.error(f"--gpus={args.gpus} is out of range (allowed: 0..64)")
    script_path = args.script or corpus.cached(("calls",)) / "calls" / "questions.json"
    load_script(script_path)  # a bad script stops here, before any stack starts
    stack_dir = args.out / "stack"
    servers: list[subprocess.Popen] = []
    engine_urls: list[str] = []
    envs: dict[str, dict[str, str]] = {}
    fake = None
    engine_sampler: engines.EngineSampler | None = None  # each engine server's streams, with --engine-servers
    began = time.monotonic()
    sampler = host_cpu.HostSampler(stack_dir / "host_cpu.jsonl").start()  # where the host's CPU goes, by role
    try:
        if args.engine_servers:  # before the stack: each loads its engine (minutes on a cold GPU host), all at once
            model = args.tts_model or ensure_random_checkpoint()  # the worker's own embedded default, on a CPU
            gpus = list(range(args.gpus)) or [None]
            with concurrent.futures.ThreadPoolExecutor(len(gpus)) as pool:
                logs = [stack_dir / "logs" / f"tts_server{g or 0}.log" for g in gpus]
                started = list(pool.map(lambda g, log: engine_server(g, model, log), gpus, logs))
            servers, engine_urls = [proc for proc, _ in started], [url for _, url in started]
            engine_sampler = engines.EngineSampler(engine_urls, stack_dir / "engines.jsonl").start()
        sessions = math.ceil(max(levels) / args.workers)
        envs = {("agent" if i == 0 else f"worker{i}"): worker_env(
            i, args.workers, args.gpus, stack_dir / f"worker_stats{'' if i == 0 else i}.jsonl", sessions, engine_urls)
            for i in range(args.workers)}  # fmt: skip
        env = {**STACK_ENV, "AGENT_LOAD_THRESHOLD": "1.0", **envs.pop("agent")}
        if args.stand_in != "local":
            fake, url = stand_in(args.stand_in, stack_dir / "logs" / "fake_openai.log")
            env.update(LLM_BASE_URL=url, STT_BASE_URL=url, LLM_MODEL="qwen3-omni")
        if args.tts_model and not engine_urls:
            env["TTS_DEEP_STREAM_MODEL_DIR"] = str(args.tts_model)
        stack = LocalStack(stack_dir, **env)
        try:
            stack.start()
            workers = [Worker("agent", stack.ports["AGENT_HTTP_PORT"], Path(env["AGENT_STATS_PATH"]))]
            workers += start_extra_workers(stack, envs)
            levels_out = measure(stack, levels, script_path, window_s=args.arrival_window, procs=args.caller_procs,
                                 turns=args.turns, workers=workers, keep=args.out / "timelines",
                                 host_path=sampler.path,
                                 engines_path=engine_sampler.path if engine_sampler else None)  # fmt: skip
        finally:
            stack.stop()
    finally:
        sampler.stop()
        if engine_sampler is not None:
            engine_sampler.stop()
        for proc in [*servers, *([fake] if fake is not None else [])]:
            proc.terminate()
            proc.wait(30)
    report = {
        "benchmark": "convbench.many", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m lab.convbench.many " + " ".join(sys.argv[1:]), "device": host_device(),
        "versions": versions(), "duration_s": round(time.monotonic() - began, 1),
        "config": {"stand_in": args.stand_in, **({"stand_in_times": STAND_INS[args.stand_in]} if fake else {}),
                   "caller_procs": args.caller_procs, "arrival_window_s": args.arrival_window,
                   "workers": args.workers, "gpus": args.gpus, "engine_servers": engine_urls, "extra_worker_env": envs,
                   "script": str(script_path), "turns": args.turns, "stack_env": env, "gap_ms": GAP_MS},
        "levels": levels_out,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "many.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "many.md").write_text(markdown(report))
    plot(report, args.out / "many.png")
    print(markdown(report))
    return 0 if all(lv["failed_calls"] == 0 for lv in levels_out) else 1


if __name__ == "__main__":
    sys.exit(main())
