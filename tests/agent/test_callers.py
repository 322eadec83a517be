"""agent/callers.py: the agent keeps talking with its caller while a second person in the room waits (and says
whom it talks with, in its participant attribute); the same person coming back takes over; when its caller leaves
the one who waited longest is heard; with nobody left the call ends a second later, unless someone joins first.
A room made of LiveKit's own event emitter with participants as the SDK describes them; the real-server version
is tests/call/test_callers.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from livekit import rtc

from agent.callers import CALLER_ATTRIBUTE, CallerFollower

STANDARD, AGENT = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD, rtc.ParticipantKind.PARTICIPANT_KIND_AGENT


class FakeLocal:
    def __init__(self) -> None:
        self.published: list[str] = []  # each value of CALLER_ATTRIBUTE set

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        self.published.append(attributes[CALLER_ATTRIBUTE])


class FakeRoom(rtc.EventEmitter):
    def __init__(self, *identities: str) -> None:
        super().__init__()
        self.name = "room"
        self.connection_state = rtc.ConnectionState.CONN_CONNECTED
        self.remote_participants = {i: person(i) for i in identities}
        self.local_participant = FakeLocal()

    def join(self, identity: str, kind: int = STANDARD, name: str = "") -> None:
        self.remote_participants[identity] = participant = person(identity, kind, name)
        self.emit("participant_connected", participant)

    def leave(self, identity: str) -> None:
        self.emit("participant_disconnected", self.remote_participants.pop(identity))

    def reconnecting(self) -> None:
        """LiveKit restarted: the SDK reconnects and reports every remote participant gone meanwhile."""
        self.connection_state = rtc.ConnectionState.CONN_RECONNECTING
        self.emit("reconnecting")
        for identity in list(self.remote_participants):
            self.leave(identity)

    def reconnected(self, *identities: str) -> None:
        self.connection_state = rtc.ConnectionState.CONN_CONNECTED
        self.emit("reconnected")
        for identity in identities:
            self.join(identity)


class FakeRoomIO:
    def __init__(self) -> None:
        self.links: list[str] = []

    def set_participant(self, identity: str) -> None:
        self.links.append(identity)


def person(identity: str, kind: int = STANDARD, name: str = "") -> SimpleNamespace:
    return SimpleNamespace(identity=identity, kind=kind, name=name)


def follower(*identities: str, end_after_s: float = 0.2,
             reconnect_wait_s: float = 0.5) -> tuple[FakeRoom, FakeRoomIO, list[float]]:  # fmt: skip
    """The room, what the session was linked to, and when the call was ended (loop time)."""
    room, room_io, ended = FakeRoom(*identities), FakeRoomIO(), []
    loop = asyncio.get_running_loop()
    CallerFollower(room, room_io, on_empty=lambda: ended.append(loop.time()),
                   end_after_s=end_after_s, reconnect_wait_s=reconnect_wait_s)  # fmt: skip
    return room, room_io, ended


async def test_a_second_person_waits_and_is_heard_once_the_first_leaves() -> None:
    room, room_io, ended = follower("alice")
    room.join("bob")  # another person in the same room, mid-call
    assert room_io.links == ["alice"]  # no switch: alice's question is answered, nothing published as bob's
    room.join("carol")
    room.leave("alice")
    assert room_io.links == ["alice", "bob"]  # the one who waited longest
    room.leave("carol")  # a waiting caller who leaves changes nothing
    assert room_io.links == ["alice", "bob"]
    await asyncio.sleep(0)
    assert room.local_participant.published == ["alice", "bob"]  # each page can tell whom the agent talks with
    assert ended == []


async def test_the_same_person_coming_back_takes_over() -> None:
    room, room_io, _ = follower()
    room.join("alice-1", name="Alice")
    room.join("alice-2", name="Alice")  # a new tab of hers while the old connection lingers
    room.join("someone", name="")  # no name: never taken for anyone
    room.join("bob", name="Bob")
    assert room_io.links == ["alice-1", "alice-2"]
    room.leave("alice-1")  # LiveKit drops the old connection at last: nothing changes
    assert room_io.links == ["alice-1", "alice-2"]


async def test_the_call_ends_soon_after_its_last_caller_unless_one_joins() -> None:
    room, room_io, ended = follower("alice", end_after_s=0.2)
    loop = asyncio.get_running_loop()
    room.leave("alice")  # pressed Leave, or the page was closed (it leaves on pagehide) ...
    await asyncio.sleep(0.1)
    room.join("alice-again")  # ... and a reload joined again: the call goes on
    await asyncio.sleep(0.3)
    assert room_io.links == ["alice", "alice-again"] and ended == []
    room.join("avatar", AGENT)  # agents are not callers: they keep no call alive
    left_at = loop.time()
    room.leave("alice-again")
    await asyncio.sleep(0.4)
    assert len(ended) == 1 and 0.2 <= ended[0] - left_at < 0.3, (ended, left_at)
    await asyncio.sleep(0)
    assert room.local_participant.published[-1] == ""


async def test_a_livekit_restart_does_not_end_the_call() -> None:
    """Seen on the whole stack: LiveKit restarted, the agent's SDK reported the caller gone while it reconnected,
    and the call was ended 1 s later, mid-restart. The wait counts only while the agent is connected."""
    room, room_io, ended = follower("alice", end_after_s=0.2, reconnect_wait_s=0.5)
    loop = asyncio.get_running_loop()
    room.reconnecting()
    await asyncio.sleep(0.4)  # longer than the wait: still reconnecting
    assert ended == []
    room.reconnected()  # back on the new server; she comes back on her SDK's back-off, later
    await asyncio.sleep(0.3)  # longer than end_after_s, within reconnect_wait_s
    room.join("alice")
    await asyncio.sleep(0.4)
    assert ended == [] and room_io.links == ["alice", "alice"]
    room.reconnecting()
    room.reconnected()  # back, and she never is: the call ends after reconnect_wait_s
    back_at = loop.time()
    await asyncio.sleep(0.7)
    assert len(ended) == 1 and 0.5 <= ended[0] - back_at < 0.6, (ended, back_at)


async def test_an_agent_that_finds_no_caller_waits_for_the_room_to_close() -> None:
    """A caller who left before the agent joined: nothing to end; LiveKit closes the empty room as before."""
    room, room_io, ended = follower(end_after_s=0.1)
    await asyncio.sleep(0.3)
    assert ended == [] and room_io.links == []
    room.join("bob")
    room.leave("bob")
    await asyncio.sleep(0.3)
    assert len(ended) == 1


async def test_the_sdks_data_channel_error_is_info_only_while_a_room_waits_to_close() -> None:
    import gc
    import logging

    from agent.callers import RoomClosingFilter

    def record(message: str) -> logging.LogRecord:
        # as livekit.rtc's FFI client logs the Rust SDK's records: "%s:%s:%s - %s" (target, line, module, message)
        args = ("livekit::rtc_engine::rtc_session", 704, "livekit::rtc_engine::rtc_session", message)
        return logging.LogRecord("livekit", logging.ERROR, __file__, 1, "%s:%s:%s - %s", args, None)

    gc.collect()  # followers of earlier tests (a room and its follower hold each other) are gone
    closing = "publisher data channel '_reliable' closed unexpectedly"
    room, _, _ = follower("alice", end_after_s=60)
    kept = record(closing)
    RoomClosingFilter().filter(kept)
    assert kept.levelno == logging.ERROR  # mid-call: a real fault, stays ERROR
    room.leave("alice")  # the last caller left: LiveKit closes the room after its departure timeout
    for label in ("_reliable", "_lossy", "_data_track"):
        demoted = record(closing.replace("_reliable", label))
        assert RoomClosingFilter().filter(demoted) and demoted.levelno == logging.INFO
        assert demoted.getMessage().endswith("closed unexpectedly (the room is closing: expected)")
    other = record("subscriber data channel '_reliable' closed unexpectedly")
    RoomClosingFilter().filter(other)
    assert other.levelno == logging.ERROR  # only exactly that message
    room.join("bob")
