"""One agent per room: the earliest of ours keeps the call, a later one leaves without a word.

Contract
- `earlier_agent(room, agent_name)`: the identity of another agent of ours in the room (kind agent, LiveKit's
  `lk.agent.name` attribute equal to ours) that joined before this one, or None. Join order is LiveKit's
  `joined_at` (the server's clock, so every agent in the room agrees); equal times go to the smaller identity.
- `watch_for_earlier(room, agent_name, on_found)`: calls `on_found(identity)` once if such an agent shows up
  after this one connected (two joins racing each other); returns the function that stops the watch.
- The worker checks right after connecting and before it says anything: a later agent shuts its job down at
  once, so the caller hears one voice and the worker's slot is free again.

Why: a room can be dispatched more than once. The agent guard (token_server/agent_guard.py) dispatches again
when no agent has joined after its grace time, and LiveKit's dispatch API shows a dispatch's job only once its
agent is in the room, so a worker that took the job but joins late (a loaded host: event-loop lags of seconds)
looks to the guard like no worker at all (docs/operations.md "Faults": a room dispatched twice).
"""

from __future__ import annotations

from collections.abc import Callable

from livekit import rtc
from livekit.agents.types import ATTRIBUTE_AGENT_NAME


def _ours(participant: rtc.RemoteParticipant, agent_name: str) -> bool:
    return (
        participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
        and participant.attributes.get(ATTRIBUTE_AGENT_NAME) == agent_name
    )


def _order(participant: rtc.Participant) -> tuple[float, str]:
    joined = participant.joined_at
    return (joined.timestamp() if joined is not None else float("inf"), participant.identity)


def _is_earlier(participant: rtc.RemoteParticipant, me: rtc.LocalParticipant, agent_name: str) -> bool:
    return _ours(participant, agent_name) and _order(participant) < _order(me)


def earlier_agent(room: rtc.Room, agent_name: str) -> str | None:
    me = room.local_participant
    earlier = [p for p in room.remote_participants.values() if _is_earlier(p, me, agent_name)]
    return min(earlier, key=_order).identity if earlier else None


def watch_for_earlier(room: rtc.Room, agent_name: str, on_found: Callable[[str], None]) -> Callable[[], None]:
    fired = False

    def on_connected(participant: rtc.RemoteParticipant) -> None:
        nonlocal fired
        if not fired and _is_earlier(participant, room.local_participant, agent_name):
            fired = True
            on_found(participant.identity)

    room.on("participant_connected", on_connected)
    return lambda: room.off("participant_connected", on_connected)
