"""Reply: one agent answer (one framework speech) and what the barge-in cascade must cancel for it.

A reply collects the closers of its LLM streams and its TTS producer tasks while it runs; once it is cut
(`interruption` set) anything registered later is closed or cancelled at once, so a stream that opens
after the barge-in cannot outlive it. `closed` is the single question every producer asks before doing
more work. `Silenceable` is what the controller needs of the audio output: close one reply's gate and
clear its queued audio. The controller that owns replies is `agent.duplex.DuplexController`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.tracing import Interruption, TurnTrace


class Silenceable(Protocol):
    def silence(self, reply_id: str) -> float:
        """Close the gate for `reply_id`, clear queued audio; return the perf_counter time it was done."""
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
    speech_key: str | None = None

    @property
    def closed(self) -> bool:
        """Nothing more of this reply may be generated or played (finished or cut)."""
        return self.done or self.interruption is not None

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
