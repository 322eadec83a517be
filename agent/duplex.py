"""DuplexController: the call's turn-taking state machine and the barge-in cancel cascade.

States: LISTENING -> THINKING (user turn ended / LLM started) -> SPEAKING (first agent frame published)
-> LISTENING (playout finished). A barge-in moves THINKING/SPEAKING -> INTERRUPTING, runs the cascade,
then -> LISTENING. `LEGAL` is the whole transition table; an illegal move is logged with the turn id,
counted in `illegal_transitions` and ignored (a call must never crash on a state bug), and every event
handler lands in a state that accepts the next event, so the machine cannot get stuck.

Cascade on barge-in (`interrupt()`), in this order, all synchronous on the session's loop:
1. the audio output's gate for the current reply closes and the `rtc.AudioSource` queue is cleared
   (`audio_silenced` is stamped here: nothing of this reply is captured after it);
2. the reply's TTS producer tasks are cancelled: their `finally` closes the engine stream, which stops
   its GPU work and frees its slot;
3. the reply's LLM streams are closed (the HTTP stream to vLLM is dropped).
The framework then cancels its own tasks too (idempotent with ours). cancel->silence = step 1's stamp
minus the moment the framework's interrupt decision reached us.

Who calls what: `agent.voice` wires session events and node overrides to the `on_*` methods, the
audio output calls `on_frame_published` / `on_playout_finished` / `on_clear_buffer` / `frame_allowed`.

A reply lives exactly as long as its speech (the framework's `SpeechHandle`, keyed by its id):
`on_speech_created` registers the speech before any node runs, so an interruption that comes before the
reply exists (a barge-in 0 ms after the speech was created) is remembered and `begin_reply` then hands
out a reply that is already closed (nothing is generated, the state does not move to THINKING);
`on_speech_done` (the handle's done callback) closes whatever reply the speech still has open, so no
state outlives its speech, whichever task was cancelled where; `frame_allowed` reads the speech's own
`interrupted` flag before every frame, so no frame is captured after an interruption, even one whose
notification has not reached the controller yet.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from agent.reply import Reply, Silenceable
from agent.tracing import Interruption, TraceCollector, TurnTrace

logger = logging.getLogger("agent.duplex")


class State(enum.Enum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"
    INTERRUPTING = "interrupting"


LEGAL: dict[State, frozenset[State]] = {
    # LISTENING -> SPEAKING: agent-initiated speech (greeting, apology) that has no LLM step
    State.LISTENING: frozenset({State.THINKING, State.SPEAKING}),
    State.THINKING: frozenset({State.SPEAKING, State.LISTENING, State.INTERRUPTING}),
    State.SPEAKING: frozenset({State.LISTENING, State.INTERRUPTING}),
    # INTERRUPTING -> THINKING: the barge-in utterance ended before the cascade reported back
    State.INTERRUPTING: frozenset({State.LISTENING, State.THINKING}),
}


@dataclass
class _Speech:
    """A speech the framework created: the user turn it answers and its `interrupted` flag (read live)."""

    key: str
    turn: TurnTrace | None
    is_interrupted: Callable[[], bool]
    cause: Callable[[], str] = lambda: "interrupted"  # the framework's reason: vad | user_turn | api
    interrupted_at: float | None = None


class DuplexController:
    def __init__(
        self,
        collector: TraceCollector,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.collector = collector
        self.clock = clock
        self.state = State.LISTENING
        self.output: Silenceable | None = None
        self.reply: Reply | None = None
        self.illegal_transitions = 0
        self.transitions: list[tuple[float, State, State, str]] = []
        self.interruptions: list[tuple[Reply, Interruption]] = []
        self._replies: dict[str, Reply] = {}
        self._by_key: dict[str, Reply] = {}
        self._speeches: dict[str, _Speech] = {}
        self._stt_seq = 0
        self._pending_stt: dict[int, float] = {}
        self._pending_stt_outcome: dict[int, Callable[[], None]] = {}

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
        if self.reply is not None:
            return self.reply.turn_id
        cur = self.collector.current
        return cur.turn_id if cur is not None else "-"

    # -- user side ---------------------------------------------------------------------------
    def on_user_speech_started(self, t: float | None = None) -> None:
        self.collector.speech_started(t)

    def on_user_turn_ended(self, t: float | None = None) -> TurnTrace:
        prev = self.collector.current
        # a reply (or a speech about to make one) still answers the previous turn: it finishes that turn
        busy = prev is not None and (
            any(r.turn is prev and not r.done for r in self._by_key.values())
            or any(sp.turn is prev for sp in self._speeches.values())
        )
        turn = self.collector.open_turn(t, hold_previous=busy)
        pending = self._pending_stt.pop(turn.index, None)
        if pending is not None:
            turn.mark("stt_request", pending)
        if self.state in (State.LISTENING, State.INTERRUPTING):
            self.transition(State.THINKING, "user turn ended")
        outcome = self._pending_stt_outcome.pop(turn.index, None)
        if outcome is not None:
            outcome()
        return turn

    def on_stt_request(self, t: float) -> None:
        """The n-th utterance handed to STT belongs to the n-th user turn. The STT adapter calls STT right
        after emitting END_OF_SPEECH, often before that event reaches us, so the turn may not exist yet."""
        self._stt_seq += 1
        cur = self.collector.current
        if cur is not None and cur.index == self._stt_seq:
            cur.mark("stt_request", t)
        else:
            self._pending_stt[self._stt_seq] = t

    def after_stt_turn_opens(self, outcome: Callable[[], None]) -> None:
        """Run `outcome` (what an STT failure or an empty transcript does to the turn) once the turn of the latest
        STT request is open: a transcription sent at the pause (agent/early_stt.py) can end before its
        END_OF_SPEECH reaches us."""
        cur = self.collector.current
        if cur is not None and cur.index >= self._stt_seq:
            outcome()
        else:
            self._pending_stt_outcome[self._stt_seq] = outcome

    def on_stt_result(self, text: str) -> None:
        """An utterance transcribed to nothing (noise, a cough): the framework drops the empty transcript, so no
        event would say so, and the turn would stay THINKING until the next one."""
        if not text.strip():
            self.after_stt_turn_opens(lambda: self.on_transcript(""))

    def on_transcript(self, text: str) -> None:
        cur = self.collector.current
        if cur is not None:
            cur.user_text = text
            cur.mark("stt_done")
        if not text.strip() and self.state == State.THINKING and self.reply is None:
            self.transition(State.LISTENING, "empty transcript")

    # -- speeches (the framework's SpeechHandle lifecycle) -----------------------------------
    def _answerable_turn(self) -> TurnTrace | None:
        cur = self.collector.current
        if cur is None or cur.finished or cur.has("llm_request"):
            return None
        if any(r.turn is cur for r in self._by_key.values()):
            return None  # another speech already answers it
        return cur

    def on_speech_created(
        self,
        key: str,
        *,
        is_interrupted: Callable[[], bool] = lambda: False,
        cause: Callable[[], str] = lambda: "interrupted",
    ) -> None:
        """A speech exists (before any of its nodes run); `is_interrupted` reads its live interrupted flag,
        `cause` the reason the framework gave (recorded as the interruption's `source`)."""
        turn = self._answerable_turn()
        if turn is not None and any(sp.turn is turn for sp in self._speeches.values()):
            turn = None
        self._speeches[key] = _Speech(key, turn, is_interrupted, cause)

    def _cause(self, key: str) -> str:
        speech = self._speeches.get(key)
        return speech.cause() if speech is not None else "interrupted"

    def on_speech_interrupted(self, key: str, t: float | None = None) -> None:
        """The framework interrupted speech `key`: cascade now if its reply exists, else remember it."""
        speech = self._speeches.get(key)
        t = self.clock() if t is None else t
        if speech is not None and speech.interrupted_at is None:
            speech.interrupted_at = t
        reply = self._by_key.get(key)
        if reply is not None:
            self.interrupt(source=self._cause(key), reply=reply, t=t)

    def on_speech_done(self, key: str, *, interrupted: bool) -> None:
        """The speech is over (its tasks all ended): so is its reply, whatever did or did not reach us."""
        source = self._cause(key)
        speech = self._speeches.pop(key, None)
        reply = self._by_key.get(key)
        if reply is None:
            if speech is not None and interrupted and speech.turn is not None:
                # cut before any node ran: the turn it answered was interrupted, with nothing said
                reply = self._closed_reply(key, speech)
            else:
                if speech is not None and speech.turn is not None and speech.turn is not self.collector.current:
                    self.collector.finish(speech.turn)  # held for this speech, which never made a reply
                return
        if interrupted and reply.interruption is None and not reply.done:
            self.interrupt(source=source, reply=reply)
        if not reply.done:
            self._end_reply(reply, "speech done")
        self._by_key.pop(key, None)

    def _closed_reply(self, key: str, speech: _Speech) -> Reply:
        """A reply for a speech interrupted before it existed: registered, cut at once, never active."""
        reply = Reply(reply_id=uuid.uuid4().hex[:12], turn=speech.turn, speech_key=key)
        self._replies[reply.reply_id] = reply
        self._by_key[key] = reply
        self.interrupt(source=speech.cause(), reply=reply, t=speech.interrupted_at)
        reply.done = True
        self._release(reply.turn, "speech interrupted before its reply")
        return reply

    def _release(self, turn: TurnTrace | None, reason: str) -> None:
        """The current user turn will get no (more) reply: THINKING on its behalf ends."""
        if self.reply is None and self.state is State.THINKING and turn is not None and turn is self.collector.current:
            self.transition(State.LISTENING, reason)

    def _end_reply(self, reply: Reply, reason: str) -> None:
        """Close a reply whose speech ended without its playout reaching us (no audio, or cut)."""
        reply.done = True
        turn = reply.turn
        if reply.interruption is None and turn is not None and not turn.finished:
            if turn.outcome == "open":
                if reply.frames_published:
                    turn.outcome = "answered"
                else:
                    turn.errors.append("reply: the speech ended without audio")
                    turn.outcome = "error"
            self.collector.finish(turn)
        if self.reply is reply:
            self.reply = None
            if self.state is not State.LISTENING:
                self.transition(State.LISTENING, reason)
        else:
            self._release(turn, reason)

    # -- agent side --------------------------------------------------------------------------
    def begin_reply(self, key: str | None = None) -> Reply:
        """Called when a speech starts its LLM or TTS node; both nodes of one speech (same `key`, the
        speech id) share one reply, open or closed. Without a key the active reply is reused. A speech
        already interrupted gets a closed reply (`reply.closed`): its nodes must produce nothing."""
        existing = self._by_key.get(key) if key else self.reply
        if existing is not None and (key or not existing.closed):
            return existing
        speech = self._speeches.get(key) if key else None
        if speech is not None and (speech.interrupted_at is not None or speech.is_interrupted()):
            return self._closed_reply(key, speech)  # type: ignore[arg-type]
        turn = speech.turn if speech is not None and speech.turn is not None else self._answerable_turn()
        if turn is not None and (turn.finished or turn.has("llm_request")):
            turn = None
        reply = Reply(reply_id=uuid.uuid4().hex[:12], turn=turn, speech_key=key)
        self.reply = reply
        self._replies[reply.reply_id] = reply
        if key:
            self._by_key[key] = reply
        if self.state == State.LISTENING and turn is not None:
            self.transition(State.THINKING, "reply started")
        return reply

    def frame_allowed(self, reply_id: str) -> bool:
        """May a frame of this reply be captured now? Reads the speech's live `interrupted` flag, so a
        frame that races the interruption's notification is dropped (and the cascade runs now)."""
        reply = self._replies.get(reply_id)
        if reply is None:
            return True
        if reply.interruption is not None:
            return False
        speech = self._speeches.get(reply.speech_key) if reply.speech_key else None
        if speech is not None and speech.is_interrupted():
            self.on_speech_interrupted(speech.key)
            return False
        return True

    def reply_by_key(self, key: str) -> Reply | None:
        return self._by_key.get(key)

    def reply_for(self, reply_id: str) -> Reply | None:
        return self._replies.get(reply_id)

    def on_frame_published(self, reply_id: str, t: float) -> None:
        reply = self._replies.get(reply_id)
        if reply is None:
            return
        reply.frames_published += 1
        if reply.interruption is not None:
            # the output's gate should have made this impossible; count it, it is what we measure
            if reply.interruption.audio_silenced is not None and t > reply.interruption.audio_silenced:
                reply.interruption.stale_frames_after_cancel += 1
            return
        if reply.frames_published == 1:
            if reply.turn is not None:
                reply.turn.mark("first_frame_published", t)
            if self.state in (State.THINKING, State.LISTENING):
                self.transition(State.SPEAKING, "first frame published")

    def on_playout_gap(self, reply_id: str, gap_s: float) -> None:
        reply = self._replies.get(reply_id)
        if reply is not None and reply.turn is not None:
            reply.turn.playout_gaps += 1
            reply.turn.playout_gap_ms += gap_s * 1000.0

    def on_playout_finished(self, reply_id: str, interrupted: bool) -> None:
        reply = self._replies.get(reply_id)
        if reply is None or reply.done:
            return
        reply.done = True
        if interrupted and reply.interruption is None:
            self.interrupt(source="clear_buffer", reply=reply)
        if reply.interruption is None and reply.turn is not None:
            if reply.turn.outcome == "open":
                reply.turn.outcome = "answered"
            self.collector.finish(reply.turn)
        if self.reply is reply:
            self.reply = None
            if self.state in (State.SPEAKING, State.THINKING, State.INTERRUPTING):
                self.transition(State.LISTENING, "playout finished")

    def on_reply_failed(self, reply: Reply, error: str) -> None:
        """A reply produced no audio (LLM/TTS failure with nothing said): record it and listen again."""
        if reply.turn is not None:
            reply.turn.errors.append(error)
            reply.turn.outcome = "error"
        if self.reply is reply and reply.frames_published == 0:
            reply.done = True
            self.reply = None
            self.transition(State.LISTENING, "reply failed")

    def on_clear_buffer(self, reply_id: str | None) -> None:
        reply = self._replies.get(reply_id) if reply_id else self.reply
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
        if self.reply is reply:
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
        if reply.turn is not None:
            reply.turn.interruptions.append(irq)
            reply.turn.outcome = "interrupted"
            if reply.turn is not self.collector.current:
                self.collector.finish(reply.turn)  # held open for this reply (on_user_turn_ended)
        self.interruptions.append((reply, irq))
        if self.reply is reply:
            self.reply = None
            self.transition(State.LISTENING, "cascade done")
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
