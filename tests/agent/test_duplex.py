"""DuplexController: the transition table (illegal moves logged, never raised), the barge-in cascade
(output silenced, TTS tasks and LLM streams closed, cancel->silence recorded), idempotence."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from agent.duplex import LEGAL, DuplexController, State
from agent.tracing import TraceCollector


class FakeOutput:
    def __init__(self) -> None:
        self.silenced: list[str] = []

    def silence(self, reply_id: str) -> float:
        import time

        self.silenced.append(reply_id)
        return time.perf_counter()


def make() -> tuple[DuplexController, FakeOutput]:
    controller = DuplexController(TraceCollector("s", traces_dir=None))
    output = FakeOutput()
    controller.output = output
    return controller, output


EXPECTED_LEGAL = {
    (State.LISTENING, State.THINKING),
    (State.LISTENING, State.SPEAKING),
    (State.THINKING, State.SPEAKING),
    (State.THINKING, State.LISTENING),
    (State.THINKING, State.INTERRUPTING),
    (State.SPEAKING, State.LISTENING),
    (State.SPEAKING, State.INTERRUPTING),
    (State.INTERRUPTING, State.LISTENING),
    (State.INTERRUPTING, State.THINKING),
}


@pytest.mark.parametrize("old, new", list(itertools.permutations(State, 2)))
def test_transition_table(old: State, new: State, caplog: pytest.LogCaptureFixture) -> None:
    controller, _ = make()
    controller.state = old
    with caplog.at_level(logging.WARNING, logger="agent.duplex"):
        ok = controller.transition(new, "test")
    legal = (old, new) in EXPECTED_LEGAL
    assert ok is legal
    assert (new in LEGAL[old]) is legal
    assert controller.state == (new if legal else old)
    assert controller.illegal_transitions == (0 if legal else 1)
    assert ("illegal transition" in caplog.text) is (not legal)


def test_same_state_is_a_no_op() -> None:
    controller, _ = make()
    assert controller.transition(State.LISTENING, "again")
    assert controller.transitions == []


def test_normal_turn_walks_listening_thinking_speaking_listening() -> None:
    controller, _ = make()
    controller.on_user_speech_started()
    turn = controller.on_user_turn_ended()
    assert controller.state is State.THINKING
    controller.on_stt_request(turn.t0 + 0.001)
    controller.on_transcript("hello")
    reply = controller.begin_reply("speech-1")
    assert controller.begin_reply("speech-1") is reply  # llm_node and tts_node share it
    controller.on_frame_published(reply.reply_id, turn.t0 + 0.2)
    assert controller.state is State.SPEAKING
    controller.on_playout_finished(reply.reply_id, interrupted=False)
    assert controller.state is State.LISTENING
    record = controller.collector.records[-1]
    assert record["outcome"] == "answered"
    assert record["points"]["first_frame_published"] == pytest.approx(0.2)


def test_stt_request_before_turn_opens_is_kept_for_that_turn() -> None:
    controller, _ = make()
    controller.on_stt_request(100.0)  # STT adapter calls STT before END_OF_SPEECH reaches us
    turn = controller.on_user_turn_ended(99.9)
    assert turn.points["stt_request"] == 100.0


def test_an_stt_outcome_before_its_turn_opens_waits_for_it() -> None:
    """agent/early_stt.py: an utterance sent at the pause can be transcribed to nothing before its END_OF_SPEECH
    reaches the controller; the empty transcript then ends that turn, not the one before."""
    controller, _ = make()
    controller.on_user_speech_started(99.0)
    controller.on_stt_request(99.8)  # sent at the pause, inside the hangover
    controller.on_stt_result("   ")
    assert controller.state is State.LISTENING and controller.collector.current is None  # nothing to end yet
    turn = controller.on_user_turn_ended(100.0)
    assert controller.state is State.LISTENING  # THINKING, then back: the empty transcript ended this turn
    assert turn.points["stt_request"] == 99.8 and turn.has("stt_done")
    controller.on_stt_result("hello")  # a transcript with words changes nothing here: its event does
    assert controller.state is State.LISTENING


def test_empty_transcript_goes_back_to_listening() -> None:
    controller, _ = make()
    controller.on_user_turn_ended()
    controller.on_transcript("")
    assert controller.state is State.LISTENING


async def test_barge_in_cascade_cancels_everything_once() -> None:
    controller, output = make()
    controller.on_user_turn_ended()
    reply = controller.begin_reply("speech-1")
    closed: list[str] = []

    async def aclose() -> None:
        closed.append("llm")

    reply.llm_closers.append(aclose)
    tts_task = asyncio.create_task(asyncio.sleep(10))
    reply.tts_tasks.add(tts_task)
    controller.on_frame_published(reply.reply_id, 1.0)
    irq = controller.interrupt(source="vad", reply=reply)
    assert irq is not None
    assert output.silenced == [reply.reply_id]
    assert irq.audio_silenced is not None and irq.audio_silenced >= irq.interrupt_detected
    assert irq.tts_cancelled and irq.llm_cancelled
    await asyncio.sleep(0)
    assert tts_task.cancelled() and closed == ["llm"]
    assert controller.state is State.LISTENING
    assert controller.interrupt(source="vad", reply=reply) is None  # idempotent
    controller.on_clear_buffer(reply.reply_id)  # the framework's own clear after ours: nothing more
    assert output.silenced == [reply.reply_id]
    assert [s for _, _, s, _ in controller.transitions][-2:] == [State.INTERRUPTING, State.LISTENING]


def test_frames_after_silence_are_counted_as_stale() -> None:
    controller, _ = make()
    controller.on_user_turn_ended()
    reply = controller.begin_reply()
    irq = controller.interrupt(reply=reply)
    assert irq is not None and irq.audio_silenced is not None
    controller.on_frame_published(reply.reply_id, irq.audio_silenced + 0.01)
    assert irq.stale_frames_after_cancel == 1


def test_interrupt_with_nothing_playing_is_ignored() -> None:
    controller, output = make()
    assert controller.interrupt() is None
    assert controller.state is State.LISTENING and output.silenced == []


def test_interrupted_turn_record_has_the_interruption() -> None:
    controller, _ = make()
    controller.on_user_turn_ended()
    reply = controller.begin_reply()
    controller.on_frame_published(reply.reply_id, controller.collector.current.t0 + 0.1)  # type: ignore[union-attr]
    controller.interrupt(reply=reply)
    controller.on_user_turn_ended()  # the barge-in utterance ends: the interrupted turn is written
    first = controller.collector.records[0]
    assert first["outcome"] == "interrupted"
    (rec,) = first["interruptions"]
    assert rec["cancel_to_silence_ms"] >= 0 and rec["stale_frames_after_cancel"] == 0


def test_turn_whose_speech_is_in_flight_is_held_open_until_the_speech_ends() -> None:
    """The user speaks again after a reply's speech was created but before it played: the earlier turn
    used to be written at once as "error" with no error; now it waits for its speech's end."""
    controller, _ = make()
    controller.on_user_turn_ended()
    controller.on_transcript("first question")
    controller.on_speech_created("s1", is_interrupted=lambda: True)
    controller.on_user_turn_ended()  # the barge-in utterance ends while s1 waits for the user to be silent
    assert controller.collector.records == []
    controller.on_speech_done("s1", interrupted=True)
    (first,) = controller.collector.records
    assert first["outcome"] == "interrupted" and first["errors"] == []
    assert first["interruptions"][0]["frames_published"] == 0


def test_turn_superseded_before_any_reply_is_unanswered_not_error() -> None:
    controller, _ = make()
    controller.on_user_turn_ended()
    controller.on_transcript("first half")
    controller.on_user_turn_ended()  # the framework merged it into the next utterance: no speech for it
    (first,) = controller.collector.records
    assert first["outcome"] == "unanswered" and first["errors"] == []


def test_speech_interrupted_before_its_reply_gives_a_closed_reply() -> None:
    controller, _ = make()
    controller.on_user_turn_ended()
    controller.on_transcript("hello")
    controller.on_speech_created("s1")
    controller.on_speech_interrupted("s1")  # 0 ms: no node has run yet
    reply = controller.begin_reply("s1")  # the LLM node starts anyway
    assert reply.closed and controller.reply is None
    assert controller.state is State.LISTENING
    assert controller.begin_reply("s1") is reply  # the TTS node gets the same closed reply
    controller.on_speech_done("s1", interrupted=True)
    controller.on_user_turn_ended()
    assert controller.collector.records[0]["outcome"] == "interrupted"
