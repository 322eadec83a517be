"""Which caller the agent listens to when callers come and go in one room.

Contract: `follow_callers(room, session, on_empty)` (the worker calls it once the session has started in the
room) keeps the session's room input linked to the caller who joined last among those still in the room:
- a caller joins: the agent listens to them from then on;
- the caller it listens to leaves, for any reason: it listens to the newest caller still there; if none is
  left, `on_empty()` runs (the worker ends the job, so the agent leaves the room).
A caller is a remote participant of a kind LiveKit's room input accepts (standard, SIP, connector); agents are
not callers. The session's room options turn LiveKit's own close-on-disconnect off (`agent.voice.room_options`):
this module decides when the call is over.

Why: LiveKit links the session to the first caller and, when that caller goes, waits for the same identity
to come back (and closes the session only for a few disconnect reasons). A person whose tab crashed and who
joins the same named room again gets a new identity, while their old connection lingers until the server
times it out (~20 s). The agent kept listening to the silent old connection, then to nobody, and the person
sat in a silent call until they left. With the newest caller followed they are heard at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from livekit import rtc

from agent import livekit_internals

logger = logging.getLogger("agent.callers")

CALLER_KINDS = (
    rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD,
    rtc.ParticipantKind.PARTICIPANT_KIND_SIP,
    rtc.ParticipantKind.PARTICIPANT_KIND_CONNECTOR,
)


def is_caller(participant: rtc.RemoteParticipant) -> bool:
    return participant.kind in CALLER_KINDS


class CallerFollower:
    """Links `room_io` (the session's `RoomIO`) to the newest caller; see the module docstring."""

    def __init__(self, room: rtc.Room, room_io: Any, on_empty: Callable[[], None]) -> None:
        self.room, self.room_io, self.on_empty = room, room_io, on_empty
        self.joined: list[str] = [p.identity for p in room.remote_participants.values() if is_caller(p)]
        self.linked: str | None = None
        room.on("participant_connected", self._on_joined)
        room.on("participant_disconnected", self._on_left)
        if self.joined:
            self._link(self.joined[-1])

    def _link(self, identity: str) -> None:
        if identity != self.linked:
            self.linked = identity
            self.room_io.set_participant(identity)
            logger.info("room %s: listening to %s", self.room.name, identity)

    def _on_joined(self, participant: rtc.RemoteParticipant) -> None:
        if is_caller(participant):
            self.joined = [i for i in self.joined if i != participant.identity] + [participant.identity]
            self._link(participant.identity)

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        if participant.identity not in self.joined:
            return
        self.joined.remove(participant.identity)
        if participant.identity != self.linked:
            return
        if self.joined:
            self._link(self.joined[-1])
        else:
            self.linked = None
            logger.info("room %s: the last caller left, ending the call", self.room.name)
            self.on_empty()

    def detach(self) -> None:
        self.room.off("participant_connected", self._on_joined)
        self.room.off("participant_disconnected", self._on_left)


def follow_callers(room: rtc.Room, session: Any, on_empty: Callable[[], None]) -> CallerFollower | None:
    """Start following; None (LiveKit's first-caller link, warned once) where the session's RoomIO is gone."""
    room_io = livekit_internals.session_room_io(session)
    return None if room_io is None else CallerFollower(room, room_io, on_empty)
