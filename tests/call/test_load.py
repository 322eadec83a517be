"""Load that tells LiveKit the truth, through the real LiveKit server: two workers on one host, each full at two calls
(AGENT_MAX_SESSIONS=2, tests/call/conftest.py). Calls arriving in quick succession fill one worker and go on to the
other; none ever lands on a full worker (each worker's own job log and its stats file say how many it held); a call
beyond both gets no agent; a call that ends frees its slot for the next. Callers are the LiveKit Python SDK."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from lab.callbench.rtc_caller import RtcCaller, wait_for_jobs
from lab.callbench.stack import LocalStack

pytestmark = pytest.mark.call

CAPACITY = 2  # tests/call/conftest.py STACK_ENV: AGENT_MAX_SESSIONS


def accepted(log: Path) -> list[str]:
    """Jobs a worker accepted, in order (LiveKit logs "received job request" only once the worker is available)."""
    return re.findall(r'"received job request".*?"job_id": "(AJ_\w+)"', log.read_text(errors="replace"))




async def test_calls_beyond_one_worker_go_to_the_other_and_never_to_a_full_one(
    stack: LocalStack, silent_wav: Path, tmp_path: Path
) -> None:
    port_a = stack.ports["AGENT_HTTP_PORT"]
    await wait_for_jobs(port_a, 0)  # calls of earlier tests have ended
    stats_b = tmp_path / "worker_b_stats.jsonl"
    worker_b = await asyncio.to_thread(stack.start_worker, "load_b", AGENT_STATS_PATH=str(stats_b))
    port_b = worker_b.health_port
    logs = {"a": stack.log("agent"), "b": stack.log("load_b")}
    before = {name: set(accepted(log)) for name, log in logs.items()}
    callers: list[RtcCaller] = []
    try:
        # four calls in quick succession: each arrives while the last one's agent is still being set up
        for i in range(2 * CAPACITY):
            callers.append(await RtcCaller.join(stack.page_url, f"load-{i}", silent_wav))
            await asyncio.sleep(0.3)
        await asyncio.gather(*(asyncio.wait_for(c.agent_joined.wait(), 60) for c in callers))
        await wait_for_jobs(port_a, CAPACITY, 20)
        await wait_for_jobs(port_b, CAPACITY, 20)
        taken = {name: [j for j in accepted(log) if j not in before[name]] for name, log in logs.items()}
        assert [len(taken["a"]), len(taken["b"])] == [CAPACITY, CAPACITY], taken
        for caller in callers:  # each agent is the job of the worker that accepted it
            assert any(caller.agent_identity.endswith(job) for job in taken["a"] + taken["b"]), caller.agent_identity

        # both full: a fifth call gets no agent (LiveKit does not queue it), and neither worker took it
        extra = await RtcCaller.join(stack.page_url, "load-extra", silent_wav)
        callers.append(extra)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(extra.agent_joined.wait(), 10)
        assert [len(accepted(logs[n])) - len(before[n]) for n in ("a", "b")] == [CAPACITY, CAPACITY]
        server_log = stack.log("livekit").read_text(errors="replace").splitlines()
        refused = [line for line in server_log if "load-extra" in line]
        assert any("no worker" in line for line in refused), refused  # marked full, or asked and declined
        # the extra caller leaves: the token server's agent guard keeps dispatching a room that has no agent
        # (docs/operations.md "Faults"), so it would take B's freed place before the next caller does
        await extra.aclose()
        callers.remove(extra)

        # a call on B ends: once LiveKit has closed its room, B is below capacity and takes the next call
        on_b = next(c for c in callers[:-1] if any(c.agent_identity.endswith(j) for j in taken["b"]))
        await on_b.aclose()
        callers.remove(on_b)
        await wait_for_jobs(port_b, CAPACITY - 1, 60)
        await asyncio.sleep(3.0)  # B's next status report (every 2.5 s) marks it available again
        newcomer = await RtcCaller.join(stack.page_url, "load-after", silent_wav)
        callers.append(newcomer)
        await asyncio.wait_for(newcomer.agent_joined.wait(), 30)
        assert any(newcomer.agent_identity.endswith(j) for j in accepted(logs["b"]))
        await wait_for_jobs(port_b, CAPACITY, 20)
    finally:
        for caller in callers:
            await caller.aclose()
        stack.stop_worker("load_b")

    # B's stats file: one line a second, its calls never above capacity, its load full exactly while it held two
    rows = [json.loads(line) for line in stats_b.read_text().splitlines() if line.strip()]
    assert len(rows) >= 10, len(rows)
    assert max(r["calls"] for r in rows) == CAPACITY
    full = [r for r in rows if r["load_terms"].get("calls") == 1.0]
    assert full and all(r["load"] >= 0.9 for r in full)
    assert all(r["load_terms"]["calls"] <= 1.0 for r in rows if r["load_terms"])
    assert max(r["loop_lag_ms"]["loops"] for r in rows) == CAPACITY + 1  # a probe per call's loop, and the worker's
    assert "worker is at full capacity, marking as unavailable" in logs["b"].read_text(errors="replace")

