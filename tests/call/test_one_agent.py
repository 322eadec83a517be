"""One agent per room, on the real stack: LiveKit's server, the token server with its agent guard, and the real
worker whose agent joins 5 s after it took the job (tests/call/slow_agent.py), as on a loaded host. The guard's
grace time (3 s) runs out first and it dispatches the room again; LiveKit's dispatch API shows no job until an
agent is in the room, so it dispatches once more. Before agent/one_agent.py every job taken became an agent in the
caller's room (a minimal agent joining 4 s late: four of them, measured once); now the first to join keeps the
call and each later one leaves at once."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from livekit import api

from lab.callbench.rtc_caller import RtcCaller
from lab.callbench.stack import ROOT, LocalStack, free_port, wait_for_line

pytestmark = pytest.mark.call

JOIN_DELAY_S = 5.0  # past the guard's default grace time (AGENT_JOIN_GRACE_S, 3 s)


async def agents_in(lk: api.LiveKitAPI, room: str) -> list[str]:
    listed = await lk.room.list_participants(api.ListParticipantsRequest(room=room))
    here = [p for p in listed.participants if p.state != api.ParticipantInfo.State.DISCONNECTED]
    return [p.identity for p in here if p.kind == api.ParticipantInfo.Kind.AGENT]


async def test_a_room_dispatched_again_while_its_agent_joins_late_keeps_one_agent(
    stack: LocalStack, question_wav: Path
) -> None:
    stopped = await asyncio.to_thread(stack._start_all, "stop", "agent")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    log = stack.workdir / "logs" / "slow_agent.log"
    env = {**stack.env, "AGENT_HTTP_PORT": str(free_port()), "SLOW_AGENT_DELAY_S": str(JOIN_DELAY_S)}
    command = [sys.executable, "-m", "livekit.agents", "start", "tests/call/slow_agent.py", "--log-format", "json"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    lk = api.LiveKitAPI(stack.livekit_url.replace("ws://", "http://"), stack.env["LIVEKIT_API_KEY"],
                        stack.env["LIVEKIT_API_SECRET"])  # fmt: skip
    caller = None
    try:
        await asyncio.to_thread(wait_for_line, log, "registered worker", 180, proc=proc)
        caller = await RtcCaller.join(stack.page_url, "twice", question_wav)
        await asyncio.wait_for(caller.agent_joined.wait(), 60)
        guard_log = stack.log("token")
        # the guard stops once an agent is in; every job it dispatched before that joins within the delay
        await asyncio.to_thread(wait_for_line, guard_log, "room twice: agent back after", 30)
        assert "room twice: a caller waits with no agent; dispatched" in guard_log.read_text(errors="replace")
        await asyncio.sleep(1.0)  # a dispatch sent just before is taken (or refused: the worker is full at 2)
        jobs_taken = log.read_text(errors="replace").count("slow agent took job AJ_")
        assert jobs_taken >= 2, "no second job reached the worker: the test saw no second agent to turn away"
        try:  # each later job's agent joins JOIN_DELAY_S after it was taken, sees the first one, and leaves
            await asyncio.to_thread(wait_for_line, log, "holds its call; job", 30, count=jobs_taken - 1)
        except TimeoutError:
            agents = await agents_in(lk, "twice")
            pytest.fail(f"{jobs_taken} jobs taken and not every later one left: {len(agents)} agents in the "
                        f"caller's room: {agents}")  # fmt: skip
        deadline = time.monotonic() + 10.0  # a job that has shut down is gone from LiveKit's list a moment later
        while await agents_in(lk, "twice") != [caller.agent_identity] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # the first agent stays, alone
            agents = await agents_in(lk, "twice")
            assert agents == [caller.agent_identity], f"{len(agents)} agents in the caller's room: {agents}"
            await asyncio.sleep(0.5)
        leaving = re.findall(r"room twice: agent (\S+) holds its call; job (AJ_\w+) leaves",
                             log.read_text(errors="replace"))  # fmt: skip
        assert {first for first, _ in leaving} == {caller.agent_identity}, leaving
        assert len({job for _, job in leaving}) == jobs_taken - 1, leaving
        deadline = time.monotonic() + 60
        while caller.agent_peak <= 0.01 and time.monotonic() < deadline:  # the one agent answers the question
            await asyncio.sleep(0.25)
        assert caller.agent_peak > 0.01, "the agent that kept the room never spoke"
    finally:
        if caller is not None:
            await caller.aclose()
        await lk.aclose()
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
        await asyncio.to_thread(stack.start, services=("agent",))
