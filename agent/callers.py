"""Which caller the agent listens to when callers come and go in one room.

Contract: `follow_callers(room, session)` (the worker calls it once the session has started in the room)
keeps the session's room input linked to the caller who joined last among those still in the room:
- a caller joins: the agent listens to them from then on;
- the caller it listens to leaves, for any reason: it listens to the newest caller still there; if none is
  left, it waits in the room for the next one. LiveKit closes a room that holds only agents after its
  departure timeout (scripts/local/livekit.yaml: 5 s; LiveKit's default 20 s), which disconnects the agent
  and ends the job.
A caller is a remote participant of a kind LiveKit's room input accepts (standard, SIP, connector); agents are
not callers. The session's room options turn LiveKit's own close-on-disconnect off (`agent.voice.room_options`).

Why: LiveKit links the session to the first caller and, when that caller goes, waits for the same identity
to come back. A person who joins the same named room again gets a new identity:
- after their tab died, their old connection lingers until the server times it out (~20 s): the agent kept
  listening to that silent connection, then to nobody;
- after pressing Leave, LiveKit closed the session at once while the agent stayed in the room until it
  closed, and a room is dispatched an agent only when it is created: a Join within those seconds found an
  agent that no longer listened.
Either way the person sat in a silent call. Following the newest caller, and staying until the room closes,
they are heard at once.

Closing: when LiveKit closes a room the agent waits in, the server tears down the agent's connection, and LiveKit's
rtc SDK (1.1.21) may log "publisher data channel '<label>' closed unexpectedly" at ERROR, once per data channel,
when the channels close before it has handled the server's leave message (a race: some hang-ups, not all). That
is the room closing as designed, so `RoomClosingFilter` (on the `livekit` logger) turns exactly those records
into INFO while a room of this process has no caller left; at any other time they stay ERROR.
"""

from __future__ import annotations

import logging
import re
import weakref
from typing import Any

from livekit import rtc

from agent import livekit_internals

logger = logging.getLogger("agent.callers")

CALLER_KINDS = (
    rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD,
    rtc.ParticipantKind.PARTICIPANT_KIND_SIP,
    rtc.ParticipantKind.PARTICIPANT_KIND_CONNECTOR,
)


_followers: weakref.WeakSet[CallerFollower] = weakref.WeakSet()
_CHANNEL_CLOSED = re.compile(r"publisher data channel '(_reliable|_lossy|_data_track)' closed unexpectedly$")


class RoomClosingFilter(logging.Filter):
    """The SDK's data-channel ERROR while a room waits for LiveKit to close it: INFO (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and _CHANNEL_CLOSED.search(record.getMessage()):
            if any(f.linked is None for f in list(_followers)):
                record.levelno, record.levelname = logging.INFO, "INFO"
                record.msg, record.args = "%s (the room is closing: expected)", (record.getMessage(),)
        return True


def is_caller(participant: rtc.RemoteParticipant) -> bool:
    return participant.kind in CALLER_KINDS


class CallerFollower:
    """Links `room_io` (the session's `RoomIO`) to the newest caller; see the module docstring."""

    def __init__(self, room: rtc.Room, room_io: Any) -> None:
        self.room, self.room_io = room, room_io
        self.joined: list[str] = [p.identity for p in room.remote_participants.values() if is_caller(p)]
        self.linked: str | None = None
        room.on("participant_connected", self._on_joined)
        room.on("participant_disconnected", self._on_left)
        _followers.add(self)
        self._follow()

    def _follow(self) -> None:
        """Link the newest caller still here (the one linked already: nothing to do)."""
        newest = self.joined[-1] if self.joined else None
        if newest == self.linked:
            return
        self.linked = newest
        if newest is None:
            logger.info("room %s: the last caller left; waiting for the next until the room closes", self.room.name)
        else:
            self.room_io.set_participant(newest)
            logger.info("room %s: listening to %s", self.room.name, newest)

    def _on_joined(self, participant: rtc.RemoteParticipant) -> None:
        if is_caller(participant):
            self.joined = [i for i in self.joined if i != participant.identity] + [participant.identity]
            self._follow()

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        if participant.identity in self.joined:
            self.joined.remove(participant.identity)
            self._follow()


def install_room_closing_filter() -> None:
    """Once per process (the worker calls it at import)."""
    rtc_logger = logging.getLogger("livekit")
    if not any(isinstance(f, RoomClosingFilter) for f in rtc_logger.filters):
        rtc_logger.addFilter(RoomClosingFilter())


def follow_callers(room: rtc.Room, session: Any) -> CallerFollower | None:
    """Start following; None (LiveKit's first-caller link, warned once) where the session's RoomIO is gone."""
    room_io = livekit_internals.session_room_io(session)
    return None if room_io is None else CallerFollower(room, room_io)
