"""Barge-in at precise instants of a reply, on the real call (AgentSession + DuplexController): the
0 ms window (issue 17: `interrupt()` in the `speech_created` handler or on the next loop tick left the
controller in THINKING with an open reply and traced the turn as "error" with no error), every milestone
of a reply at 0..2 loop ticks, by the public API and by VAD, under both turn handlings. Each case must end idle,
in agreement with LiveKit's agent state, with a truthful trace (tests/agent/duplex_schedule.py checks the
invariants).

With TURN_HANDLING=ours the answer is prepared on the transcript before the turn is committed: a cut that lands
then only throws that early answer away (the framework's `interrupt()` drops its preemptive generation) and the
committed turn is answered afresh, so the trace must say "discarded" and "answered"; a cut after the commit is an
interruption, as under `vad`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lab.fake_openai import FakeOpenAIServer
from tests.agent.duplex_harness import EnergyVAD, ScriptedBackend
from tests.agent.duplex_schedule import MILESTONES, Cut, ScheduleRunner, TurnPlan


@pytest.fixture(params=["vad", "ours"])
async def runner(request: pytest.FixtureRequest) -> AsyncIterator[ScheduleRunner]:
    async with FakeOpenAIServer() as server:
        yield ScheduleRunner(server, ScriptedBackend(), EnergyVAD(), turn_handling=request.param)


def cut_truthfully(first: dict) -> None:
    """The first turn's record tells what the cut did: an interruption; or, under `ours`, nothing heard was cut
    because the cut landed on an answer prepared before the commit (thrown away: `discarded`, and the turn answered
    afresh) or, for the next utterance, the answer had played out before that utterance's words were judged."""
    if first["outcome"] == "interrupted":
        assert first["interruptions"] and first["errors"] == []
    else:
        assert first["outcome"] == "answered" and not first["interruptions"], first


@pytest.mark.parametrize("ticks", [0, 1, 2])
async def test_interrupt_when_the_speech_is_created(runner: ScheduleRunner, ticks: int) -> None:
    out = await runner.run([TurnPlan(cut=Cut("api", "speech_created", ticks=ticks)), TurnPlan()])
    assert out.violations == []
    assert [kind for _, kind, _ in out.fired] == ["api"]
    first, second = out.traces
    if runner.turn_handling == "vad":
        assert first["outcome"] == "interrupted" and first["errors"] == []
        assert first["interruptions"][0]["frames_published"] == 0
        assert first["interruptions"][0]["source"] == "api"  # the framework's reason, not a guess
    else:
        cut_truthfully(first)
    assert second["outcome"] == "answered"


@pytest.mark.parametrize("milestone", MILESTONES)
@pytest.mark.parametrize("kind", ["api", "vad"])
async def test_interrupt_at_each_milestone(runner: ScheduleRunner, milestone: str, kind: str) -> None:
    out = await runner.run([TurnPlan(words=8, cut=Cut(kind, milestone)), TurnPlan()])
    assert out.violations == []
    assert out.fired, "the cut never fired"
    if runner.turn_handling == "vad":
        assert out.traces[0]["outcome"] == "interrupted"
    else:
        cut_truthfully(out.traces[0])
    assert out.traces[-1]["outcome"] == "answered"


async def test_utterance_transcribed_to_nothing_returns_to_listening(runner: ScheduleRunner) -> None:
    """The framework drops an empty final transcript: the controller used to stay THINKING (LiveKit:
    listening) until the next user turn."""
    out = await runner.run([TurnPlan(stt_fault="empty"), TurnPlan(words=0), TurnPlan()])
    assert out.violations == []
    assert [t["outcome"] for t in out.traces] == ["no_transcript", "error", "answered"]
    assert out.traces[1]["errors"] == ["reply: the speech ended without audio"]  # an empty LLM answer


async def test_user_speaks_again_as_the_reply_starts(runner: ScheduleRunner) -> None:
    """The next utterance starts one tick after the reply's speech is created: the earlier turn used to be
    written as "error" with no error while its reply was still in flight."""
    out = await runner.run([TurnPlan(words=7), TurnPlan(speech_s=0.16, words=3, cut=Cut("vad", "speech_created",
                                                                                         ticks=1)), TurnPlan()])
    assert out.violations == []
    assert all(t["outcome"] != "error" for t in out.traces), out.traces


async def test_frame_in_flight_at_the_cut_is_not_stale(runner: ScheduleRunner) -> None:
    """A frame whose capture started before the cut and ended after it is purged from the queue, never
    published: the controller used to count it as a stale frame after cancel."""
    for ticks in range(4):
        out = await runner.run([TurnPlan(words=6), TurnPlan(words=6, cut=Cut("vad", "tts_packet", nth=3,
                                                                             ticks=ticks))])
        assert out.violations == []


async def test_user_turn_ending_while_the_call_closes_is_traced(runner: ScheduleRunner) -> None:
    """Found by the long property run (a close cut, flaky there): a user turn that ends while the session
    is closing opened a trace that nobody finished (3 turns opened, 2 traced)."""
    from agent.voice import Call
    from tests.agent.duplex_harness import FastSource, ScriptedMic, fast_config

    call = Call(fast_config(runner.server.base_url), vad=runner.vad, backend=runner.backend, traces_dir=None)
    call.output.source = FastSource()
    call.session.options.session_close_transcript_timeout = 0.01
    await call.start(audio_input=ScriptedMic())
    close_session = call.session.aclose

    async def closing() -> None:
        call.controller.on_user_speech_ended()  # the VAD's end of speech lands mid-close
        await close_session()

    call.session.aclose = closing
    await call.aclose()
    assert call.collector._count == 1 and len(call.collector.records) == 1
    assert call.collector.records[0]["outcome"] == "no_transcript"
