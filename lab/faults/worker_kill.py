"""A worker killed (SIGKILL) in the middle of the agent's reply: how long until the caller hears an agent again.

One try: an SDK caller (lab/faults/caller.py) asks its question into a new room; once the agent's reply
has been heard for half a second, the worker process that runs the call is killed with SIGKILL (its supervisor,
scripts/run_worker.sh, sees it and runs the recovery). Measured from the kill, on one monotonic clock:
- `left_ms`: the caller sees the dead agent leave (the recovery removed it; LiveKit alone takes ~21 s);
- `joined_ms`: a new agent joins (the token server's agent guard dispatched it);
- `heard_ms`: the caller hears the new agent (it says one sentence first): the target;
- `trace`: the killed turn's record in the traces has outcome `worker_lost`;
- `answered_after`: the conversation goes on: the new agent transcribes the caller's next question.
`workers=2`: a second supervised worker runs, so a worker is always there; `workers=1`: the killed worker's
supervisor restarts it and the guard's retries dispatch the room again once it has registered.
Between tries the killed worker is restarted and registered again, so every try starts with all workers up.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from lab.callbench.stack import LocalStack, wait_for_line
from lab.faults.caller import FaultCaller
from lab.faults.report import markdown, measured, p50, top, verdict

EXTRA = "worker_b"


def job_ids(log: Path) -> set[str]:
    return set(re.findall(r'"received job request".*?"job_id": "(AJ_\w+)"', log.read_text(errors="replace")))


def host_of(stack: LocalStack, agent_identity: str, names: list[str]) -> str:
    for name in names:
        if any(agent_identity == f"agent-{j}" for j in job_ids(stack.log(name))):
            return name
    raise RuntimeError(f"no worker log has the job of {agent_identity}")


def rss_mb(pid: int) -> float | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        kb = next(int(ln.split()[1]) for ln in lines if ln.startswith("VmRSS"))
    except (OSError, StopIteration):
        return None
    return round(kb / 1024.0, 1)


def standby_pids() -> list[int]:
    """Processes of this machine running `python -m agent standby` (scripts/run_worker.sh's standby workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_text(errors="replace").split("\0")
            except OSError:
                continue
            if argv[1:4] == ["-m", "agent", "standby"]:
                found.append(int(entry.name))
    return found


def memory(stack: LocalStack, names: list[str]) -> dict[str, float | None]:
    """RSS of each worker and of the idle standby processes (what the standby costs)."""
    out: dict[str, float | None] = {name: rss_mb(stack.worker_pid(name)) for name in names}
    waiting = [p for p in standby_pids() if p not in {stack.worker_pid(n) for n in names}]
    out["standby"] = rss_mb(waiting[0]) if waiting else None
    return out


def transcribed(caller: FaultCaller) -> int:
    return sum(who == caller.room.local_participant.identity for who, _ in caller.transcripts)


async def wait_trace(stack: LocalStack, room: str, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lost = [r for r in stack.traces() if r["session_id"].startswith(f"{room}-") and r["outcome"] == "worker_lost"]
        if lost:
            return lost[0]
        await asyncio.sleep(0.25)
    return None


async def kill_try(
    stack: LocalStack, wav: Path, names: list[str], *, index: int, timeout_s: float = 60.0, converse: bool = True
) -> dict[str, Any]:
    room = f"kill-{index}-{secrets.token_hex(3)}"
    caller = await FaultCaller.join(stack.page_url, room, wav)
    result: dict[str, Any] = {"try": index, "room": room}
    try:
        await asyncio.wait_for(caller.agent_joined.wait(), 60)
        old = await caller.wait_speaking(90)
        victim = host_of(stack, old, names)
        pid = stack.worker_pid(victim)
        registered = stack.log(victim).read_text(errors="replace").count("registered worker")
        ready_before = stack.log(victim).read_text(errors="replace").count("standby: ready")
        before = transcribed(caller)
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        result.update(worker=victim, pid=pid)
        deadline = t_kill + timeout_s
        while caller.heard_after(t_kill, exclude=old) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = caller.agents[old].left
        joined = [a.joined for who, a in caller.agents.items() if who != old and a.joined >= t_kill]
        heard = caller.heard_after(t_kill, exclude=old)
        ms = lambda t: None if t is None else round((t - t_kill) * 1000.0)  # noqa: E731 - a one-line conversion
        result.update(left_ms=ms(left), joined_ms=ms(min(joined) if joined else None), heard_ms=ms(heard))
        record = await wait_trace(stack, room, 15.0)
        result["trace"] = None if record is None else {
            "turn_id": record["turn_id"], "outcome": record["outcome"], "points": sorted(record["points"]),
            "errors": record["errors"],
        }  # fmt: skip
        if converse and heard is not None:  # the WAV asks again within its 12 s of silence; the new agent hears it
            deadline = time.monotonic() + 45
            while transcribed(caller) <= before and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
            result["answered_after"] = transcribed(caller) > before
        result["events"] = [(round((t - t_kill) * 1000.0), what) for t, what in caller.events]
    finally:
        await caller.aclose()
    # the supervisor restarts the killed worker (its standby takes over) and starts a new standby; the next try
    # starts with every worker registered again and its standby ready
    log = stack.log(victim)
    await asyncio.to_thread(wait_for_line, log, "registered worker", 180, count=registered + 1)
    if ready_before:
        await asyncio.to_thread(wait_for_line, log, "standby: ready", 120, count=ready_before + 1)
    return result


async def run(stack: LocalStack, wav: Path, *, workers: int, tries: int, target_s: float, **kw: Any) -> dict[str, Any]:
    names = ["agent"]
    if workers == 2:
        await asyncio.to_thread(stack.start_worker, EXTRA, supervised=True)
        names.append(EXTRA)
    results = []
    for name in names:  # each supervisor keeps a standby once its worker registered: every try starts with one
        await asyncio.to_thread(wait_for_line, stack.log(name), "standby: ready", 120)
    memory_mb = memory(stack, names)
    for i in range(1, tries + 1):
        results.append(await kill_try(stack, wav, names, index=i, **kw))
        r = results[-1]
        r["ok"] = r["heard_ms"] is not None and r["heard_ms"] <= target_s * 1000 and r["trace"] is not None and \
            r.get("answered_after", True)  # fmt: skip
        print(f"[faults] worker-kill try {i}/{tries} ({workers} worker(s)): killed {r['worker']}; left "
              f"{r['left_ms']} ms, new agent {r['joined_ms']} ms, heard {r['heard_ms']} ms; trace "
              f"{'worker_lost' if r['trace'] else 'MISSING'}; {'ok' if r['ok'] else 'FAIL'}", flush=True)  # fmt: skip
    return {"workers": workers, "tries": tries, "target_ms": target_s * 1000, "results": results,
            "passed": sum(r["ok"] for r in results), "rss_mb": memory_mb, "summary": summary(results)}  # fmt: skip


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    heard = measured(rows, "heard_ms")
    return {"heard_p50_ms": p50(heard), "heard_p95_ms": p50(heard, 95), "heard_max_ms": top(heard)}


def table(report: dict[str, Any]) -> str:
    s = report["summary"]
    return markdown(
        f"Worker killed (SIGKILL) mid-reply, {report['workers']} worker(s); target: heard again within "
        f"{report['target_ms'] / 1000:g} s. {report['passed']}/{report['tries']} passed.",
        ["try", "killed", "dead agent gone (ms)", "new agent joined (ms)", "new agent heard (ms)", "trace",
         "conversation goes on", "ok"],
        ([r["try"], r["worker"], r["left_ms"], r["joined_ms"], r["heard_ms"],
          (r["trace"] or {}).get("outcome", "MISSING"), r.get("answered_after", "-"), verdict(r)]
         for r in report["results"]),
        f"heard again: P50 {s['heard_p50_ms']} ms, P95 {s['heard_p95_ms']} ms, max {s['heard_max_ms']} ms")
