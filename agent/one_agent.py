"""One agent per room: the agent whose call began first keeps it, a later one leaves without a word.

Contract
- `OneAgent(room, agent_name)`: this job's claim on its room. Other agents count when they are ours (kind agent,
  LiveKit's `lk.agent.name` attribute equal to ours). Who keeps the room, in order:
  1. an agent in a call (its `CALL_STARTED` attribute, Unix ms on its worker's clock) before one not in a call,
     and the earlier start between two in a call;
  2. between agents not in a call yet, LiveKit's `joined_at` (the server's clock: every agent agrees);
  3. the smaller identity.
- `earlier()`: the identity of the agent of ours that keeps the room ahead of this one, or None.
- `start_call()`: marks this agent's call as begun now; returns the attribute to publish (with the others the
  worker sets), so that every agent that later comes ranks behind it.
- `watch(on_found)`: calls `on_found(identity)` once when an agent ahead of this one shows up after the check:
  one that joins (two joins racing), one whose attributes change (its call start arrives after its join), and
  every agent present after the room reconnects (a new LiveKit server). Returns the function that stops it.

Why: a room can be dispatched more than once. The agent guard (token_server/agent_guard.py) dispatches again when
no agent has joined after its grace time, and LiveKit's dispatch API shows a dispatch's job only once its agent is
in the room, so a worker that took the job but joins late looks to the guard like no worker at all. And after
LiveKit's server restarts, the caller's page makes the room again on the new server: its token dispatches a new
job, which can join before the call's own agent has reconnected. Join order alone then kept the newcomer and both
stayed (docs/operations.md "LiveKit restarts mid-call"); the call's start keeps the agent that holds the
conversation.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from livekit import rtc
from livekit.agents.types import ATTRIBUTE_AGENT_NAME
from livekit.rtc.room import EventTypes

CALL_STARTED = "voice_agent.call_started_ms"

Rank = tuple[int, float, str]


def _call_started(participant: rtc.Participant) -> float | None:
    try:
        return float(participant.attributes[CALL_STARTED])
    except (KeyError, ValueError):
        return None


def _rank(participant: rtc.Participant, call_started_ms: float | None) -> Rank:
    if call_started_ms is not None:
        return (0, call_started_ms, participant.identity)
    joined = participant.joined_at
    return (1, joined.timestamp() if joined is not None else float("inf"), participant.identity)


class OneAgent:
    def __init__(self, room: rtc.Room, agent_name: str) -> None:
        self.room = room
        self.agent_name = agent_name
        self.call_started_ms: float | None = None

    def start_call(self) -> dict[str, str]:
        self.call_started_ms = round(time.time() * 1000.0)
        return {CALL_STARTED: str(int(self.call_started_ms))}

    def _ours(self, participant: rtc.RemoteParticipant) -> bool:
        return (
            participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
            and participant.attributes.get(ATTRIBUTE_AGENT_NAME) == self.agent_name
        )

    def _ahead(self, participant: rtc.RemoteParticipant) -> bool:
        mine = _rank(self.room.local_participant, self.call_started_ms)
        return self._ours(participant) and _rank(participant, _call_started(participant)) < mine

    def earlier(self) -> str | None:
        ahead = [p for p in self.room.remote_participants.values() if self._ahead(p)]
        return min(ahead, key=lambda p: _rank(p, _call_started(p))).identity if ahead else None

    def watch(self, on_found: Callable[[str], None]) -> Callable[[], None]:
        fired = False

        def found(identity: str | None) -> None:
            nonlocal fired
            if identity is not None and not fired:
                fired = True
                on_found(identity)

        def on_connected(participant: rtc.RemoteParticipant) -> None:
            found(participant.identity if self._ahead(participant) else None)

        def on_attributes(_changed: dict[str, str], participant: rtc.RemoteParticipant) -> None:
            if participant.identity != self.room.local_participant.identity:  # ours changes too
                on_connected(participant)

        def on_reconnected() -> None:
            found(self.earlier())

        handlers: dict[EventTypes, Callable[..., None]] = {
            "participant_connected": on_connected,
            "participant_attributes_changed": on_attributes,
            "reconnected": on_reconnected,
        }
        for event, handler in handlers.items():
            self.room.on(event, handler)

        def stop() -> None:
            for event, handler in handlers.items():
                self.room.off(event, handler)

        return stop
