"""Callers coming and going in one named room, on LiveKit's own server with the real worker (agent/callers.py).
The agent hears the caller who joined last at once, while an older connection is still in the room (a person
rejoining after their tab died: the server drops the old connection only ~20 s later). When that caller
leaves it goes back to the one still there. When the last one leaves it waits in the room, so a person who
presses Leave and Join again is heard (LiveKit dispatches an agent only when it creates a room, and the left
room lives on for its departure timeout). The job ends when LiveKit closes the empty room. Before (checked at
5c26028), the agent stayed linked to the first caller, and a Join 1 s after a Leave found an agent whose session
LiveKit had closed on the Leave: a silent call both times."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest

from lab.callbench.rtc_caller import RtcCaller, worker_jobs
from lab.callbench.stack import LocalStack

pytestmark = pytest.mark.call


def transcribed(caller: RtcCaller) -> int:
    """How many of this caller's utterances the agent transcribed (it publishes them under the caller's name)."""
    return sum(who == caller.room.local_participant.identity for who, _ in caller.transcripts)


async def heard(caller: RtcCaller, after: int = 0, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while transcribed(caller) <= after:
        assert time.monotonic() < deadline, f"the agent never heard {caller.room.local_participant.identity}"
        await asyncio.sleep(0.25)


async def test_the_newest_caller_is_heard_and_a_rejoin_after_leave_finds_the_agent(
    stack: LocalStack, question_wav: Path
) -> None:
    room = f"callers-{secrets.token_hex(3)}"
    callers: list[RtcCaller] = []

    async def join() -> RtcCaller:
        callers.append(await RtcCaller.join(stack.page_url, room, question_wav))
        return callers[-1]

    async def leave(caller: RtcCaller) -> None:
        callers.remove(caller)
        await caller.aclose()

    try:
        first = await join()
        await asyncio.wait_for(first.agent_joined.wait(), 60)
        await heard(first)
        second = await join()  # the first one's connection stays in the room
        await heard(second)  # the agent listens to the newcomer now
        before = transcribed(first)
        await leave(second)
        await heard(first, before)  # and back to the caller still there
        await leave(first)  # Leave ...
        await asyncio.sleep(1.0)
        third = await join()  # ... and Join the same room before LiveKit closes it
        await heard(third)
        await leave(third)
        deadline = time.monotonic() + 30
        while worker_jobs(stack.ports["AGENT_HTTP_PORT"]) > 0:  # LiveKit closes the room: the job ends
            assert time.monotonic() < deadline, "the job outlived its room"
            await asyncio.sleep(0.25)
    finally:
        for caller in callers:
            await caller.aclose()
