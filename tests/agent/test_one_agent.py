"""Which agent keeps a room (agent/one_agent.py), on participants as LiveKit's rtc SDK describes them: an agent in
a call first (the earlier call start), then LiveKit's join time, then the identity; only agents of our own name
count. The real paths: tests/call/test_one_agent.py (the agent guard, a worker joining late) and
tests/call/test_livekit_restart.py (the page's room made again on a new server)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from livekit import rtc
from livekit.agents.types import ATTRIBUTE_AGENT_NAME

from agent.one_agent import CALL_STARTED, OneAgent

AGENT, STANDARD = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT, rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD


def person(identity: str, joined_s: float, kind: int = AGENT, name: str = "voice-agent",
           call_started_ms: int | None = None) -> SimpleNamespace:
    joined = datetime.datetime.fromtimestamp(joined_s, tz=datetime.UTC)
    attributes = {ATTRIBUTE_AGENT_NAME: name} if kind == AGENT else {}
    if call_started_ms is not None:
        attributes[CALL_STARTED] = str(call_started_ms)
    return SimpleNamespace(identity=identity, joined_at=joined, kind=kind, attributes=attributes)


class Room(SimpleNamespace):
    def on(self, event: str, callback) -> None:
        self.handlers = {**getattr(self, "handlers", {}), event: callback}

    def off(self, event: str, callback) -> None:
        self.handlers.pop(event, None)


def room(me: SimpleNamespace, *others: SimpleNamespace) -> Room:
    return Room(local_participant=me, remote_participants={p.identity: p for p in others})


def earlier_agent(r: Room, agent_name: str) -> str | None:
    return OneAgent(r, agent_name).earlier()


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
    stop = OneAgent(r, "voice-agent").watch(found.append)
    r.handlers["participant_connected"](person("agent-AJ_later", 101.0))
    r.handlers["participant_connected"](person("agent-AJ_early", 99.5))
    r.handlers["participant_connected"](person("agent-AJ_earlier", 99.0))
    assert found == ["agent-AJ_early"]
    stop()
    assert r.handlers == {}


def test_an_agent_in_a_call_keeps_the_room_ahead_of_an_earlier_join() -> None:
    """After a LiveKit restart the page's new room got a new agent before the call's own agent was back: the one
    whose call began first keeps the room, whatever the join order on the new server."""
    me = person("agent-AJ_new", 100.0)
    claim = OneAgent(room(me, person("agent-AJ_old", 105.0, call_started_ms=40_000)), "voice-agent")
    assert claim.earlier() == "agent-AJ_old"  # not in a call yet: any agent in one is ahead
    claim.call_started_ms = 100_000
    assert claim.earlier() == "agent-AJ_old"  # in a call since later
    claim.call_started_ms = 30_000
    assert claim.earlier() is None  # mine began first
    bad = person("agent-AJ_bad", 90.0)
    bad.attributes[CALL_STARTED] = "soon"
    assert OneAgent(room(person("agent-AJ_me", 100.0), bad), "voice-agent").earlier() == "agent-AJ_bad"  # join order


def test_start_call_publishes_the_start_and_ranks_this_agent_ahead_of_later_ones() -> None:
    me = person("agent-AJ_me", 100.0)
    claim = OneAgent(room(me, person("agent-AJ_joined_before", 99.0)), "voice-agent")
    assert claim.earlier() == "agent-AJ_joined_before"
    attrs = claim.start_call()
    assert float(attrs[CALL_STARTED]) == claim.call_started_ms and claim.earlier() is None


def test_the_watch_sees_a_call_start_that_arrives_late_and_the_agents_present_after_a_reconnect() -> None:
    me = person("agent-AJ_new", 100.0)
    r = room(me)
    claim = OneAgent(r, "voice-agent")
    claim.start_call()
    found: list[str] = []
    claim.watch(found.append)
    old = person("agent-AJ_old", 105.0)  # back on the new server, its attributes not yet published again
    r.handlers["participant_connected"](old)
    assert found == []
    old.attributes[CALL_STARTED] = "1000"  # its call began long before mine
    r.handlers["participant_attributes_changed"]({CALL_STARTED: "1000"}, old)
    assert found == ["agent-AJ_old"]
    r.handlers["participant_attributes_changed"]({CALL_STARTED: "1000"}, old)
    assert found == ["agent-AJ_old"]  # once

    found2: list[str] = []
    r2 = room(me)
    claim2 = OneAgent(r2, "voice-agent")
    claim2.start_call()
    claim2.watch(found2.append)
    r2.remote_participants["agent-AJ_held"] = person("agent-AJ_held", 99.0, call_started_ms=1000)
    r2.handlers["reconnected"]()  # no participant_connected needed: whoever is there after the reconnect counts
    assert found2 == ["agent-AJ_held"]
    r2.handlers["participant_attributes_changed"]({}, me)  # our own attributes never count
    assert found2 == ["agent-AJ_held"]
