"""Callers coming and going in one named room, on LiveKit's own server with the real worker (agent/callers.py).
The agent keeps talking with the first caller while a second person in the room waits (nothing is heard or
published under the second's name meanwhile); when the first leaves, the second is heard. When the last caller
leaves, the job ends within about a second (its call slot is free), and a Join into the same room afterwards
gets an agent again (the token server's agent guard dispatches one). Before issue 43 the newest caller took
the agent over mid-question, and the job lived on until LiveKit closed the room."""

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


async def test_the_agent_keeps_its_caller_and_ends_soon_after_the_last_one_leaves(
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
        second = await join()  # another person in the same room, mid-call: both keep talking (looped WAVs)
        await heard(first, transcribed(first))  # the agent goes on with the first
        assert transcribed(second) == 0  # nothing heard, nor published, under the second's name
        await leave(first)
        await heard(second)  # the one who waited is heard now
        left_at = time.monotonic()
        await leave(second)
        while worker_jobs(stack.ports["AGENT_HTTP_PORT"]) > 0:  # the job ends about a second after its caller
            assert time.monotonic() - left_at < 5.0, "the job outlived its last caller by 5 s"
            await asyncio.sleep(0.1)
        print(f"the job ended {time.monotonic() - left_at:.2f} s after its last caller left")
        third = await join()  # a Join into the same room afterwards: the agent guard dispatches an agent
        await heard(third, timeout=60.0)
    finally:
        for caller in callers:
            await caller.aclose()
