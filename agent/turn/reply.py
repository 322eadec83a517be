"""Reply: one agent answer (one framework speech) and what the barge-in cascade must cancel for it.

- A reply collects the closers of its LLM streams and its TTS producer tasks while it runs; once it is cut
  (`interruption` set) anything registered later is closed or cancelled at once, so a stream that opens after
  the barge-in cannot outlive it. `closed` is the single question every producer asks before doing more work.
- `reply_id` is its speech's id: frames carry it (`userdata["reply_id"]`), and the controller finds the reply on
  the speech record it hangs on (agent/turn/controller.py `Speech.reply`).
- `points` holds the answer's own LLM/TTS trace points (`mark`): an answer prepared early, before its turn was
  committed, may be thrown away, so they become the turn's only when it is the turn's answer
  (agent/tracing.py `TurnTrace.adopt`).
- `Silenceable` is what the controller needs of the audio output: cut one reply (close its gate, clear the
  queued audio), duck the voice while the caller speaks over it, and restore it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.tracing import ANSWER_POINTS, Interruption, TurnTrace


class Silenceable(Protocol):
    replies: Any  # whom the output reports its frames, playout and clears to (agent/turn/reply_life.py; set for it)

    def silence(self, reply_id: str) -> float:
        """Close the gate for `reply_id`, clear queued audio; return the perf_counter time it was done."""
        ...

    def duck(self) -> float:
        """Lower the agent's voice from now on, queued audio included; return the perf_counter time."""
        ...

    def restore(self) -> float:
        """Back to full level; return the perf_counter time."""
        ...


@dataclass
class Reply:
    """One agent answer (one speech): what must be cancelled on barge-in and what it published."""

    reply_id: str
    turn: TurnTrace | None
    llm_closers: list[Callable[[], Any]] = field(default_factory=list)
    tts_tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    frames_published: int = 0
    interruption: Interruption | None = None
    done: bool = False
    points: dict[str, float] = field(default_factory=dict)
    chars: int = 0  # reply text handed to TTS
    segments: int = 0  # engine streams (TextBridge segments) it used

    @property
    def closed(self) -> bool:
        """Nothing more of this reply may be generated or played (finished or cut)."""
        return self.done or self.interruption is not None

    def mark(self, point: str, t: float) -> None:
        """The answer reached `point` (one of the trace's answer points); the first mark wins."""
        if point not in ANSWER_POINTS:
            raise ValueError(f"{point!r} is not an answer point ({', '.join(ANSWER_POINTS)})")
        self.points.setdefault(point, t)

    def adopted_by_turn(self) -> None:
        """This reply is its turn's answer: the turn takes its points and counts."""
        if self.turn is not None:
            self.turn.adopt(self.reply_id, self.points, self.chars, self.segments)

    def add_llm_stream(self, closer: Callable[[], Any]) -> None:
        """Register an LLM stream for the cascade; one opened after the cut is closed at once."""
        if self.interruption is None:
            self.llm_closers.append(closer)
            return
        result = closer()
        if asyncio.iscoroutine(result):
            asyncio.ensure_future(result)

    def add_tts_task(self, task: asyncio.Task[Any]) -> None:
        """Register a TTS producer for the cascade; one started after the cut is cancelled at once."""
        if self.interruption is None:
            self.tts_tasks.add(task)
        else:
            task.cancel()

    @property
    def turn_id(self) -> str:
        return self.turn.turn_id if self.turn is not None else f"reply-{self.reply_id}"
