"""The floor of one call as a state machine: its states, the whole table of legal moves, and the floor's protocol.

- `State`: each one lasts until an event ends it, so a handler can observe it.
  - LISTENING: the agent is silent and owes no answer (the caller may be talking).
  - HOLDING: the caller stopped and their turn is not committed yet: the end of turn is being confirmed
    (agent/turn/end_of_turn.py), and an answer may already be prepared on the transcript, unheard.
  - THINKING: the turn is committed; its answer is being prepared, nothing heard yet.
  - SPEAKING: the answer is playing.
  - OVERLAPPED: the caller speaks over the answer: its voice is ducked while the overlap is judged
    (agent/turn/overlaps.py).
  - INTERRUPTING: the answer was cut (silenced at once) and its speech is still winding down.
- `LEGAL[old]` is every state `old` may move to; the controller logs, counts and ignores any other move.
- `Floor` is what the parts of turn-taking (overlaps, the reply's life) may ask of the controller that holds the
  floor: a protocol, so they name no class of it and nothing imports round in a circle.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agent.tracing import Interruption, TraceCollector, TurnTrace
    from agent.turn.reply import Reply, Silenceable
    from agent.turn.speeches import Speeches
    from agent.turn.utterances import Utterance, Utterances


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


class Floor(Protocol):
    """The controller as its parts see it (agent/turn/controller.py `DuplexController` is the one implementation)."""

    collector: TraceCollector
    clock: Callable[[], float]
    state: State
    output: Silenceable | None
    speeches: Speeches
    utterances: Utterances

    def transition(self, new: State, reason: str) -> bool: ...

    def settle(self, reason: str) -> None: ...

    def turn_id(self) -> str: ...

    def join_turn(self, utterance: Utterance) -> TurnTrace: ...

    def interrupt(
        self, *, source: str = "vad", reply: Reply | None = None, t: float | None = None
    ) -> Interruption | None: ...
