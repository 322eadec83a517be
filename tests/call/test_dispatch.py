"""Scale-out: two workers on one LiveKit server. LiveKit's own dispatch spreads calls by the load each worker
reports (AGENT_MAX_SESSIONS=2 here, so a worker with two calls is full); stopping a worker mid-call ends its
calls cleanly and new calls go to the worker that is left. Callers are the LiveKit Python SDK publishing a
WAV as a microphone (lab/callbench/rtc_caller.py)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from lab.callbench.rtc_caller import RtcCaller, wait_for_jobs
from lab.callbench.stack import LocalStack, wait_for_line

pytestmark = pytest.mark.call



def job_ids(log: Path) -> set[str]:
    return set(re.findall(r'"received job request".*?"job_id": "(AJ_\w+)"', log.read_text(errors="replace")))



async def test_calls_spread_by_load_and_survive_a_stopped_worker(
    stack: LocalStack, question_wav: Path, silent_wav: Path
) -> None:
    port_a = stack.ports["AGENT_HTTP_PORT"]
    await wait_for_jobs(port_a, 0)  # calls of earlier tests have ended
    worker_b = await asyncio.to_thread(stack.start_worker, "worker_b", AGENT_DRAIN_TIMEOUT_S="2")
    port_b = worker_b.health_port
    callers: list[RtcCaller] = []
    try:
        for i in range(4):
            caller = await RtcCaller.join(stack.page_url, f"dispatch-{i}", silent_wav)
            callers.append(caller)
            await asyncio.wait_for(caller.agent_joined.wait(), 60)
            await asyncio.sleep(1.0)  # the new job shows in the worker's load before the next call
        # LiveKit's dispatch filled both workers: two calls each (a worker with two is full at this setting)
        await wait_for_jobs(port_a, 2, 20)
        await wait_for_jobs(port_b, 2, 20)
        on_b = [c for c in callers if any(c.agent_identity.endswith(j) for j in job_ids(stack.log("worker_b")))]
        on_a = [c for c in callers if c not in on_b]
        assert len(on_b) == 2 and len(on_a) == 2, [c.agent_identity for c in callers]
        # every call is live: each agent publishes its voice track and listens
        for caller in callers:
            await asyncio.wait_for(caller.agent_track.wait(), 30)
        deadline = time.monotonic() + 30
        while any(c.agent_state != "listening" for c in callers) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert all(c.agent_state == "listening" for c in callers), [c.agent_state for c in callers]

        # stop worker B mid-call: its agents leave their rooms, it exits cleanly, worker A's calls go on
        code = await asyncio.to_thread(stack.stop_worker, "worker_b", 30)
        assert code == 0, f"worker_b exited with {code}"
        for caller in on_b:
            await asyncio.wait_for(caller.agent_left.wait(), 15)
        log_b = stack.log("worker_b").read_text(errors="replace")
        assert "Traceback" not in log_b, log_b[-3000:]
        assert not any(c.agent_left.is_set() for c in on_a)
        # their callers hang up: else the token server's agent guard would put an agent back in their rooms as soon
        # as worker A has room, racing the newcomer below for it (tests/call/test_worker_loss.py tests that guard)
        for caller in on_b:
            await caller.aclose()
            callers.remove(caller)

        # a new call after one of A's ends: only worker A is left, and it answers (heard by the caller).
        # LiveKit does not queue a call that arrives while every worker is full (docs/operations.md), so the
        # newcomer comes once worker A has told the server it has room again (its log says so)
        available = "marking as available"
        seen = stack.log("agent").read_text(errors="replace").count(available)
        await on_a[0].aclose()
        callers.remove(on_a[0])
        await wait_for_jobs(port_a, 1, 60)
        await asyncio.to_thread(wait_for_line, stack.log("agent"), available, 30, count=seen + 1)
        await asyncio.sleep(0.5)
        newcomer = await RtcCaller.join(stack.page_url, "dispatch-after-stop", question_wav)
        callers.append(newcomer)
        await asyncio.wait_for(newcomer.agent_joined.wait(), 60)
        await wait_for_jobs(port_a, 2, 20)
        assert any(newcomer.agent_identity.endswith(j) for j in job_ids(stack.log("agent")))
        deadline = time.monotonic() + 60
        while newcomer.agent_peak <= 0.01 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert newcomer.agent_peak > 0.01, "the newcomer's agent never spoke"
    finally:
        for caller in callers:
            await caller.aclose()
        stack.stop_worker("worker_b")
