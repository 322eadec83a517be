"""agent/callers.py: the session listens to the newest caller still in the room, and waits for the next one when
the last leaves. A room made of LiveKit's own event emitter with participants as the SDK describes them; the
real-server version (callers rejoining a named room) is tests/call/test_callers.py."""

from __future__ import annotations

from types import SimpleNamespace

from livekit import rtc

from agent.callers import CallerFollower

STANDARD, AGENT = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD, rtc.ParticipantKind.PARTICIPANT_KIND_AGENT


class FakeRoom(rtc.EventEmitter):
    def __init__(self, *identities: str) -> None:
        super().__init__()
        self.name = "room"
        self.remote_participants = {i: person(i) for i in identities}

    def join(self, identity: str, kind: int = STANDARD) -> None:
        self.remote_participants[identity] = participant = person(identity, kind)
        self.emit("participant_connected", participant)

    def leave(self, identity: str) -> None:
        self.emit("participant_disconnected", self.remote_participants.pop(identity))


class FakeRoomIO:
    def __init__(self) -> None:
        self.links: list[str] = []

    def set_participant(self, identity: str) -> None:
        self.links.append(identity)


def person(identity: str, kind: int = STANDARD) -> SimpleNamespace:
    return SimpleNamespace(identity=identity, kind=kind)


def follower(*identities: str) -> tuple[FakeRoom, FakeRoomIO]:
    room, room_io = FakeRoom(*identities), FakeRoomIO()
    CallerFollower(room, room_io)
    return room, room_io


def test_a_new_caller_is_heard_at_once_and_the_agent_goes_back_when_they_leave() -> None:
    room, room_io = follower("alice")
    assert room_io.links == ["alice"]
    room.join("alice-again")  # the same person, new tab: the old connection lingers until the server drops it
    assert room_io.links == ["alice", "alice-again"]
    room.leave("alice-again")
    assert room_io.links == ["alice", "alice-again", "alice"]


def test_a_caller_who_is_not_heard_leaves_without_changing_anything() -> None:
    room, room_io = follower("alice", "bob")
    assert room_io.links == ["bob"]
    room.leave("alice")
    assert room_io.links == ["bob"]


def test_agents_are_not_callers_and_after_the_last_caller_the_next_one_is_heard() -> None:
    room, room_io = follower()
    assert room_io.links == []
    room.join("avatar", AGENT)
    room.join("alice")
    room.leave("avatar")
    assert room_io.links == ["alice"]
    room.leave("alice")  # pressed Leave ...
    room.join("alice-again")  # ... and Join, in the same named room, before LiveKit closed it
    assert room_io.links == ["alice", "alice-again"]


def test_the_sdks_data_channel_error_is_info_only_while_a_room_waits_to_close() -> None:
    import gc
    import logging

    from agent.callers import RoomClosingFilter

    def record(message: str) -> logging.LogRecord:
        # as livekit.rtc's FFI client logs the Rust SDK's records: "%s:%s:%s - %s" (target, line, module, message)
        args = ("livekit::rtc_engine::rtc_session", 704, "livekit::rtc_engine::rtc_session", message)
        return logging.LogRecord("livekit", logging.ERROR, __file__, 1, "%s:%s:%s - %s", args, None)

    gc.collect()  # followers of earlier tests (a room and its follower hold each other) are gone
    closing = "publisher data channel '_reliable' closed unexpectedly"
    room, _ = follower("alice")
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
