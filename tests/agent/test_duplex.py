"""DuplexController: the transition table (illegal moves logged, never raised), the barge-in cascade
(output silenced, TTS tasks and LLM streams closed, cancel->silence recorded), idempotence, turns that hold
pauses, early answers thrown away, and overlaps judged (duck, then restore or cut)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import pytest

from agent.tracing import TraceCollector
from agent.turn.controller import DuplexController
from agent.turn.states import LEGAL, State


class FakeOutput:
    def __init__(self) -> None:
        self.replies: Any = None
        self.silenced: list[str] = []
        self.ducked = self.restored = 0

    def silence(self, reply_id: str) -> float:
        self.silenced.append(reply_id)
        return time.perf_counter()

    def duck(self) -> float:
        self.ducked += 1
        return time.perf_counter()

    def restore(self) -> float:
        self.restored += 1
        return time.perf_counter()


def make(*, judge_overlaps: bool = True) -> tuple[DuplexController, FakeOutput]:
    output = FakeOutput()
    controller = DuplexController(TraceCollector("s", traces_dir=None), output=output, judge_overlaps=judge_overlaps)
    assert output.replies is controller.replies  # the output reports to the replies of the controller it was given to
    return controller, output


class FakeHandle:
    """The flags a SpeechHandle gives the controller."""

    def __init__(self, key: str, *, scheduled: bool = True) -> None:
        self.key, self.scheduled, self.interrupted, self.source = key, scheduled, False, None
        self.interrupt_calls = 0

    def register(self, controller: DuplexController) -> None:
        controller.replies.on_speech_created(
            self.key, is_interrupted=lambda: self.interrupted, source=lambda: self.source,
            is_scheduled=lambda: self.scheduled, interrupt=self.interrupt,
        )  # fmt: skip

    def interrupt(self) -> None:
        self.interrupt_calls += 1
        self.interrupted, self.source = True, self.source or "programmatic"


def user_says(controller: DuplexController, text: str, *, start: float | None, end: float) -> None:
    """One utterance: START (unless `start` is None: it was given already), its STT request at the pause, END,
    STT's outcome, and its final transcript."""
    if start is not None:
        controller.on_user_speech_started(start)
    controller.on_stt_request(end - 0.1)
    controller.on_user_speech_ended(end)
    controller.on_stt_result(text)
    if text:
        assert controller.on_transcript(text)


def answer(controller: DuplexController, key: str = "s1", *, t: float = 10.0) -> FakeHandle:
    """The framework's answer to the current turn: speech created, committed, first frame published."""
    handle = FakeHandle(key)
    controller.on_turn_committed(t)
    handle.register(controller)
    reply = controller.replies.begin_reply(key)
    reply.mark("llm_request", t + 0.01)
    controller.replies.on_frame_published(key, t + 0.2)
    return handle


EXPECTED_LEGAL = {
    (State.LISTENING, State.HOLDING),
    (State.LISTENING, State.THINKING),
    (State.LISTENING, State.SPEAKING),
    (State.HOLDING, State.LISTENING),
    (State.HOLDING, State.THINKING),
    (State.HOLDING, State.SPEAKING),
    (State.THINKING, State.SPEAKING),
    (State.THINKING, State.LISTENING),
    (State.THINKING, State.HOLDING),
    (State.THINKING, State.INTERRUPTING),
    (State.SPEAKING, State.LISTENING),
    (State.SPEAKING, State.HOLDING),
    (State.SPEAKING, State.OVERLAPPED),
    (State.SPEAKING, State.INTERRUPTING),
    (State.OVERLAPPED, State.SPEAKING),
    (State.OVERLAPPED, State.LISTENING),
    (State.OVERLAPPED, State.INTERRUPTING),
    (State.INTERRUPTING, State.LISTENING),
    (State.INTERRUPTING, State.HOLDING),
    (State.INTERRUPTING, State.THINKING),
}


@pytest.mark.parametrize("old, new", list(itertools.permutations(State, 2)))
def test_transition_table(old: State, new: State, caplog: pytest.LogCaptureFixture) -> None:
    controller, _ = make()
    controller.state = old
    with caplog.at_level(logging.WARNING, logger="agent.turn.controller"):
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


def test_normal_turn_walks_holding_thinking_speaking_listening() -> None:
    controller, _ = make()
    user_says(controller, "hello", start=9.0, end=9.5)
    assert controller.state is State.HOLDING  # ended, not committed yet
    turn = controller.collector.current
    assert turn is not None and turn.points["stt_request"] == pytest.approx(9.4)
    handle = answer(controller, t=9.8)
    assert controller.state is State.SPEAKING
    assert controller.replies.begin_reply(handle.key) is controller.reply  # llm_node and tts_node share it
    controller.replies.on_playout_finished(handle.key, interrupted=False)
    assert controller.state is State.LISTENING
    record = controller.collector.records[-1]
    assert record["outcome"] == "answered"
    assert record["points"]["first_frame_published"] == pytest.approx(0.5)
    assert record["points"]["turn_committed"] == pytest.approx(0.3)
    assert record["points"]["llm_request"] == pytest.approx(0.31)


