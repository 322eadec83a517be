"""Which caller the agent listens to when callers come and go in one room, and when its call ends.

Contract: `follow_callers(room, session, on_empty=...)` (the worker calls it once the session has started in the
room) keeps the session's room input linked to one caller, the one the agent talks with, and says which on the
agent's participant attribute `CALLER_ATTRIBUTE` (the identity; "" while none), so each page in the room can tell
its person whether the agent is theirs (web/app.js):
- the first caller is linked; a caller who joins while the agent talks with someone else waits (the agent does not
  switch mid-question, and nobody's words are published under another's identity), except the same person coming
  back: the same identity (LiveKit resumed them), or the same non-empty participant name (a new tab of theirs,
  while the old connection lingers);
- the linked caller leaves: the caller who has waited longest is linked; if none is left, `on_empty` is called
  once no caller has joined for `CALLER_GONE_END_S` (the worker ends the job: its call slot is free at once,
  instead of when LiveKit closes the room, 5-20 s later). A caller who joins within that time is linked and the
  call goes on. Only while the agent's own connection is up: when LiveKit restarts, the agent's SDK reconnects
  and reports every caller gone meanwhile, and they come back after it, each on its SDK's own back-off
  (livekit-client retries after 0.3, 1.2, 2.7, 4.8, 7 s); so once the agent is reconnected its callers get
  `CALLER_RECONNECT_WAIT_S` to come back (found by tests/call/test_livekit_restart.py: the call was ended
  mid-restart, then 1 s after the agent was back, before the page was). An agent that arrives to a room
  without a caller waits for LiveKit to close it, as before.
A caller is a remote participant of a kind LiveKit's room input accepts (standard, SIP, connector); agents are
not callers. The session's room options turn LiveKit's own close-on-disconnect off (`agent.voice.room_options`).

Why: LiveKit links the session to the first caller and, when that caller goes, waits for the same identity to
come back, while a person who joins again gets a new identity. Following the newest caller instead (this module
until issue 43) made a second person in the room take the agent over mid-question. A tab closed without Leave
now leaves the room on `pagehide` (web/app.js); one that crashed lingers until LiveKit times it out (~20 s), and a
new tab of that person is heard at once only under the same name.

Closing: when LiveKit closes a room the agent waits in, the server tears down the agent's connection, and LiveKit's
rtc SDK (1.1.21) may log "publisher data channel '<label>' closed unexpectedly" at ERROR, once per data channel,
when the channels close before it has handled the server's leave message (a race: some hang-ups, not all). That
is the room closing as designed, so `RoomClosingFilter` (on the `livekit` logger) turns exactly those records
into INFO while a room of this process has no caller left; at any other time they stay ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
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


CONNECTED = rtc.ConnectionState.CONN_CONNECTED
CALLER_ATTRIBUTE = "voice_agent.caller"
#: with no caller left, the call ends this long after the last one left
CALLER_GONE_END_S = 1.0
#: after the agent's own reconnection (LiveKit restarted), how long its callers have to come back
CALLER_RECONNECT_WAIT_S = 10.0


class CallerFollower:
    """Links `room_io` (the session's `RoomIO`) to one caller; see the module docstring."""

    def __init__(self, room: rtc.Room, room_io: Any, *, on_empty: Callable[[], None] | None = None,
                 end_after_s: float = CALLER_GONE_END_S,
                 reconnect_wait_s: float = CALLER_RECONNECT_WAIT_S) -> None:  # fmt: skip
        self.room, self.room_io = room, room_io
        self.on_empty, self.end_after_s, self.reconnect_wait_s = on_empty, end_after_s, reconnect_wait_s
        self.waiting: list[str] = []  # callers in the room, in the order they joined (the linked one included)
        self.linked: str | None = None
        self._end_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._had_caller = False  # the call ends after its last caller only once it had one
        room.on("participant_connected", self._on_joined)
        room.on("participant_disconnected", self._on_left)
        room.on("reconnected", self._on_reconnected)
        _followers.add(self)
        for participant in room.remote_participants.values():
            self._on_joined(participant)
        if self.linked is None:
            self._link(None)

    def _link(self, identity: str | None) -> None:
        if self._end_timer is not None:
            self._end_timer.cancel()
            self._end_timer = None
        self.linked = identity
        self._publish(identity or "")
        if identity is not None:
            self._had_caller = True
            self.room_io.set_participant(identity)
            others = [i for i in self.waiting if i != identity]
            logger.info("room %s: listening to %s%s", self.room.name, identity,
                        f" ({len(others)} other caller(s) wait)" if others else "")  # fmt: skip
        elif self.on_empty is not None and self._had_caller:
            logger.info("room %s: no caller left; the call ends in %.1fs unless one joins", self.room.name,
                        self.end_after_s)  # fmt: skip
            self._arm_end()
        else:
            logger.info("room %s: no caller left; waiting for the next until the room closes", self.room.name)

    def _arm_end(self, after_s: float | None = None) -> None:
        if self._end_timer is not None:
            self._end_timer.cancel()
        wait_s = self.end_after_s if after_s is None else after_s
        self._end_timer = asyncio.get_running_loop().call_later(wait_s, self._end, wait_s)

    def _connected(self) -> bool:
        return getattr(self.room, "connection_state", CONNECTED) == CONNECTED

    def _end(self, waited_s: float) -> None:
        self._end_timer = None
        if self.linked is not None or self.on_empty is None:
            return
        if not self._connected():  # the agent's own connection is down: its callers' departures are not news
            logger.info("room %s: no caller, but the agent is reconnecting to LiveKit: the call waits",
                        self.room.name)  # fmt: skip
            return  # _on_reconnected starts the wait again
        logger.info("room %s: no caller for %.1fs: ending the call", self.room.name, waited_s)
        self.on_empty()

    def _on_reconnected(self, *_args: Any) -> None:
        if self.linked is None and self.on_empty is not None and self._had_caller:
            logger.info("room %s: reconnected with no caller here yet; the call ends in %.1fs unless one comes back",
                        self.room.name, self.reconnect_wait_s)  # fmt: skip
            self._arm_end(self.reconnect_wait_s)

    def _publish(self, identity: str) -> None:
        local = getattr(self.room, "local_participant", None)
        if local is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(local.set_attributes({CALLER_ATTRIBUTE: identity}))
        except RuntimeError:  # no loop: not in a live room
            return
        self._tasks.add(task)
        task.add_done_callback(self._published)

    def _published(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("room %s: cannot publish %s: %r", self.room.name, CALLER_ATTRIBUTE, task.exception())

    def _same_person(self, participant: rtc.RemoteParticipant) -> bool:
        linked = self.room.remote_participants.get(self.linked) if self.linked else None
        name = getattr(participant, "name", "")
        return linked is not None and bool(name) and name == getattr(linked, "name", None)

    def _on_joined(self, participant: rtc.RemoteParticipant) -> None:
        if not is_caller(participant) or participant.identity in self.waiting:
            return
        self.waiting.append(participant.identity)
        if self.linked is None or self._same_person(participant):
            self._link(participant.identity)
        else:
            logger.info("room %s: %s joined while the agent talks with %s; they wait", self.room.name,
                        participant.identity, self.linked)  # fmt: skip

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        if participant.identity not in self.waiting:
            return
        self.waiting.remove(participant.identity)
        if participant.identity == self.linked:
            self._link(self.waiting[0] if self.waiting else None)


def install_room_closing_filter() -> None:
    """Once per process (the worker calls it at import)."""
    rtc_logger = logging.getLogger("livekit")
    if not any(isinstance(f, RoomClosingFilter) for f in rtc_logger.filters):
        rtc_logger.addFilter(RoomClosingFilter())


def follow_callers(room: rtc.Room, session: Any, on_empty: Callable[[], None] | None = None) -> CallerFollower | None:
    """Start following; None (LiveKit's first-caller link, warned once) where the session's RoomIO is gone."""
    room_io = livekit_internals.session_room_io(session)
    return None if room_io is None else CallerFollower(room, room_io, on_empty=on_empty)
