"""Which agent keeps a room (agent/one_agent.py), on participants as LiveKit's rtc SDK describes them: the order
is LiveKit's join time, then the identity; only agents of our own name count. The real path (LiveKit's server,
the agent guard, a worker joining late) is tests/call/test_one_agent.py."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from livekit import rtc
from livekit.agents.types import ATTRIBUTE_AGENT_NAME

from agent.one_agent import earlier_agent, watch_for_earlier

AGENT, STANDARD = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT, rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD


def person(identity: str, joined_s: float, kind: int = AGENT, name: str = "voice-agent") -> SimpleNamespace:
    joined = datetime.datetime.fromtimestamp(joined_s, tz=datetime.UTC)
    attributes = {ATTRIBUTE_AGENT_NAME: name} if kind == AGENT else {}
    return SimpleNamespace(identity=identity, joined_at=joined, kind=kind, attributes=attributes)


class Room(SimpleNamespace):
    def on(self, event: str, callback) -> None:
        self.handlers = {**getattr(self, "handlers", {}), event: callback}

    def off(self, event: str, callback) -> None:
        self.handlers.pop(event, None)


def room(me: SimpleNamespace, *others: SimpleNamespace) -> Room:
    return Room(local_participant=me, remote_participants={p.identity: p for p in others})


def test_the_earliest_agent_of_ours_keeps_the_room() -> None:
    me = person("agent-AJ_b", 100.0)
    assert earlier_agent(room(me, person("user-1", 90.0, STANDARD)), "voice-agent") is None  # callers do not count
    assert earlier_agent(room(me, person("agent-AJ_c", 101.0)), "voice-agent") is None  # it joined after me
    assert earlier_agent(room(me, person("agent-AJ_z", 99.0), person("agent-AJ_y", 98.0)), "voice-agent") == (
        "agent-AJ_y"
    )
    assert earlier_agent(room(me, person("agent-AJ_a", 100.0)), "voice-agent") == "agent-AJ_a"  # a tie: identity
    assert earlier_agent(room(me, person("agent-AJ_x", 50.0, name="transcriber")), "voice-agent") is None


def test_a_racing_earlier_agent_seen_after_connecting_is_reported_once() -> None:
    me = person("agent-AJ_b", 100.0)
    r = room(me)
    found: list[str] = []
    stop = watch_for_earlier(r, "voice-agent", found.append)
    r.handlers["participant_connected"](person("agent-AJ_later", 101.0))
    r.handlers["participant_connected"](person("agent-AJ_early", 99.5))
    r.handlers["participant_connected"](person("agent-AJ_earlier", 99.0))
    assert found == ["agent-AJ_early"]
    stop()
    assert "participant_connected" not in r.handlers