def test_stt_request_before_the_end_of_speech_is_kept_for_that_turn() -> None:
    controller, _ = make()
    controller.on_user_speech_started(99.0)
    controller.on_stt_request(99.8)  # sent at the pause, before END_OF_SPEECH reaches us
    turn = controller.on_user_speech_ended(100.0)
    assert turn is not None and turn.points["stt_request"] == 99.8


def test_an_empty_stt_outcome_before_its_end_of_speech_ends_that_turn() -> None:
    """agent/turn/early_stt.py: an utterance sent at the pause can be transcribed to nothing before its END_OF_SPEECH
    reaches the controller; the empty transcript then ends that turn, not the one before."""
    controller, _ = make()
    controller.on_user_speech_started(99.0)
    controller.on_stt_request(99.8)
    controller.on_stt_result("   ")
    assert controller.state is State.LISTENING and controller.collector.current is None  # nothing to end yet
    controller.on_user_speech_ended(100.0)
    assert controller.state is State.LISTENING
    (record,) = controller.collector.records
    assert record["outcome"] == "no_transcript" and record["points"]["stt_request"] == pytest.approx(-0.2)


async def test_barge_in_cascade_cancels_everything_once_and_interrupting_lasts_until_the_speech_ends() -> None:
    controller, output = make()
    user_says(controller, "hello", start=0.0, end=0.5)
    handle = answer(controller, t=1.0)
    reply = controller.reply
    assert reply is not None
    closed: list[str] = []

    async def aclose() -> None:
        closed.append("llm")

    reply.llm_closers.append(aclose)
    tts_task = asyncio.create_task(asyncio.sleep(10))
    reply.tts_tasks.add(tts_task)
    irq = controller.interrupt(source="vad", reply=reply)
    assert irq is not None
    assert output.silenced == [reply.reply_id]
    assert irq.audio_silenced is not None and irq.audio_silenced >= irq.interrupt_detected
    assert irq.tts_cancelled and irq.llm_cancelled
    await asyncio.sleep(0)
    assert tts_task.cancelled() and closed == ["llm"]
    assert controller.state is State.INTERRUPTING  # a handler sees it until the speech has wound down
    assert controller.interrupt(source="vad", reply=reply) is None  # idempotent
    controller.replies.on_clear_buffer(reply.reply_id)  # the framework's own clear after ours: nothing more
    assert output.silenced == [reply.reply_id]
    controller.replies.on_speech_done(handle.key, interrupted=True)
    assert controller.state is State.LISTENING and controller.reply is None


def test_frames_after_silence_are_counted_as_stale() -> None:
    controller, _ = make()
    user_says(controller, "hello", start=0.0, end=0.5)
    handle = answer(controller, t=1.0)
    irq = controller.interrupt(reply=controller.reply)
    assert irq is not None and irq.audio_silenced is not None
    controller.replies.on_frame_published(handle.key, irq.audio_silenced + 0.01)
    assert irq.stale_frames_after_cancel == 1


def test_interrupt_with_nothing_playing_is_ignored() -> None:
    controller, output = make()
    assert controller.interrupt() is None
    assert controller.state is State.LISTENING and output.silenced == []


def test_interrupted_turn_record_has_the_interruption() -> None:
    controller, _ = make(judge_overlaps=False)
    user_says(controller, "hello", start=0.0, end=0.5)
    handle = answer(controller, t=1.0)
    handle.interrupt()
    controller.replies.on_speech_interrupted(handle.key)
    controller.replies.on_speech_done(handle.key, interrupted=True)
    user_says(controller, "stop", start=2.0, end=2.4)  # the barge-in utterance ends: the interrupted turn is written
    first = controller.collector.records[0]
    assert first["outcome"] == "interrupted"
    (rec,) = first["interruptions"]
    assert rec["cancel_to_silence_ms"] >= 0 and rec["stale_frames_after_cancel"] == 0 and rec["source"] == "api"


