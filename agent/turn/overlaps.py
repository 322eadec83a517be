"""Speech over a playing answer (`TURN_HANDLING=ours`): ducked at once, then judged from its words.

- `begin(utterance, t)`: an utterance that starts while an answer plays is an overlap of that answer: its voice is
  ducked (SPEAKING -> OVERLAPPED) and the overlap is recorded on the answer's turn.
- `judge(utterance, kind)`: once its words (or their absence) are known: a request cuts the answer it overlapped
  (the cascade, then the framework) and the utterance becomes a user turn; a backchannel or a noise leaves the
  answer playing, back at full level once no overlap is left open (OVERLAPPED -> SPEAKING).
- `cut_by_framework(speech)`: the framework cut an overlapped answer (the caller spoke longer than the interruption
  minimum): each open overlap of it was a barge-in. `answer_gone(speech)`: the answer ended; nothing is left to duck.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agent.tracing import OverlapRecord
from agent.turn.speeches import Speech
from agent.turn.states import Floor, State
from agent.turn.utterances import Utterance
from agent.turn.words import OverlapKind

logger = logging.getLogger("agent.turn.controller")  # overlaps are part of the controller's story in the log


@dataclass
class Overlap:
    """The caller spoke over an answer: judged once its words (or their absence) are known."""

    speech: Speech
    record: OverlapRecord
    verdict: OverlapKind | None = None


class Overlaps:
    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.open: list[Overlap] = []  # overlaps of the playing answer not judged yet (its voice is ducked)

    def begin(self, utterance: Utterance, speech: Speech, t: float) -> None:
        floor = self.floor
        record = OverlapRecord(onset=t)
        if speech.turn is not None:
            speech.turn.overlaps.append(record)
        utterance.overlap = Overlap(speech=speech, record=record)
        self.open.append(utterance.overlap)
        if floor.state is State.SPEAKING:
            if floor.output is not None:
                floor.output.duck()
            floor.transition(State.OVERLAPPED, "caller speaks over the answer")

    def judge(self, utterance: Utterance, kind: OverlapKind, verdict: str | None = None) -> None:
        floor, overlap = self.floor, utterance.overlap
        assert overlap is not None
        logger.debug("overlap judged %s (%s) [turn %s]", verdict or kind.value, floor.state.value, floor.turn_id())
        overlap.verdict = kind
        overlap.record.verdict = verdict or kind.value
        overlap.record.decided = floor.clock()
        overlap.record.text_chars = len((utterance.text or "").strip())
        if overlap in self.open:
            self.open.remove(overlap)
        speech = overlap.speech
        playing = speech.live and speech.reply is not None and not speech.reply.closed
        if kind is OverlapKind.REQUEST:
            if playing and verdict is None:
                floor.interrupt(source="words", reply=speech.reply)
                speech.interrupt()
            if utterance.end is not None and utterance.turn is None:
                floor.join_turn(utterance)
            return
        overlap.record.restored = playing
        if not self.open:
            if floor.output is not None:
                floor.output.restore()
            if floor.state is State.OVERLAPPED:
                floor.transition(State.SPEAKING, f"overlap was a {kind.value}")

    def cut_by_framework(self, speech: Speech) -> None:
        for utterance in self.floor.utterances:
            overlap = utterance.overlap
            if overlap is not None and overlap.speech is speech and overlap.verdict is None:
                self.judge(utterance, OverlapKind.REQUEST, verdict="long")

    def answer_gone(self, speech: Speech) -> None:
        """Its open overlaps are still judged when their words come (a backchannel's transcript is dropped all the
        same); only the ducking ends."""
        if any(o.speech is speech for o in self.open):
            self.open = [o for o in self.open if o.speech is not speech]
            if self.floor.output is not None:
                self.floor.output.restore()
