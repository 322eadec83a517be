"""The framework's speeches as turn-taking sees them: one `Speech` record each, the turn it answers and its reply.

- Every speech the framework creates becomes a `Speech` (agent/turn/reply_life.py registers it before any of its nodes
  runs) bound to the user turn it answers; its `Reply` hangs on it once a node runs. Its `interrupted`, `scheduled`
  and interrupt-source flags are read live from the framework's handle through the callables it was made with.
- `Speeches` is the call's registry: by key, the speech whose answer holds the floor (`active`), the failed turn
  that the agent's next speech of its own answers (`owed_apology`), and the questions the controller asks of them
  (which speech answers a turn, which early answers a turn has, which still owe one).
- `discard(speech, reason)`: an answer prepared early and thrown away before it was scheduled is recorded on its turn
  as discarded, never as an interruption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agent.tracing import Discarded, TurnTrace
from agent.turn.reply import Reply

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

    @property
    def early(self) -> bool:
        """Live and prepared before its turn was committed (not yet scheduled to be heard)."""
        return self.live and not self.is_scheduled()

    def cause(self) -> str:
        return CAUSES.get(str(self.source()), "interrupted")


class Speeches:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._by_key: dict[str, Speech] = {}
        self.active: Speech | None = None  # the speech whose answer holds the floor (THINKING .. INTERRUPTING)
        self.owed_apology: TurnTrace | None = None  # the failed turn the next speech the agent says on its own answers

    def __iter__(self) -> Iterator[Speech]:
        return iter(list(self._by_key.values()))

    def add(self, speech: Speech) -> Speech:
        self._by_key[speech.key] = speech
        return speech

    def get(self, key: str) -> Speech | None:
        return self._by_key.get(key)

    def pop(self, key: str) -> Speech | None:
        return self._by_key.pop(key, None)

    def answer_of(self, turn: TurnTrace) -> Speech | None:
        """The speech that answers `turn` now, if one does."""
        return next((sp for sp in self._by_key.values() if sp.turn is turn and sp.answering), None)

    def owe_answer(self, turn: TurnTrace) -> bool:
        """A live speech of `turn` is on its way."""
        return any(sp.turn is turn and sp.live for sp in self._by_key.values())

    def answer_owed(self, turn: TurnTrace | None) -> bool:
        """`turn` still has an answer on its way (a live speech, or an apology not said yet): keep it open."""
        return turn is not None and (turn is self.owed_apology or self.owe_answer(turn))

    def early_of(self, turn: TurnTrace | None) -> list[Speech]:
        """The answers prepared for `turn` (None: on words that reached no turn yet) and not yet scheduled."""
        return [sp for sp in self._by_key.values() if sp.turn is turn and sp.early]

    def discard(self, speech: Speech, reason: str) -> None:
        speech.discarded = True
        reply = speech.reply
        if speech.turn is not None:
            started = reply.points.get("llm_request") if reply is not None else None
            speech.turn.discarded.append(Discarded(started=started or self.clock(), reason=reason))
        if reply is not None and not reply.closed:
            reply.done = True  # nothing of it was heard; its tasks end with its speech
        if self.active is speech:
            self.active = None