def test_turn_whose_speech_is_in_flight_is_held_open_until_the_speech_ends() -> None:
    """The user speaks again after a reply's speech was created but before it played: the earlier turn waits for
    its speech's end instead of being written at once."""
    controller, _ = make()
    user_says(controller, "first question", start=0.0, end=0.5)
    controller.on_turn_committed(0.8)
    handle = FakeHandle("s1")
    handle.register(controller)
    user_says(controller, "second", start=1.0, end=1.5)  # ends while s1 waits for the user to be silent
    assert controller.collector.records == []
    handle.interrupt()
    controller.replies.on_speech_done("s1", interrupted=True)
    (first,) = controller.collector.records
    assert first["outcome"] == "interrupted" and first["errors"] == []
    assert first["interruptions"][0]["frames_published"] == 0


def test_a_committed_turn_superseded_before_any_reply_is_unanswered_not_error() -> None:
    controller, _ = make()
    user_says(controller, "first half", start=0.0, end=0.5)
    controller.on_turn_committed(0.8)
    user_says(controller, "second half", start=1.0, end=1.5)  # no speech ever came for the first
    (first,) = controller.collector.records
    assert first["outcome"] == "unanswered" and first["errors"] == []


def test_speech_interrupted_before_its_reply_gives_a_closed_reply() -> None:
    controller, _ = make()
    user_says(controller, "hello", start=0.0, end=0.5)
    controller.on_turn_committed(0.7)
    handle = FakeHandle("s1")
    handle.register(controller)
    handle.interrupt()
    controller.replies.on_speech_interrupted("s1")  # 0 ms: no node has run yet
    reply = controller.replies.begin_reply("s1")  # the LLM node starts anyway
    assert reply.closed and controller.reply is None
    assert controller.state is State.THINKING  # committed; the cut speech produced nothing
    assert controller.replies.begin_reply("s1") is reply  # the TTS node gets the same closed reply
    controller.replies.on_speech_done("s1", interrupted=True)
    user_says(controller, "again", start=2.0, end=2.5)
    assert controller.collector.records[0]["outcome"] == "interrupted"


def test_the_words_are_current_once_the_latest_speech_is_transcribed_and_gone_on() -> None:
    """What agent/turn/end_of_turn.py asks before it judges words: the framework's VAD can end a speech before its STT
    outcome is in, and would be judged on the transcript of the speech before."""
    controller, _ = make()
    assert controller.words_current()  # nothing said yet
    user_says(controller, "Can you play some music?", start=0.0, end=1.5)
    assert controller.words_current()
    controller.on_user_speech_started(1.9)  # "something relaxing" ...
    controller.on_stt_request(2.8)
    controller.on_user_speech_ended(2.9)
    assert not controller.words_current()  # ... ended, its words not in: the transcript is the first speech's
    controller.on_stt_result("Something relaxing.")
    assert not controller.words_current()  # in, but not yet handed to the framework
    assert controller.on_transcript("Something relaxing.")
    assert controller.words_current()
    controller.on_user_speech_started(3.5)  # a cough: STT hears nothing
    controller.on_user_speech_ended(3.8)
    controller.on_stt_result("")
    assert controller.words_current()  # no words to wait for


# -- turns that hold pauses, and answers prepared early --------------------------------------------
def test_a_pause_inside_the_turn_is_held_and_the_early_answer_thrown_away_unheard() -> None:
    controller, _ = make()
    dropped: list[int] = []
    controller.drop_early_answer = lambda: dropped.append(1)
    user_says(controller, "I would like to book a table", start=0.0, end=1.5)
    early = FakeHandle("early", scheduled=False)  # the framework prepares an answer on the transcript
    early.register(controller)
    reply = controller.replies.begin_reply("early")
    reply.mark("llm_request", 1.9)
    held = {"words": "neutral", "p_voice": 0.2, "threshold": 0.36, "wait": "medium"}
    controller.on_turn_decision(dict(held))  # agent/turn/end_of_turn.py judged the pause: the medium wait
    assert controller.state is State.HOLDING  # not committed: nothing may be heard
    controller.on_user_speech_started(2.2)  # the caller goes on after a 700 ms pause
    assert dropped == [1] and reply.closed and not controller.replies.frame_allowed("early")
    assert controller.state is State.LISTENING
    user_says(controller, "for four people tomorrow evening.", start=None, end=4.0)
    controller.replies.on_speech_done("early", interrupted=True)  # the framework drops it: not an interruption
    handle = answer(controller, "s2", t=4.4)
    controller.replies.on_playout_finished(handle.key, interrupted=False)
    (record,) = controller.collector.records
    assert record["outcome"] == "answered" and record["interruptions"] == []
    assert record["pauses"] == [{"at": pytest.approx(-2.5), "ms": pytest.approx(700.0), "decision": held}]
    assert record["turn_decision"] == {}  # the turn's last end was not judged here (no detector in this test)
    assert record["discarded"] == [{"at": pytest.approx(-2.1), "reason": "user went on"}]
    assert record["points"]["vad_speech_start"] == pytest.approx(-4.0)  # the whole turn, both halves
    assert record["points"]["llm_request"] == pytest.approx(0.41)  # the answer heard, not the one thrown away


