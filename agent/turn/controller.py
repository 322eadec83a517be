"""DuplexController: who holds the floor in one call, and the barge-in cascade.

States (`State`; each one lasts until an event ends it, so a handler can observe it; `LEGAL` is the whole table,
and an illegal move is logged with the turn id, counted in `illegal_transitions` and ignored, never raised):
- LISTENING: the agent is silent and owes no answer (the caller may be talking).
- HOLDING: the caller stopped and their turn is not committed yet: the end of turn is being confirmed
  (agent/turn/end_of_turn.py), and an answer may already be prepared on the transcript, unheard.
- THINKING: the turn is committed (`on_turn_committed`); its answer is being prepared, nothing heard yet.
- SPEAKING: the answer is playing.
- OVERLAPPED: the caller speaks over the answer: its voice is ducked while the overlap is judged. A backchannel
  or a noise restores it; words that ask for the floor cut it (the cascade, then the framework); speech longer
  than the interruption minimum is cut by the framework.
- INTERRUPTING: the answer was cut (silenced at once) and its speech is still winding down.

The user side comes as utterances (one VAD speech each; the n-th STT request and outcome belong to the n-th
utterance): an utterance that ends joins the pending turn (the caller paused and went on: a pause held inside the
turn) or opens a new one; an utterance that began over a playing answer is an overlap, judged before it may be a
turn at all (`on_transcript` then tells the voice node to drop a backchannel's transcript, so the framework never
answers "mm-hmm").

The agent side comes as speeches: every speech the framework creates is a `Speech` record (`on_speech_created`,
before any of its nodes runs) bound to the user turn it answers, and its `Reply` hangs on it once a node runs
(`begin_reply`). The speech's own `interrupted` flag is read before every frame (`frame_allowed`), and its end
(`on_speech_done`) closes whatever its reply still holds, so no state outlives its speech. An answer prepared early
and thrown away before it was scheduled is recorded on its turn as discarded, never as an interruption.

Cascade (`interrupt()`), synchronous on the session's loop: 1. the output's gate for the reply closes and its queued
audio is dropped (`audio_silenced`: nothing of it is captured after this); 2. the reply's TTS producers are
cancelled (their `finally` closes the engine stream: GPU work stops, the slot frees); 3. its LLM streams are closed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.tracing import (
    TURN_COMMITTED,
    Discarded,
    Interruption,
    Outcome,
    OverlapRecord,
    TraceCollector,
    TurnTrace,
)
from agent.turn.reply import Reply, Silenceable
from agent.turn.utterances import Utterance, Utterances
from agent.turn.words import OverlapKind, overlap_kind

logger = logging.getLogger("agent.turn.controller")


class State(enum.Enum):
    LISTENING = "listening"
    HOLDING = "holding"
    THINKING = "thinking"
    SPEAKING = "speaking"
    OVERLAPPED = "overlapped"
    INTERRUPTING = "interrupting"


LEGAL: dict[State, frozenset[State]] = {
    # LISTENING -> THINKING: a turn committed whose end of speech came after its transcript (or while the
    # agent was speaking); -> SPEAKING: agent-initiated speech (an apology) with no turn to commit
    State.LISTENING: frozenset({State.HOLDING, State.THINKING, State.SPEAKING}),
    # HOLDING -> LISTENING: the caller went on (a pause inside the turn), or the utterance had no words
    State.HOLDING: frozenset({State.LISTENING, State.THINKING, State.SPEAKING}),
    State.THINKING: frozenset({State.SPEAKING, State.LISTENING, State.HOLDING, State.INTERRUPTING}),
    State.SPEAKING: frozenset({State.LISTENING, State.HOLDING, State.OVERLAPPED, State.INTERRUPTING}),
    # OVERLAPPED -> LISTENING: the answer ended before the overlap was judged
    State.OVERLAPPED: frozenset({State.SPEAKING, State.LISTENING, State.INTERRUPTING}),
    # INTERRUPTING -> HOLDING / THINKING: the barge-in utterance ended / was committed before the cut speech ended
    State.INTERRUPTING: frozenset({State.LISTENING, State.HOLDING, State.THINKING}),
}

#: The framework's interrupt sources, as the trace names them.
CAUSES = {"audio_activity": "vad", "user_turn": "user_turn", "programmatic": "api"}


@dataclass
class Speech:
    """A speech the framework created, as the controller sees it: the turn it answers and its reply."""

    key: str
    turn: TurnTrace | None
    is_interrupted: Callable[[], bool] = lambda: False
    source: Callable[[], str | None] = lambda: None  # the framework's interrupt source once interrupted
    is_scheduled: Callable[[], bool] = lambda: True  # False while it is an early answer, not yet the turn's
    interrupt: Callable[[], None] = lambda: None  # ask the framework to interrupt it
    reply: Reply | None = None
    interrupted_at: float | None = None
    discarded: bool = False
    done: bool = False

    @property
    def live(self) -> bool:
        return not (self.done or self.discarded)

    @property
    def answering(self) -> bool:
        """Live and not an early answer the framework has just thrown away (it interrupts one before it makes the
        speech that replaces it, and tells us so only on the next loop turn)."""
        return self.live and not (self.is_interrupted() and not self.is_scheduled())

    def cause(self) -> str:
        return CAUSES.get(str(self.source()), "interrupted")


@dataclass
class Overlap:
    """The caller spoke over an answer: judged once its words (or their absence) are known."""

    speech: Speech
    record: OverlapRecord
    verdict: OverlapKind | None = None


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
        """`output` reports its frames, playout and clears to this controller from here on; `judge_overlaps`: duck
        and judge speech over a playing answer (TURN_HANDLING=ours) instead of leaving it to the framework alone;
        `drop_early_answer`: tell the framework to forget the answer it prepared before the commit (the caller went
        on); `on_turn_failed`: a turn's STT failed with no words heard (the call apologises)."""
        self.collector = collector
        self.clock = clock
        self.state = State.LISTENING
        self.output = output
        if output is not None:
            output.controller = self
        self.judge_overlaps = judge_overlaps
        self.drop_early_answer = drop_early_answer
        self.on_turn_failed = on_turn_failed
        self.active: Speech | None = None  # the speech whose answer holds the floor (THINKING .. INTERRUPTING)
        self.overlaps: list[Overlap] = []  # overlaps of the playing answer not judged yet (its voice is ducked)
        self.illegal_transitions = 0
        self.transitions: list[tuple[float, State, State, str]] = []
        self.interruptions: list[tuple[Reply, Interruption]] = []
        self._speeches: dict[str, Speech] = {}
        self.utterances = Utterances()
        self._uncommitted: list[Utterance] = []  # utterances whose words went to the framework since its last commit
        self._owed_apology: TurnTrace | None = None  # the failed turn the next speech the agent says on its own answers

    @property
    def awaiting_commit(self) -> bool:
        """Words the caller said are waiting for the framework's end-of-turn decision (a pending turn, or words that
        reached it after it had committed the turn they were said in: its next turn)."""
        return self._pending_turn() is not None or bool(self._uncommitted)

    @property
    def reply(self) -> Reply | None:
        """The reply of the speech that holds the floor."""
        return self.active.reply if self.active is not None else None

    # -- state machine -----------------------------------------------------------------------
    def transition(self, new: State, reason: str) -> bool:
        old = self.state
        if new == old:
            return True
        if new not in LEGAL[old]:
            self.illegal_transitions += 1
            logger.warning(
                "illegal transition %s -> %s (%s) ignored [turn %s]", old.value, new.value, reason, self._turn_id()
            )
            return False
        self.state = new
        self.transitions.append((self.clock(), old, new, reason))
        logger.debug("%s -> %s (%s) [turn %s]", old.value, new.value, reason, self._turn_id())
        return True

    def _turn_id(self) -> str:
        if self.active is not None and self.active.turn is not None:
            return self.active.turn.turn_id
        cur = self.collector.current
        return cur.turn_id if cur is not None else "-"

    def _settle(self, reason: str) -> None:
        """Nothing holds the floor any more: HOLDING while a turn waits for its commit, else LISTENING."""
        self.transition(State.HOLDING if self._pending_turn() is not None else State.LISTENING, reason)

    def _pending_turn(self) -> TurnTrace | None:
        """The current user turn if it may still be committed: not committed, not finished, not failed with no words."""
        cur = self.collector.current
        if cur is None or cur.finished or cur.has(TURN_COMMITTED) or (cur.errors and not cur.user_text):
            return None
        return cur

    # -- the caller's speech -----------------------------------------------------------------
    def on_user_speech_started(self, t: float | None = None) -> None:
        t = self.clock() if t is None else t
        pending = self._pending_turn()
        utterance = self.utterances.started(t)
        logger.debug("utterance %d started (%s) [turn %s]", self.utterances.count, self.state.value, self._turn_id())
        overlapping = self.state in (State.SPEAKING, State.OVERLAPPED) and self.active is not None
        if overlapping and self.judge_overlaps and self.active.reply is not None:
            self._begin_overlap(utterance, t)
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
        return self._join_turn(utterance)

    def _join_turn(self, utterance: Utterance) -> TurnTrace:
        assert utterance.end is not None
        turn = utterance.continues
        if turn is not None and not turn.finished and not turn.has(TURN_COMMITTED):
            turn.end_of_speech(utterance.end, self.collector.wall(utterance.end))
        else:
            busy = self._answer_owed(self.collector.current)
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
            self._judge_overlap(utterance, overlap_kind(text))
        if not text.strip():
            utterance.in_turn(self._no_words)

    def on_stt_failed(self, error: str) -> None:
        """STT failed for the next utterance in order: an overlap is judged as noise; a turn gets the error."""
        utterance = self.utterances.outcome("", self.clock())
        if utterance is None:
            return
        if utterance.overlap is not None and utterance.overlap.verdict is None:
            self._judge_overlap(utterance, OverlapKind.EMPTY)
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
                self._owed_apology = turn
                self.on_turn_failed(turn)  # a turn with no words at all: the call apologises

        utterance.in_turn(fail)

    def _no_words(self, turn: TurnTrace) -> None:
        """An utterance of `turn` came back without words: if the turn has none at all, it is over."""
        if turn.user_text or turn.finished:
            turn.no_new_words()
            return
        turn.mark("stt_done")
        if not any(sp.turn is turn and sp.live for sp in self._speeches.values()):
            if turn.outcome is Outcome.OPEN:
                turn.outcome = Outcome.NO_TRANSCRIPT
            if turn is self.collector.current and not turn.errors:
                self.collector.finish(turn)
        if self.state is State.HOLDING and self.active is None:
            self.transition(State.LISTENING, "no words")

    def on_transcript(self, text: str) -> bool:
        """A final transcript is about to reach the framework: True to let it through (its words join the turn),
        False to drop it (an overlap judged a backchannel or a noise: no turn, no answer)."""
        utterance = self.utterances.next_transcript()
        if utterance is not None and utterance.overlap is not None:
            if utterance.overlap.verdict is None:
                self._judge_overlap(utterance, overlap_kind(text))
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
        for speech in self._speeches.values():  # prepared on words that reached no turn of ours until now
            if speech.turn is None and speech.live and not speech.is_scheduled():
                speech.turn = turn
                if speech.reply is not None and speech.reply.turn is None:
                    speech.reply.turn = turn
        if self.state in (State.HOLDING, State.LISTENING, State.INTERRUPTING):
            self.transition(State.THINKING, "turn committed")
        early = self._answer_of(turn)
        if early is not None and early.reply is not None and self.active is None:
            self.active = early  # prepared before the commit: the answer from now on (if the framework keeps it)
        try:  # the framework makes (or schedules) the answer right after this hook returns, in the same loop step
            asyncio.get_running_loop().call_soon(self._unless_answered, turn)
        except RuntimeError:  # no loop (unit tests drive the controller directly)
            pass
        return turn

    def _unless_answered(self, turn: TurnTrace) -> None:
        """Right after a commit: the framework made no answer for it (it kept an early answer that was cut)."""
        if self.state is State.THINKING and self.active is None and self._answer_of(turn) is None:
            self._settle("committed with no answer to come")

    def _turn_of(self, utterances: list[Utterance]) -> TurnTrace:
        """A user turn of these utterances (the framework committed their words as one)."""
        first, last = utterances[0], utterances[-1]
        busy = self._answer_owed(self.collector.current)
        self.collector.speech_started(first.start)
        turn = self.collector.open_turn(last.end if last.end is not None else self.clock(), hold_previous=busy)
        turn.user_text = " ".join(u.text or "" for u in utterances).strip()
        for utterance in utterances:
            utterance.turn = turn
        if last.stt_request is not None:
            turn.mark("stt_request", min(last.stt_request, turn.t0))
        turn.mark("stt_done", last.stt_done)
        return turn

    def _answer_owed(self, turn: TurnTrace | None) -> bool:
        """`turn` still has an answer on its way (a live speech, or an apology not said yet): keep it open."""
        if turn is None:
            return False
        return turn is self._owed_apology or any(sp.turn is turn and sp.live for sp in self._speeches.values())

    def _answer_of(self, turn: TurnTrace) -> Speech | None:
        return next((sp for sp in self._speeches.values() if sp.turn is turn and sp.answering), None)

    def on_turn_decision(self, details: dict[str, Any]) -> None:
        """How the end of turn was judged (agent/turn/end_of_turn.py): kept on the pending turn's trace."""
        cur = self.collector.current
        if cur is not None and not cur.finished:
            cur.turn_decision = details

    def _discard_early_answers(self, turn: TurnTrace, reason: str) -> None:
        early = [sp for sp in self._speeches.values() if sp.turn is turn and sp.live and not sp.is_scheduled()]
        for speech in early:
            self._discard(speech, reason)
        if early and self.drop_early_answer is not None:
            self.drop_early_answer()

    def _discard(self, speech: Speech, reason: str) -> None:
        speech.discarded = True
        reply = speech.reply
        if speech.turn is not None:
            started = reply.points.get("llm_request") if reply is not None else None
            speech.turn.discarded.append(Discarded(started=started or self.clock(), reason=reason))
        if reply is not None and not reply.closed:
            reply.done = True  # nothing of it was heard; its tasks end with its speech
        if self.active is speech:
            self.active = None

    # -- overlaps ----------------------------------------------------------------------------
    def _begin_overlap(self, utterance: Utterance, t: float) -> None:
        assert self.active is not None
        record = OverlapRecord(onset=t)
        if self.active.turn is not None:
            self.active.turn.overlaps.append(record)
        utterance.overlap = Overlap(speech=self.active, record=record)
        self.overlaps.append(utterance.overlap)
        if self.state is State.SPEAKING:
            if self.output is not None:
                self.output.duck()
            self.transition(State.OVERLAPPED, "caller speaks over the answer")

    def _judge_overlap(self, utterance: Utterance, kind: OverlapKind, verdict: str | None = None) -> None:
        """The overlap's words are known: a request cuts the answer it overlapped (and the utterance becomes a user
        turn); a backchannel or a noise leaves it playing, back at full level once no overlap is left open."""
        overlap = utterance.overlap
        assert overlap is not None
        logger.debug("overlap judged %s (%s) [turn %s]", verdict or kind.value, self.state.value, self._turn_id())
        overlap.verdict = kind
        overlap.record.verdict = verdict or kind.value
        overlap.record.decided = self.clock()
        overlap.record.text_chars = len((utterance.text or "").strip())
        if overlap in self.overlaps:
            self.overlaps.remove(overlap)
        speech = overlap.speech
        playing = speech.live and speech.reply is not None and not speech.reply.closed
        if kind is OverlapKind.REQUEST:
            if playing and verdict is None:
                self.interrupt(source="words", reply=speech.reply)
                speech.interrupt()
            if utterance.end is not None and utterance.turn is None:
                self._join_turn(utterance)
            return
        overlap.record.restored = playing
        if not self.overlaps:
            if self.output is not None:
                self.output.restore()
            if self.state is State.OVERLAPPED:
                self.transition(State.SPEAKING, f"overlap was a {kind.value}")

    def _overlap_cut(self, speech: Speech) -> None:
        """The framework cut an answer that was overlapped (the caller spoke longer than the interruption minimum):
        each open overlap of it was a barge-in, and its utterance a user turn."""
        for utterance in self.utterances:
            overlap = utterance.overlap
            if overlap is not None and overlap.speech is speech and overlap.verdict is None:
                self._judge_overlap(utterance, OverlapKind.REQUEST, verdict="long")

    def _answer_gone(self, speech: Speech) -> None:
        """The overlapped answer ended (played out, or its speech ended): nothing is left to duck. Its open overlaps
        are still judged when their words come (a backchannel's transcript is dropped all the same)."""
        if any(o.speech is speech for o in self.overlaps):
            self.overlaps = [o for o in self.overlaps if o.speech is not speech]
            if self.output is not None:
                self.output.restore()

    # -- speeches (the framework's SpeechHandle lifecycle) -----------------------------------
    def _answerable_turn(self) -> TurnTrace | None:
        cur = self.collector.current
        if cur is None or cur.finished or not (cur.user_text or cur.errors):
            return None
        if any(sp.turn is cur and sp.answering for sp in self._speeches.values()):
            return None  # another speech already answers it
        return cur

    def on_speech_created(
        self,
        key: str,
        *,
        is_interrupted: Callable[[], bool] = lambda: False,
        source: Callable[[], str | None] = lambda: None,
        is_scheduled: Callable[[], bool] = lambda: True,
        interrupt: Callable[[], None] = lambda: None,
        said: bool = False,
    ) -> Speech:
        """A speech exists (before any of its nodes run): `is_interrupted` reads its live interrupted flag, `source`
        the framework's interrupt source, `is_scheduled` whether it is the turn's answer yet (an early answer is not
        until its turn is committed), `interrupt` asks the framework to interrupt it. `said`: the agent says it on its
        own (`session.say`: the apology), so it answers the failed turn that owed it, whatever came since."""
        turn = self._answerable_turn()
        if said and self._owed_apology is not None:
            owed, self._owed_apology = self._owed_apology, None
            turn = owed if not owed.finished else turn
        speech = Speech(key, turn, is_interrupted, source, is_scheduled, interrupt)
        logger.debug("speech %s created%s for turn %s", key, " (said)" if said else "", turn.turn_id if turn else "-")
        self._speeches[key] = speech
        return speech

    def on_speech_interrupted(self, key: str, t: float | None = None) -> None:
        """The framework interrupted speech `key`: cascade now if its reply exists, else remember it."""
        speech = self._speeches.get(key)
        if speech is None:
            return
        t = self.clock() if t is None else t
        if speech.interrupted_at is None:
            speech.interrupted_at = t
        if speech.source() is None and not speech.is_scheduled():
            return  # an early answer thrown away (on_speech_done records it)
        self._overlap_cut(speech)
        if speech.reply is not None and not speech.discarded:
            self.interrupt(source=speech.cause(), reply=speech.reply, t=t)

    def on_speech_done(self, key: str, *, interrupted: bool) -> None:
        """The speech is over (its tasks all ended): so is its reply, whatever did or did not reach us."""
        speech = self._speeches.pop(key, None)
        if speech is None:
            return
        speech.done = True
        self._answer_gone(speech)
        early = interrupted and speech.source() is None and not speech.is_scheduled()
        if early and not speech.discarded:
            self._discard(speech, "transcript changed")
        if speech.discarded:  # a committed turn's answer then comes with the framework's next speech
            if self.active is speech:
                self.active = None
            self._settle_if_idle("early answer dropped")
            return
        reply = speech.reply
        if reply is None:
            if interrupted and speech.turn is not None:
                reply = self._closed_reply(speech)  # cut before any node ran: the turn was interrupted, nothing said
            elif speech.turn is not None and speech.turn is not self.collector.current:
                self.collector.finish(speech.turn)  # held for this speech, which never made a reply
            if reply is None:
                return
        if interrupted and reply.interruption is None and not reply.done:
            self.interrupt(source=speech.cause(), reply=reply)
        if not reply.done:
            self._end_reply(reply)
        if self.active is speech:
            self.active = None
        self._settle_if_idle("speech done")

    def _settle_if_idle(self, reason: str) -> None:
        """No answer holds or awaits the floor any more (the framework makes a committed turn's next speech before
        the last one ends, so a turn still to be answered keeps THINKING)."""
        if self.active is not None or self.state not in (
            State.INTERRUPTING, State.THINKING, State.SPEAKING, State.OVERLAPPED
        ):
            return
        cur = self.collector.current
        if self.state is State.THINKING and cur is not None and self._answer_of(cur) is not None:
            return
        self._settle(reason)

    def _closed_reply(self, speech: Speech) -> Reply:
        """A reply for a speech interrupted before it existed: registered, cut at once, never active."""
        reply = Reply(reply_id=speech.key, turn=speech.turn)
        speech.reply = reply
        self.interrupt(source=speech.cause(), reply=reply, t=speech.interrupted_at)
        reply.done = True
        return reply

    def _end_reply(self, reply: Reply) -> None:
        """Close a reply whose speech ended without its playout reaching us (no audio, or cut): its turn is over,
        unless it was cut while still the current turn (the barge-in utterance that follows finishes it)."""
        reply.done = True
        turn = reply.turn
        if turn is None or turn.finished:
            return
        if reply.interruption is None:
            reply.adopted_by_turn()
            if turn.outcome is Outcome.OPEN:
                if reply.frames_published:
                    turn.outcome = Outcome.ANSWERED
                else:
                    turn.errors.append("reply: the speech ended without audio")
                    turn.outcome = Outcome.ERROR
            self.collector.finish(turn)
        elif turn is not self.collector.current:
            self.collector.finish(turn)

    # -- agent side --------------------------------------------------------------------------
    def begin_reply(self, key: str) -> Reply:
        """Called when a speech starts its LLM or TTS node; both nodes of one speech share one reply, open or
        closed. A speech already interrupted gets a closed reply (`reply.closed`): its nodes must produce nothing."""
        speech = self._speeches.get(key)
        if speech is None:  # a node outside any speech the controller saw (e.g. a test's bare node call)
            speech = self._speeches[key] = Speech(key, self._answerable_turn())
        if speech.reply is not None:
            return speech.reply
        if speech.interrupted_at is not None or speech.is_interrupted() or speech.discarded:
            if speech.discarded or (speech.source() is None and not speech.is_scheduled()):
                speech.reply = Reply(reply_id=key, turn=None, done=True)
                return speech.reply
            return self._closed_reply(speech)
        reply = Reply(reply_id=key, turn=speech.turn)
        speech.reply = reply
        if speech.turn is not None and speech.is_scheduled():
            self._take_floor(speech, "reply started")
        return reply

    def _take_floor(self, speech: Speech, reason: str) -> None:
        if self.active is speech:
            return
        self.active = speech
        turn = speech.turn
        if self.state in (State.LISTENING, State.HOLDING) and turn is not None and turn.has(TURN_COMMITTED):
            self.transition(State.THINKING, reason)

    def _speech_of_reply(self, reply_id: str) -> Speech | None:
        return self._speeches.get(reply_id)

    def reply_by_key(self, key: str) -> Reply | None:
        speech = self._speeches.get(key)
        return speech.reply if speech is not None else None

    def frame_allowed(self, reply_id: str) -> bool:
        """May a frame of this reply be captured now? Reads the speech's live `interrupted` flag, so a frame that
        races the interruption's notification is dropped (and the cascade runs now)."""
        speech = self._speech_of_reply(reply_id)
        if speech is None or speech.reply is None:
            return True
        if speech.reply.interruption is not None or speech.discarded:
            return False
        if speech.is_interrupted():
            self.on_speech_interrupted(speech.key)
            return False
        return True

    def on_frame_published(self, reply_id: str, t: float) -> None:
        speech = self._speech_of_reply(reply_id)
        reply = speech.reply if speech is not None else None
        if speech is None or reply is None:
            return
        reply.frames_published += 1
        if reply.interruption is not None:
            # the output's gate should have made this impossible; count it, it is what we measure
            if reply.interruption.audio_silenced is not None and t > reply.interruption.audio_silenced:
                reply.interruption.stale_frames_after_cancel += 1
            return
        if reply.frames_published == 1:
            if reply.turn is not None:
                reply.adopted_by_turn()
                reply.turn.mark("first_frame_published", t)
            self.active = speech
            if self.state in (State.THINKING, State.LISTENING, State.HOLDING):
                self.transition(State.SPEAKING, "first frame published")

    def on_playout_gap(self, reply_id: str, gap_s: float) -> None:
        speech = self._speech_of_reply(reply_id)
        turn = speech.turn if speech is not None else None
        if turn is not None:
            turn.playout_gaps += 1
            turn.playout_gap_ms += gap_s * 1000.0

    def on_playout_finished(self, reply_id: str, interrupted: bool) -> None:
        speech = self._speech_of_reply(reply_id)
        reply = speech.reply if speech is not None else None
        if speech is None or reply is None or reply.done:
            return
        reply.done = True
        if interrupted and reply.interruption is None:
            self.interrupt(source="clear_buffer", reply=reply)
        if reply.interruption is None and reply.turn is not None:
            reply.adopted_by_turn()  # its text counts grew after the first frame: the whole answer was sent
            if reply.turn.outcome is Outcome.OPEN:
                reply.turn.outcome = Outcome.ANSWERED
            self.collector.finish(reply.turn)
        self._answer_gone(speech)
        if self.active is speech:
            self.active = None
            if self.state in (State.SPEAKING, State.THINKING, State.OVERLAPPED, State.INTERRUPTING):
                self._settle("playout finished")

    def on_reply_error(self, reply: Reply, error: str) -> None:
        """The reply's LLM or TTS failed (the speech goes on: an apology, or what was said so far): its turn records
        it. An early answer thrown away has no turn to tell."""
        speech = self._speeches.get(reply.reply_id)
        if reply.turn is None or (speech is not None and speech.discarded) or reply.turn.finished:
            return
        reply.turn.errors.append(error)
        reply.turn.outcome = Outcome.ERROR

    def on_clear_buffer(self, reply_id: str | None) -> None:
        speech = self._speech_of_reply(reply_id) if reply_id else self.active
        reply = speech.reply if speech is not None else None
        if reply is not None and reply.interruption is None and not reply.done:
            self.interrupt(source="clear_buffer", reply=reply)

    # -- barge-in ----------------------------------------------------------------------------
    def interrupt(
        self, *, source: str = "vad", reply: Reply | None = None, t: float | None = None
    ) -> Interruption | None:
        """The cascade. Idempotent per reply; a no-op when nothing is being generated or played."""
        reply = reply or self.reply
        if reply is None or reply.interruption is not None:
            return None
        t_detect = self.clock() if t is None else t
        irq = Interruption(interrupt_detected=t_detect, source=source)
        reply.interruption = irq
        if self.reply is reply and self.state in (State.THINKING, State.SPEAKING, State.OVERLAPPED):
            self.transition(State.INTERRUPTING, f"barge-in ({source})")
        # 1. silence: gate closed + queued audio dropped
        irq.audio_silenced = self.output.silence(reply.reply_id) if self.output is not None else self.clock()
        irq.frames_published = reply.frames_published
        # 2. engine streams (GPU work stops when the producer's finally closes the stream)
        pending_tts = [task for task in reply.tts_tasks if not task.done()]
        for task in pending_tts:
            task.cancel()
        irq.tts_cancelled = bool(pending_tts)
        # 3. LLM streams
        for closer in reply.llm_closers:
            try:
                result = closer()
                if asyncio.iscoroutine(result):
                    asyncio.ensure_future(result)
                irq.llm_cancelled = True
            except Exception:  # closing a dead stream must not break the cascade
                logger.exception("closing LLM stream failed [turn %s]", reply.turn_id)
        reply.llm_closers.clear()
        turn = reply.turn
        if turn is not None:
            reply.adopted_by_turn()
            turn.interruptions.append(irq)
            turn.outcome = Outcome.INTERRUPTED
            if turn is not self.collector.current:
                self.collector.finish(turn)  # held open for this reply
        self.interruptions.append((reply, irq))
        logger.info(
            "barge-in [turn %s]: silenced in %.2f ms, tts_cancelled=%s llm_cancelled=%s",
            reply.turn_id,
            (irq.audio_silenced - t_detect) * 1000.0,
            irq.tts_cancelled,
            irq.llm_cancelled,
        )
        return irq

    def close(self) -> None:
        if self.reply is not None and not self.reply.done:
            self.interrupt(source="session_closed")
        self.collector.close()
