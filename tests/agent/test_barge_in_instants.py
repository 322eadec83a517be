"""Barge-in at precise instants of a reply, on the real call (AgentSession + DuplexController): the
0 ms window (issue 17: `interrupt()` in the `speech_created` handler or on the next loop tick left the
controller in THINKING with an open reply and traced the turn as "error" with no error), every milestone
of a reply at 0..2 loop ticks, by the public API and by VAD. Each case must end idle, in agreement with
LiveKit's agent state, with a truthful trace (tests/agent/duplex_schedule.py checks the invariants)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent.fake_openai import FakeOpenAIServer
from tests.agent.duplex_harness import EnergyVAD, ScriptedBackend
from tests.agent.duplex_schedule import MILESTONES, Cut, ScheduleRunner, TurnPlan


@pytest.fixture
async def runner() -> AsyncIterator[ScheduleRunner]:
    async with FakeOpenAIServer() as server:
        yield ScheduleRunner(server, ScriptedBackend(), EnergyVAD())


@pytest.mark.parametrize("ticks", [0, 1, 2])
async def test_interrupt_when_the_speech_is_created(runner: ScheduleRunner, ticks: int) -> None:
    out = await runner.run([TurnPlan(cut=Cut("api", "speech_created", ticks=ticks)), TurnPlan()])
    assert out.violations == []
    assert [kind for _, kind, _ in out.fired] == ["api"]
    first, second = out.traces
    assert first["outcome"] == "interrupted" and first["errors"] == []
    assert first["interruptions"][0]["frames_published"] == 0
    assert second["outcome"] == "answered"


@pytest.mark.parametrize("milestone", MILESTONES)
@pytest.mark.parametrize("kind", ["api", "vad"])
async def test_interrupt_at_each_milestone(runner: ScheduleRunner, milestone: str, kind: str) -> None:
    out = await runner.run([TurnPlan(words=8, cut=Cut(kind, milestone)), TurnPlan()])
    assert out.violations == []
    assert out.fired, "the cut never fired"
    assert out.traces[0]["outcome"] == "interrupted"
    assert out.traces[-1]["outcome"] == "answered"