def test_an_early_answer_the_framework_replaces_is_recorded_as_discarded() -> None:
    controller, _ = make()
    user_says(controller, "hello", start=0.0, end=0.5)
    early = FakeHandle("early", scheduled=False)
    early.register(controller)
    controller.replies.begin_reply("early")
    early.interrupted = True  # the framework's _cancel(): interrupted with no source, never scheduled
    controller.replies.on_speech_interrupted("early")
    controller.replies.on_speech_done("early", interrupted=True)
    assert controller.interruptions == []
    handle = answer(controller, "s2", t=1.0)
    controller.replies.on_playout_finished(handle.key, interrupted=False)
    (record,) = controller.collector.records
    assert record["outcome"] == "answered" and record["discarded"][0]["reason"] == "transcript changed"


# -- overlaps ---------------------------------------------------------------------------------
def speaking(controller: DuplexController) -> FakeHandle:
    user_says(controller, "tell me a story", start=0.0, end=1.0)
    handle = answer(controller, t=1.5)
    assert controller.state is State.SPEAKING
    return handle


@pytest.mark.parametrize("said", ["Mm-hmm.", "Yeah", "", "(coughs)"])
def test_a_backchannel_or_a_noise_over_the_answer_ducks_then_restores_and_is_no_turn(said: str) -> None:
    controller, output = make()
    handle = speaking(controller)
    controller.on_user_speech_started(3.0)
    assert controller.state is State.OVERLAPPED and output.ducked == 1
    controller.on_stt_request(3.5)
    controller.on_user_speech_ended(3.6)
    assert len(controller.collector.records) == 0 and controller.collector.current is not None
    controller.on_stt_result(said)
    if said:
        assert controller.on_transcript(said) is False  # dropped: the framework never answers "mm-hmm"
    assert controller.state is State.SPEAKING and output.restored == 1 and output.silenced == []
    assert handle.interrupt_calls == 0
    controller.replies.on_playout_finished(handle.key, interrupted=False)
    (record,) = controller.collector.records
    assert record["outcome"] == "answered"
    (overlap,) = record["overlaps"]
    assert overlap["verdict"] in ("backchannel", "empty") and overlap["restored"] is True
    assert controller.collector.current is not None and controller.collector.current.index == 1  # no new turn


def test_words_that_ask_for_the_floor_cut_the_answer_and_become_the_next_turn() -> None:
    controller, output = make()
    handle = speaking(controller)
    controller.on_user_speech_started(3.0)
    controller.on_stt_request(3.5)
    controller.on_user_speech_ended(3.6)
    controller.on_stt_result("Wait, no.")
    assert output.silenced == [handle.key] and handle.interrupt_calls == 1  # our cascade, then the framework's
    assert controller.state is State.INTERRUPTING
    assert controller.on_transcript("Wait, no.") is True  # the framework answers it
    controller.replies.on_speech_interrupted(handle.key)
    controller.replies.on_speech_done(handle.key, interrupted=True)
    assert controller.state is State.HOLDING  # the barge-in turn waits for its commit
    first = controller.collector.records[0]
    assert first["outcome"] == "interrupted" and first["interruptions"][0]["source"] == "words"
    assert first["overlaps"][0]["verdict"] == "request"
    second = controller.collector.current
    assert second is not None and second.user_text == "Wait, no." and second.index == 2


def test_speech_over_the_answer_longer_than_the_minimum_is_cut_by_the_framework() -> None:
    controller, output = make()
    handle = speaking(controller)
    controller.on_user_speech_started(3.0)
    handle.interrupted, handle.source = True, "audio_activity"  # the framework's min_duration passed
    controller.replies.on_speech_interrupted(handle.key)
    assert output.silenced == [handle.key]
    controller.replies.on_speech_done(handle.key, interrupted=True)
    controller.on_stt_request(4.5)
    controller.on_user_speech_ended(4.6)
    assert controller.collector.current is not None and controller.collector.current.index == 2
    controller.on_stt_result("actually I wanted something else")
    assert controller.on_transcript("actually I wanted something else") is True
    first = controller.collector.records[0]
    assert first["overlaps"][0]["verdict"] == "long" and first["interruptions"][0]["source"] == "vad"


def test_without_overlap_judging_speech_over_the_answer_is_left_to_the_framework() -> None:
    controller, output = make(judge_overlaps=False)
    speaking(controller)
    controller.on_user_speech_started(3.0)
    assert controller.state is State.SPEAKING and output.ducked == 0
