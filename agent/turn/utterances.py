"""Utterances: the caller's speech as the controller hears it, one VAD speech at a time, and what STT made of each.

- `Utterances.started(t)` / `ended(t)` follow the STT adapter's START/END_OF_SPEECH events; `request()` and
  `outcome()` follow its STT requests and outcomes. The adapter transcribes its utterances one after another, so the
  n-th request and the n-th outcome belong to the n-th utterance that started, whatever order the events reach us in
  (the early transcriber sends the words at the pause, before the end of speech; an empty outcome can precede it).
- `Utterance.in_turn(action)` runs `action` on the user turn the utterance joins, now or once it joins one; `attach`
  joins it and marks the STT request already made on that turn.
- `next_transcript()` pairs a final transcript the adapter emits with its utterance: the oldest one transcribed to
  words whose transcript has not gone on (the adapter emits nothing for an empty one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.tracing import TurnTrace

#: Utterances kept (an outcome older than this many utterances has no one to go to).
KEPT = 8


@dataclass
class Utterance:
    start: float
    end: float | None = None
    stt_request: float | None = None
    stt_done: float | None = None
    text: str | None = None  # None until STT's outcome is known ("" for none, or a failure)
    overlap: Any = None  # agent/turn/overlaps.py `Overlap` when it began over a playing answer
    continues: TurnTrace | None = None  # the pending turn it went on with (a pause held inside that turn)
    forwarded: bool = False  # its transcript went on to the framework (or was dropped)
    turn: TurnTrace | None = None
    when_in_turn: list[Callable[[TurnTrace], None]] = field(default_factory=list)

    def attach(self, turn: TurnTrace) -> None:
        self.turn = turn
        if self.stt_request is not None:
            turn.mark("stt_request", self.stt_request)
        for action in self.when_in_turn:
            action(turn)
        self.when_in_turn.clear()

    def in_turn(self, action: Callable[[TurnTrace], None]) -> None:
        """Run `action` on this utterance's turn, now or once it has one."""
        if self.turn is not None:
            action(self.turn)
        else:
            self.when_in_turn.append(action)


class Utterances:
    def __init__(self) -> None:
        self._kept: deque[Utterance] = deque(maxlen=KEPT)
        self.count = self._requests = self._outcomes = 0  # utterances started, STT requests, STT outcomes

    def __iter__(self) -> Iterator[Utterance]:
        return iter(list(self._kept))

    @property
    def latest(self) -> Utterance | None:
        return self._kept[-1] if self._kept else None

    @property
    def in_progress(self) -> bool:
        """The caller is speaking: the latest utterance has started and not ended."""
        return self.latest is not None and self.latest.end is None

    def started(self, t: float) -> Utterance:
        self.count += 1
        utterance = Utterance(start=t)
        self._kept.append(utterance)
        return utterance

    def ended(self, t: float) -> Utterance:
        """The latest utterance ended (an end with no start of its own, at close or after a lost event, makes one)."""
        last = self._kept[-1] if self._kept else None
        if last is None or last.end is not None:
            last = self.started(t)
        last.end = t
        return last

    def request(self, t: float) -> Utterance | None:
        self._requests += 1
        utterance = self._nth(self._requests)
        if utterance is not None:
            utterance.stt_request = t
            if utterance.turn is not None:
                utterance.turn.mark("stt_request", t)
        return utterance

    def outcome(self, text: str, t: float) -> Utterance | None:
        self._outcomes += 1
        utterance = self._nth(self._outcomes)
        if utterance is not None:
            utterance.text, utterance.stt_done = text, t
        return utterance

    def next_transcript(self) -> Utterance | None:
        for utterance in self._kept:
            if utterance.text and not utterance.forwarded:
                utterance.forwarded = True
                return utterance
        return None

    def _nth(self, n: int) -> Utterance | None:
        index = len(self._kept) - (self.count - n) - 1
        return self._kept[index] if 0 <= index < len(self._kept) else None
