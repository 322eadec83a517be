"""The reply's life: from the speech the framework creates to the last frame the caller hears, or the cut.

- Speeches: `on_speech_created` (before any node of it runs) binds the speech to the user turn it answers (an
  apology to the failed turn that owes it); `on_speech_interrupted` cascades at once if its reply exists, else
  remembers it; `on_speech_done` (its tasks all ended) closes whatever its reply still holds, so no state outlives
  its speech.
- ReplyLife: `begin_reply` when a speech starts its LLM or TTS node (both nodes share one reply, open or closed: a
  speech already interrupted gets a closed one and its nodes produce nothing); the answer takes the floor.
- Playout, as the audio output reports it (agent/output.py): `frame_allowed` reads the speech's live `interrupted`
  flag before every frame, so a frame that races the interruption is dropped; `on_frame_published` (the first one
  makes the turn SPEAKING), `on_playout_gap`, `on_playout_finished`, `on_clear_buffer`; `on_reply_error` records an
  LLM or TTS failure on the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.tracing import TURN_COMMITTED, Outcome, TurnTrace
from agent.turn.overlaps import Overlaps
from agent.turn.reply import Reply
from agent.turn.speeches import Speech
from agent.turn.states import Floor, State

logger = logging.getLogger("agent.turn.controller")  # a reply's life is part of the controller's story in the log


class ReplyLife:
    def __init__(self, floor: Floor, overlaps: Overlaps) -> None:
        self.floor = floor
        self.speeches = floor.speeches
        self.overlaps = overlaps

    # -- speeches (the framework's SpeechHandle lifecycle) -----------------------------------
    def answerable_turn(self) -> TurnTrace | None:
        cur = self.floor.collector.current
        if cur is None or cur.finished or not (cur.user_text or cur.errors):
            return None
        if self.speeches.answer_of(cur) is not None:
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
        speeches = self.speeches
        turn = self.answerable_turn()
        if said and speeches.owed_apology is not None:
            owed, speeches.owed_apology = speeches.owed_apology, None
            turn = owed if not owed.finished else turn
        speech = Speech(key, turn, is_interrupted, source, is_scheduled, interrupt)
        logger.debug("speech %s created%s for turn %s", key, " (said)" if said else "", turn.turn_id if turn else "-")
        return speeches.add(speech)

    def on_speech_interrupted(self, key: str, t: float | None = None) -> None:
        speech = self.speeches.get(key)
        if speech is None:
            return
        t = self.floor.clock() if t is None else t
        if speech.interrupted_at is None:
            speech.interrupted_at = t
        if speech.source() is None and not speech.is_scheduled():
            return  # an early answer thrown away (on_speech_done records it)
        self.overlaps.cut_by_framework(speech)
        if speech.reply is not None and not speech.discarded:
            self.floor.interrupt(source=speech.cause(), reply=speech.reply, t=t)

    def on_speech_done(self, key: str, *, interrupted: bool) -> None:
        speech = self.speeches.pop(key)
        if speech is None:
            return
        speech.done = True
        self.overlaps.answer_gone(speech)
        early = interrupted and speech.source() is None and not speech.is_scheduled()
        if early and not speech.discarded:
            self.speeches.discard(speech, "transcript changed")
        if speech.discarded:  # a committed turn's answer then comes with the framework's next speech
            if self.speeches.active is speech:
                self.speeches.active = None
            self.settle_if_idle("early answer dropped")
            return
        reply = speech.reply
        if reply is None:
            if interrupted and speech.turn is not None:
                reply = self._closed_reply(speech)  # cut before any node ran: the turn was interrupted, nothing said
            elif speech.turn is not None and speech.turn is not self.floor.collector.current:
                self.floor.collector.finish(speech.turn)  # held for this speech, which never made a reply
            if reply is None:
                return
        if interrupted and reply.interruption is None and not reply.done:
            self.floor.interrupt(source=speech.cause(), reply=reply)
        if not reply.done:
            self._end_reply(reply)
        if self.speeches.active is speech:
            self.speeches.active = None
        self.settle_if_idle("speech done")

    def settle_if_idle(self, reason: str) -> None:
        """No answer holds or awaits the floor any more (the framework makes a committed turn's next speech before
        the last one ends, so a turn still to be answered keeps THINKING)."""
        floor = self.floor
        if self.speeches.active is not None or floor.state not in (
            State.INTERRUPTING, State.THINKING, State.SPEAKING, State.OVERLAPPED
        ):
            return
        cur = floor.collector.current
        if floor.state is State.THINKING and cur is not None and self.speeches.answer_of(cur) is not None:
            return
        floor.settle(reason)

    def _closed_reply(self, speech: Speech) -> Reply:
        """A reply for a speech interrupted before it existed: registered, cut at once, never active."""
        reply = Reply(reply_id=speech.key, turn=speech.turn)
        speech.reply = reply
        self.floor.interrupt(source=speech.cause(), reply=reply, t=speech.interrupted_at)
        reply.done = True
        return reply

    def _end_reply(self, reply: Reply) -> None:
        """Close a reply whose speech ended without its playout reaching us (no audio, or cut): its turn is over,
        unless it was cut while still the current turn (the barge-in utterance that follows finishes it)."""
        reply.done = True
        turn, collector = reply.turn, self.floor.collector
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
            collector.finish(turn)
        elif turn is not collector.current:
            collector.finish(turn)

    # -- the reply and its playout -------------------------------------------------------
    def begin_reply(self, key: str) -> Reply:
        """Called when a speech starts its LLM or TTS node; both nodes of one speech share one reply, open or
        closed. A speech already interrupted gets a closed reply (`reply.closed`): its nodes must produce nothing."""
        speech = self.speeches.get(key)
        if speech is None:  # a node outside any speech the controller saw (e.g. a test's bare node call)
            speech = self.speeches.add(Speech(key, self.answerable_turn()))
        if speech.reply is not None:
            return speech.reply
        if speech.interrupted_at is not None or speech.is_interrupted() or speech.discarded:
            if speech.discarded or (speech.source() is None and not speech.is_scheduled()):
                speech.reply = Reply(reply_id=key, turn=None, done=True)
                return speech.reply
            return self._closed_reply(speech)
        reply = Reply(reply_id=key, turn=speech.turn)
        speech.reply = reply
        if speech.turn is not None and speech.is_scheduled() and self.speeches.active is not speech:
            self.speeches.active = speech
            if self.floor.state in (State.LISTENING, State.HOLDING) and speech.turn.has(TURN_COMMITTED):
                self.floor.transition(State.THINKING, "reply started")
        return reply

    def reply_by_key(self, key: str) -> Reply | None:
        speech = self.speeches.get(key)
        return speech.reply if speech is not None else None

    def frame_allowed(self, reply_id: str) -> bool:
        """May a frame of this reply be captured now? Reads the speech's live `interrupted` flag, so a frame that
        races the interruption's notification is dropped (and the cascade runs now)."""
        speech = self.speeches.get(reply_id)
        if speech is None or speech.reply is None:
            return True
        if speech.reply.interruption is not None or speech.discarded:
            return False
        if speech.is_interrupted():
            self.on_speech_interrupted(speech.key)
            return False
        return True

    def on_frame_published(self, reply_id: str, t: float) -> None:
        speech = self.speeches.get(reply_id)
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
            self.speeches.active = speech
            if self.floor.state in (State.THINKING, State.LISTENING, State.HOLDING):
                self.floor.transition(State.SPEAKING, "first frame published")

    def on_playout_gap(self, reply_id: str, gap_s: float) -> None:
        speech = self.speeches.get(reply_id)
        turn = speech.turn if speech is not None else None
        if turn is not None:
            turn.playout_gaps += 1
            turn.playout_gap_ms += gap_s * 1000.0

    def on_playout_finished(self, reply_id: str, interrupted: bool) -> None:
        speech = self.speeches.get(reply_id)
        reply = speech.reply if speech is not None else None
        if speech is None or reply is None or reply.done:
            return
        reply.done = True
        if interrupted and reply.interruption is None:
            self.floor.interrupt(source="clear_buffer", reply=reply)
        if reply.interruption is None and reply.turn is not None:
            reply.adopted_by_turn()  # its text counts grew after the first frame: the whole answer was sent
            if reply.turn.outcome is Outcome.OPEN:
                reply.turn.outcome = Outcome.ANSWERED
            self.floor.collector.finish(reply.turn)
        self.overlaps.answer_gone(speech)
        if self.speeches.active is speech:
            self.speeches.active = None
            if self.floor.state in (State.SPEAKING, State.THINKING, State.OVERLAPPED, State.INTERRUPTING):
                self.floor.settle("playout finished")

    def on_reply_error(self, reply: Reply, error: str) -> None:
        """The reply's LLM or TTS failed (the speech goes on: an apology, or what was said so far): its turn records
        it. An early answer thrown away has no turn to tell."""
        speech = self.speeches.get(reply.reply_id)
        if reply.turn is None or (speech is not None and speech.discarded) or reply.turn.finished:
            return
        reply.turn.errors.append(error)
        reply.turn.outcome = Outcome.ERROR

    def on_clear_buffer(self, reply_id: str | None) -> None:
        speech = self.speeches.get(reply_id) if reply_id else self.speeches.active
        reply = speech.reply if speech is not None else None
        if reply is not None and reply.interruption is None and not reply.done:
            self.floor.interrupt(source="clear_buffer", reply=reply)
