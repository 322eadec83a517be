"""Callers coming and going in one room, on LiveKit's own server with the real worker (agent/callers.py): the
agent hears the caller who joined last, at once, while an older connection is still in the room (a person
rejoining a named room after their tab died, whose old connection the server drops only ~20 s later), goes
back to the caller still there when that one leaves, and ends the call when the last caller leaves. Before,
the agent stayed linked to the first caller and the newcomer sat in a silent call."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest

from agent.tools.callbench.rtc_caller import RtcCaller, worker_jobs
from agent.tools.callbench.stack import LocalStack

pytestmark = pytest.mark.call


async def heard(caller: RtcCaller, after: int, timeout: float = 45.0) -> None:
    """Wait until the agent published a transcript of this caller's words beyond the first `after`."""
    me = caller.room.local_participant.identity
    deadline = time.monotonic() + timeout
    while sum(who == me for who, _ in caller.transcripts) <= after:
        assert time.monotonic() < deadline, f"no transcript of {me}'s words: {caller.transcripts}"
        await asyncio.sleep(0.25)


def transcribed(caller: RtcCaller) -> int:
    return sum(who == caller.room.local_participant.identity for who, _ in caller.transcripts)


async def test_the_newest_caller_is_heard_and_the_last_one_leaving_ends_the_call(
    stack: LocalStack, question_wav: Path
) -> None:
    room = f"callers-{secrets.token_hex(3)}"
    first: RtcCaller | None = await RtcCaller.join(stack.page_url, room, question_wav)
    second: RtcCaller | None = None
    assert first is not None
    try:
        await asyncio.wait_for(first.agent_joined.wait(), 60)
        await heard(first, 0)
        second = await RtcCaller.join(stack.page_url, room, question_wav)  # the first one's connection stays
        await heard(second, 0)  # the agent listens to the newcomer now
        before = transcribed(first)
        await second.aclose()
        second = None
        await heard(first, before)  # and back to the caller still in the room
        last, first = first, None
        await last.aclose()
        deadline = time.monotonic() + 20
        while worker_jobs(stack.ports["AGENT_HTTP_PORT"]) > 0:  # the job ends with its last caller
            assert time.monotonic() < deadline, "the call did not end when its last caller left"
            await asyncio.sleep(0.25)
    finally:
        for caller in (first, second):
            if caller is not None:
                await caller.aclose()
