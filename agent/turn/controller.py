"""DuplexController: who holds the floor in one call, driven by the session's events, and the barge-in.

- The floor is a state machine (agent/turn/states.py: `State` and the whole `LEGAL` table). Every move goes through
  `transition`: an illegal one is logged with the turn id, counted in `illegal_transitions` and ignored, never raised.
- The caller's side comes as utterances (agent/turn/utterances.py: one VAD speech each; the n-th STT request and
  outcome belong to the n-th utterance): an utterance that ends joins the pending turn (the caller paused and went on:
  a pause held inside the turn) or opens a new one; an utterance that began over a playing answer is an overlap
  (agent/turn/overlaps.py), judged before it may be a turn at all (`on_transcript` then tells the voice node to drop a
  backchannel's transcript, so the framework never answers "mm-hmm").
- The turn decision is the framework's (`on_turn_committed`); an answer prepared before it and thrown away when the
  caller goes on is recorded as discarded (agent/turn/speeches.py).
- The agent's side, from each speech the framework creates to its last frame, is `replies` (agent/turn/reply_life.py):
  the audio output reports its frames, playout and clears there.
- `interrupt()` is the barge-in: the reply's cascade (agent/turn/cascade.py: audio gate, engine streams, LLM streams),
  the move to INTERRUPTING, and the turn's record of it. Idempotent per reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from agent.tracing import TURN_COMMITTED, Interruption, Outcome, TraceCollector, TurnTrace
from agent.turn import cascade
from agent.turn.overlaps import Overlaps
from agent.turn.reply import Reply, Silenceable
from agent.turn.reply_life import ReplyLife
from agent.turn.speeches import Speeches
from agent.turn.states import LEGAL, State
from agent.turn.utterances import Utterance, Utterances
from agent.turn.words import OverlapKind, overlap_kind

logger = logging.getLogger("agent.turn.controller")


def _covered(utterances: list[Utterance], text: str | None) -> int:
    """How many of `utterances` (in order) a commit of `text` covers: the shortest prefix whose words are `text`
    (all of them when `text` is unknown or matches no prefix)."""
    if text is None:
        return len(utterances)
    want, words = text.split(), []
    for n, utterance in enumerate(utterances, start=1):
        words += (utterance.text or "").split()
        if words == want:
            return n
    return len(utterances)


class DuplexController:
    def __init__(
        self,
        collector: TraceCollector,
        *,
        output: Silenceable | None = None,
        judge_overlaps: bool = True,
        drop_early_answer: Callable[[], Any] | None = None,
        on_turn_failed: Callable[[TurnTrace], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`output` reports its frames, playout and clears to `replies` from here on; `judge_overlaps`: duck and judge
        speech over a playing answer (TURN_HANDLING=ours) instead of leaving it to the framework alone;
        `drop_early_answer`: tell the framework to forget the answer it prepared before the commit (the caller went
        on); `on_turn_failed`: a turn's STT failed with no words heard (the call apologises)."""
        self.collector = collector
        self.clock = clock
        self.state = State.LISTENING
        self.output = output
        self.judge_overlaps = judge_overlaps
        self.drop_early_answer = drop_early_answer
        self.on_turn_failed = on_turn_failed
        self.illegal_transitions = 0
        self.transitions: list[tuple[float, State, State, str]] = []
        self.interruptions: list[tuple[Reply, Interruption]] = []
        self.utterances = Utterances()
        self.speeches = Speeches(clock)
        self.overlaps = Overlaps(self)
        self.replies = ReplyLife(self, self.overlaps)
        if output is not None:
            output.replies = self.replies
        self._uncommitted: list[Utterance] = []  # utterances whose words went to the framework since its last commit

    @property
    def awaiting_commit(self) -> bool:
        """Words the caller said are waiting for the framework's end-of-turn decision (a pending turn, or words that
        reached it after it had committed the turn they were said in: its next turn)."""
        return self.pending_turn() is not None or bool(self._uncommitted)

    @property
    def reply(self) -> Reply | None:
        """The reply of the speech that holds the floor."""
        active = self.speeches.active
        return active.reply if active is not None else None

    # -- the floor ---------------------------------------------------------------------------
    def transition(self, new: State, reason: str) -> bool:
        old = self.state
        if new == old:
            return True
        if new not in LEGAL[old]:
            self.illegal_transitions += 1
            logger.warning(
                "illegal transition %s -> %s (%s) ignored [turn %s]", old.value, new.value, reason, self.turn_id()
            )
            return False
        self.state = new
        self.transitions.append((self.clock(), old, new, reason))
        logger.debug("%s -> %s (%s) [turn %s]", old.value, new.value, reason, self.turn_id())
        return True

    def turn_id(self) -> str:
        active = self.speeches.active
        if active is not None and active.turn is not None:
            return active.turn.turn_id
        cur = self.collector.current
        return cur.turn_id if cur is not None else "-"

    def settle(self, reason: str) -> None:
        """Nothing holds the floor any more: HOLDING while a turn waits for its commit, else LISTENING."""
        self.transition(State.HOLDING if self.pending_turn() is not None else State.LISTENING, reason)

    def pending_turn(self) -> TurnTrace | None:
        """The current user turn if it may still be committed: not committed, not finished, not failed with no words."""
        cur = self.collector.current
        if cur is None or cur.finished or cur.has(TURN_COMMITTED) or (cur.errors and not cur.user_text):
            return None
        return cur

    # -- the caller's speech -----------------------------------------------------------------
    def on_user_speech_started(self, t: float | None = None) -> None:
        t = self.clock() if t is None else t
        pending = self.pending_turn()
        utterance = self.utterances.started(t)
        logger.debug("utterance %d started (%s) [turn %s]", self.utterances.count, self.state.value, self.turn_id())
        active = self.speeches.active
        overlapping = self.state in (State.SPEAKING, State.OVERLAPPED) and active is not None
        if overlapping and self.judge_overlaps and active is not None and active.reply is not None:
            self.overlaps.begin(utterance, active, t)
            return
        if pending is not None:  # the caller went on: the pause was inside the turn
            utterance.continues = pending
            pending.resume(t)
            self._discard_early_answers(pending, "user went on")
            if self.state is State.HOLDING:
                self.transition(State.LISTENING, "user went on")
            return
        self.collector.speech_started(t)

    def on_user_speech_ended(self, t: float | None = None) -> TurnTrace | None:
        """The caller's utterance ended (VAD end of speech): it joins the pending turn or opens one. An overlap
        stays undecided until its words are known."""
        t = self.clock() if t is None else t
        utterance = self.utterances.ended(t)
        logger.debug("utterance %d ended (overlap %s)", self.utterances.count, utterance.overlap is not None)
        if utterance.overlap is not None and utterance.overlap.verdict is None:
            return None
        return self.join_turn(utterance)

    def join_turn(self, utterance: Utterance) -> TurnTrace:
        assert utterance.end is not None
        turn = utterance.continues
        if turn is not None and not turn.finished and not turn.has(TURN_COMMITTED):
            turn.end_of_speech(utterance.end, self.collector.wall(utterance.end))
        else:
            busy = self.speeches.answer_owed(self.collector.current)
            self.collector.speech_started(utterance.start)
            turn = self.collector.open_turn(utterance.end, hold_previous=busy)
        if self.state is State.LISTENING:
            self.transition(State.HOLDING, "user speech ended")
        utterance.attach(turn)  # what STT already said of it applies now (an empty outcome ends the turn)
        return turn

    def on_stt_request(self, t: float) -> None:
        """An utterance went to STT (agent/turn/utterances.py pairs it with its utterance)."""
        self.utterances.request(t)

    def on_stt_result(self, text: str) -> None:
        """STT's outcome for the next utterance in order (the framework drops an empty transcript unseen)."""
        utterance = self.utterances.outcome(text, self.clock())
        if utterance is None:
            return
        logger.debug("utterance transcribed (%d chars)", len(text))
        if utterance.overlap is not None and utterance.overlap.verdict is None:
            self.overlaps.judge(utterance, overlap_kind(text))
        if not text.strip():
            utterance.in_turn(self._no_words)

    def on_stt_failed(self, error: str) -> None:
        """STT failed for the next utterance in order: an overlap is judged as noise; a turn gets the error."""
        utterance = self.utterances.outcome("", self.clock())
        if utterance is None:
            return
        if utterance.overlap is not None and utterance.overlap.verdict is None:
            self.overlaps.judge(utterance, OverlapKind.EMPTY)
            return

        def fail(turn: TurnTrace) -> None:
            turn.errors.append(error)
            if turn.user_text:  # the words after a pause are lost; the turn is answered on those before it
                turn.no_new_words()
                logger.error("speech recognition failed after a pause [turn %s]: %s", turn.turn_id, error)
                return
            turn.outcome = Outcome.ERROR
            self._no_words(turn)
            if self.on_turn_failed is not None:
                self.speeches.owed_apology = turn
                self.on_turn_failed(turn)  # a turn with no words at all: the call apologises

        utterance.in_turn(fail)

    def _no_words(self, turn: TurnTrace) -> None:
        """An utterance of `turn` came back without words: if the turn has none at all, it is over."""
        if turn.user_text or turn.finished:
            turn.no_new_words()
            return
        turn.mark("stt_done")
        if not self.speeches.owe_answer(turn):
            if turn.outcome is Outcome.OPEN:
                turn.outcome = Outcome.NO_TRANSCRIPT
            if turn is self.collector.current and not turn.errors:
                self.collector.finish(turn)
        if self.state is State.HOLDING and self.speeches.active is None:
            self.transition(State.LISTENING, "no words")

    def on_transcript(self, text: str) -> bool:
        """A final transcript is about to reach the framework: True to let it through (its words join the turn),
        False to drop it (an overlap judged a backchannel or a noise: no turn, no answer)."""
        utterance = self.utterances.next_transcript()
        if utterance is not None and utterance.overlap is not None:
            if utterance.overlap.verdict is None:
                self.overlaps.judge(utterance, overlap_kind(text))
            if utterance.overlap.verdict is not OverlapKind.REQUEST:
                return False
        turn = utterance.turn if utterance is not None and utterance.turn is not None else self.collector.current
        if turn is not None and not turn.finished and not turn.has(TURN_COMMITTED):
            turn.user_text = f"{turn.user_text} {text}".strip()
            turn.mark("stt_done", utterance.stt_done if utterance is not None and utterance.stt_done else None)
        if utterance is not None:
            self._uncommitted.append(utterance)
        return True

    def words_current(self) -> bool:
        """Whether the transcript the framework holds covers the caller's latest speech: its STT outcome is in and
        went on (or brought no words). The framework's own VAD can end a speech before this one's STT is in, and
        then asks for a judgement on the words of the speech before (agent/turn/end_of_turn.py)."""
        latest = self.utterances.latest
        return latest is None or (latest.text is not None and (latest.forwarded or not latest.text.strip()))

    # -- the turn decision -------------------------------------------------------------------
    def on_turn_committed(self, t: float | None = None, *, text: str | None = None) -> TurnTrace | None:
        """The framework committed a user turn of `text` (it will be answered). The framework's commit is the truth
        of where a turn ends: its VAD runs apart from the STT adapter's, so it may close a turn before the words of a
        pause's continuation reach it, and those words are then its next turn (`_uncommitted` keeps, in order, the
        utterances whose words went to the framework since its last commit)."""
        covered = self._uncommitted[: _covered(self._uncommitted, text)]
        self._uncommitted = self._uncommitted[len(covered) :]
        turn = self.collector.current
        if turn is None or turn.finished or turn.has(TURN_COMMITTED):
            if not covered:
                return None
            turn = self._turn_of(covered)
        elif self._uncommitted or (covered and not turn.user_text):
            # words that reached us after the framework had closed this turn, or the words of an earlier utterance
            # (transcribed after its turn's commit) that the framework commits as this one
            last = covered[-1] if covered else None
            turn.words_committed(" ".join(u.text or "" for u in covered).strip(),
                                 last.stt_request if last is not None else None, last.stt_done if last else None)
        turn.mark(TURN_COMMITTED, t)
        for speech in self.speeches.early_of(None):  # prepared on words that reached no turn of ours until now
            speech.turn = turn
            if speech.reply is not None and speech.reply.turn is None:
                speech.reply.turn = turn
        if self.state in (State.HOLDING, State.LISTENING, State.INTERRUPTING):
            self.transition(State.THINKING, "turn committed")
        early = self.speeches.answer_of(turn)
        if early is not None and early.reply is not None and self.speeches.active is None:
            self.speeches.active = early  # prepared before the commit: the answer from now on (if the framework keeps)
        try:  # the framework makes (or schedules) the answer right after this hook returns, in the same loop step
            asyncio.get_running_loop().call_soon(self._unless_answered, turn)
        except RuntimeError:  # no loop (unit tests drive the controller directly)
            pass
        return turn

    def _unless_answered(self, turn: TurnTrace) -> None:
        """Right after a commit: the framework made no answer for it (it kept an early answer that was cut)."""
        if self.state is State.THINKING and self.speeches.active is None and self.speeches.answer_of(turn) is None:
            self.settle("committed with no answer to come")

    def _turn_of(self, utterances: list[Utterance]) -> TurnTrace:
        """A user turn of these utterances (the framework committed their words as one)."""
        first, last = utterances[0], utterances[-1]
        busy = self.speeches.answer_owed(self.collector.current)
        self.collector.speech_started(first.start)
        turn = self.collector.open_turn(last.end if last.end is not None else self.clock(), hold_previous=busy)
        turn.user_text = " ".join(u.text or "" for u in utterances).strip()
        for utterance in utterances:
            utterance.turn = turn
        if last.stt_request is not None:
            turn.mark("stt_request", min(last.stt_request, turn.t0))
        turn.mark("stt_done", last.stt_done)
        return turn

    def on_turn_decision(self, details: dict[str, Any]) -> None:
        """How the end of turn was judged (agent/turn/end_of_turn.py): kept on the pending turn's trace."""
        cur = self.collector.current
        if cur is not None and not cur.finished:
            cur.turn_decision = details

    def _discard_early_answers(self, turn: TurnTrace, reason: str) -> None:
        early = self.speeches.early_of(turn)
        for speech in early:
            self.speeches.discard(speech, reason)
        if early and self.drop_early_answer is not None:
            self.drop_early_answer()

    # -- barge-in ----------------------------------------------------------------------------
    def interrupt(
        self, *, source: str = "vad", reply: Reply | None = None, t: float | None = None
    ) -> Interruption | None:
        """The barge-in. Idempotent per reply; a no-op when nothing is being generated or played."""
        reply = reply or self.reply
        if reply is None or reply.interruption is not None:
            return None
        t_detect = self.clock() if t is None else t
        irq = Interruption(interrupt_detected=t_detect, source=source)
        reply.interruption = irq
        if self.reply is reply and self.state in (State.THINKING, State.SPEAKING, State.OVERLAPPED):
            self.transition(State.INTERRUPTING, f"barge-in ({source})")
        cascade.cut(reply, irq, output=self.output, clock=self.clock)
        turn = reply.turn
        if turn is not None:
            reply.adopted_by_turn()
            turn.interruptions.append(irq)
            turn.outcome = Outcome.INTERRUPTED
            if turn is not self.collector.current:
                self.collector.finish(turn)  # held open for this reply
        self.interruptions.append((reply, irq))
        assert irq.audio_silenced is not None
        logger.info("barge-in [turn %s]: silenced in %.2f ms, tts_cancelled=%s llm_cancelled=%s", reply.turn_id,
                    (irq.audio_silenced - t_detect) * 1000.0, irq.tts_cancelled, irq.llm_cancelled)
        return irq

    def close(self) -> None:
        if self.reply is not None and not self.reply.done:
            self.interrupt(source="session_closed")
        self.collector.close()
