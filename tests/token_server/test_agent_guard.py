"""The agent guard (token_server/agent_guard.py): the webhook route refuses what LiveKit did not sign, and the
policy puts an agent back in a room whose agent left or never came, retrying while no worker takes the dispatch.

The policy runs here against `FakeRooms`, an in-memory model of the few LiveKit API answers the guard reads (who
is in a room, whether a dispatch has a job): a test double of the guard's own `Rooms` interface, not of LiveKit.
The real path (LiveKit's server, its webhooks, real workers) is tested in tests/call/test_worker_loss.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time

import pytest
from aiohttp import web
from livekit import api
from livekit.protocol.models import ParticipantInfo

from token_server import agent_guard
from token_server.agent_guard import AgentGuard, GuardConfig, Occupancy

FAST = GuardConfig(poll_s=0.2, join_grace_s=0.3, take_s=0.2, retry_s=0.1, retry_fast_s=0.3, retry_max_s=0.2,
                   arrival_s=1.0, worker_urls=())


def participant(identity: str, kind: int = ParticipantInfo.Kind.STANDARD) -> ParticipantInfo:
    return ParticipantInfo(identity=identity, kind=kind, joined_at_ms=int(time.time() * 1000))


class FakeRooms:
    """Rooms as LiveKit would answer; `workers` > 0 means a dispatch is taken and its agent joins `join_s` later."""

    def __init__(self, workers: int = 1, join_s: float = 0.05) -> None:
        self.people: dict[str, list[ParticipantInfo]] = {}
        self.workers = workers
        self.join_s = join_s
        self.dispatches: list[tuple[str, str, str]] = []  # (room, id, metadata)
        self.jobs: set[str] = set()

    async def rooms(self) -> list[str]:
        return [name for name, people in self.people.items() if people]

    async def occupancy(self, room: str) -> Occupancy | None:
        if room not in self.people:
            return None
        here = self.people[room]
        return Occupancy(
            callers=[p for p in here if p.kind != ParticipantInfo.Kind.AGENT],
            agents=[p for p in here if p.kind == ParticipantInfo.Kind.AGENT],
        )

    async def dispatch(self, room: str, agent_name: str, metadata: str) -> str:
        dispatch_id = f"AD_{len(self.dispatches)}"
        self.dispatches.append((room, dispatch_id, metadata))
        if self.workers > 0:
            self.jobs.add(dispatch_id)
            asyncio.get_running_loop().call_later(self.join_s, self.agent_joins, room, f"agent-{dispatch_id}")
        return dispatch_id

    async def taken(self, room: str, dispatch_ids: set[str]) -> bool:
        return bool(dispatch_ids & self.jobs)

    def agent_joins(self, room: str, identity: str) -> None:
        if room in self.people:
            self.people[room].append(participant(identity, ParticipantInfo.Kind.AGENT))

    def agent_leaves(self, room: str) -> None:
        self.people[room] = [p for p in self.people[room] if p.kind != ParticipantInfo.Kind.AGENT]

    async def aclose(self) -> None:
        pass


async def until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def reasons(rooms: FakeRooms) -> list[str]:
    return [json.loads(meta)["voice_agent"]["recovery"] for _, _, meta in rooms.dispatches]


async def test_an_agent_that_left_a_caller_is_replaced_at_once() -> None:
    rooms = FakeRooms()
    rooms.people["r1"] = [participant("user-1"), participant("agent-old", ParticipantInfo.Kind.AGENT)]
    guard = AgentGuard(rooms, "voice-agent", FAST)
    rooms.agent_leaves("r1")
    t0 = time.monotonic()
    guard.agent_left("r1")
    await until(lambda: guard.finished)
    assert time.monotonic() - t0 < 1.0  # no grace for a lost agent
    assert guard.finished[0].outcome == "recovered" and guard.finished[0].attempts == 1
    assert [room for room, _, _ in rooms.dispatches] == ["r1"] and reasons(rooms) == ["agent_lost"]
    assert any(p.identity == "agent-AD_0" for p in rooms.people["r1"])


async def test_no_dispatch_when_no_caller_is_left_or_an_agent_is_there() -> None:
    rooms = FakeRooms()
    rooms.people["empty"] = []  # the last caller left; the agent leaving is the room closing
    rooms.people["served"] = [participant("user-1"), participant("agent-1", ParticipantInfo.Kind.AGENT)]
    guard = AgentGuard(rooms, "voice-agent", FAST)
    guard.agent_left("empty")
    guard.agent_left("served")
    guard.agent_left("gone")  # LiveKit closed it already
    await until(lambda: len(guard.finished) == 3)
    assert rooms.dispatches == []
    assert {r.outcome for r in guard.finished} == {"not_needed"}


async def test_a_caller_gets_the_grace_time_before_the_guard_dispatches() -> None:
    rooms = FakeRooms()
    rooms.people["on-time"] = [participant("user-1")]
    rooms.people["forgotten"] = [participant("user-2")]  # created while no worker was registered
    guard = AgentGuard(rooms, "voice-agent", FAST)
    guard.caller_joined("on-time")
    guard.caller_joined("forgotten")
    await asyncio.sleep(FAST.join_grace_s / 3)
    assert rooms.dispatches == []
    rooms.agent_joins("on-time", "agent-from-the-token")  # the token's own dispatch, within the grace time
    await until(lambda: len(guard.finished) == 2)
    assert [room for room, _, _ in rooms.dispatches] == ["forgotten"] and reasons(rooms) == ["no_agent"]


async def test_untaken_dispatches_are_retried_until_a_worker_is_back() -> None:
    rooms = FakeRooms(workers=0)
    rooms.people["r1"] = [participant("user-1")]
    guard = AgentGuard(rooms, "voice-agent", FAST)
    guard.agent_left("r1")
    await until(lambda: len(rooms.dispatches) >= 3)
    assert guard.recoveries["r1"].outcome == "running"
    rooms.workers = 1  # the worker restarted and registered
    await until(lambda: guard.finished, timeout=5.0)
    recovery = guard.finished[0]
    assert recovery.outcome == "recovered" and recovery.attempts == len(rooms.dispatches) >= 4
    assert sum(p.kind == ParticipantInfo.Kind.AGENT for p in rooms.people["r1"]) == 1


async def test_a_late_taken_dispatch_is_awaited_not_doubled() -> None:
    rooms = FakeRooms(workers=0)
    rooms.people["r1"] = [participant("user-1")]
    guard = AgentGuard(rooms, "voice-agent", FAST)
    guard.agent_left("r1")
    await until(lambda: len(rooms.dispatches) == 1)
    rooms.jobs.add("AD_0")  # a busy worker answered after the guard stopped waiting for it
    asyncio.get_running_loop().call_later(0.3, rooms.agent_joins, "r1", "agent-AD_0")
    await until(lambda: guard.finished)
    assert len(rooms.dispatches) == 1, rooms.dispatches


async def test_the_guard_gives_up_after_its_attempts_and_a_finished_room_stops_it() -> None:
    rooms = FakeRooms(workers=0)
    rooms.people["r1"] = [participant("user-1")]
    rooms.people["r2"] = [participant("user-2")]
    guard = AgentGuard(rooms, "voice-agent", GuardConfig(**{**FAST.__dict__, "max_attempts": 3}))
    guard.agent_left("r1")
    guard.agent_left("r2")
    await until(lambda: len(rooms.dispatches) >= 2)
    guard.room_finished("r2")
    await until(lambda: len(guard.finished) == 2)
    by_room = {r.room: r for r in guard.finished}
    assert by_room["r1"].outcome == "gave_up" and by_room["r1"].attempts == 3
    assert by_room["r2"].outcome == "running"  # cancelled: the room closed


async def test_the_room_watch_finds_a_room_no_webhook_mentioned() -> None:
    rooms = FakeRooms()
    rooms.people["quiet"] = [participant("user-1")]
    rooms.people["quiet"][0].joined_at_ms -= 60_000  # waiting for a minute already
    guard = AgentGuard(rooms, "voice-agent", FAST)
    watch = asyncio.create_task(guard.watch())
    try:
        await until(lambda: guard.finished)
    finally:
        watch.cancel()
    assert reasons(rooms) == ["no_agent"] and guard.finished[0].outcome == "recovered"


def signed(body: str, api_key: str, api_secret: str) -> str:
    digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    return api.AccessToken(api_key, api_secret).with_sha256(digest).to_jwt()


async def test_the_webhook_route_takes_only_what_livekit_signed(make_client, config, monkeypatch) -> None:
    rooms = FakeRooms()
    rooms.people["hooked"] = [participant("user-1")]
    monkeypatch.setattr(agent_guard, "LiveKitRooms", lambda *a: rooms)
    client = await make_client(config)
    event = {"event": "participant_left", "room": {"name": "hooked"},
             "participant": {"identity": "agent-x", "kind": "AGENT"}}  # fmt: skip
    body = json.dumps(event)
    headers = {"Content-Type": "application/webhook+json"}

    for auth in ("", "Bearer nonsense", signed(body, config.api_key, "another-secret-of-32-characters-at-least")):
        resp = await client.post("/api/livekit/webhook", data=body, headers={**headers, "Authorization": auth})
        assert resp.status == 401, await resp.text()
        assert (await resp.json())["field"] == "Authorization"
    resp = await client.post(  # signed, but for another body
        "/api/livekit/webhook", data=body.replace("hooked", "other"),
        headers={**headers, "Authorization": signed(body, config.api_key, config.api_secret)},
    )  # fmt: skip
    assert resp.status == 401
    assert rooms.dispatches == []

    auth = signed(body, config.api_key, config.api_secret)
    resp = await client.post("/api/livekit/webhook", data=body, headers={**headers, "Authorization": auth})
    assert resp.status == 200 and (await resp.json()) == {"status": "ok"}
    await until(lambda: rooms.dispatches)
    assert reasons(rooms) == ["agent_lost"]


async def test_agent_guard_off_has_no_webhook_route(make_client, config, monkeypatch) -> None:
    monkeypatch.setenv("AGENT_GUARD", "0")
    client = await make_client(config)
    resp = await client.post("/api/livekit/webhook", data="{}")
    assert resp.status == 404


def test_guard_settings_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match="AGENT_RETRY_S"):
        GuardConfig.from_env({"AGENT_RETRY_S": "soon"})
    assert not GuardConfig.from_env({"AGENT_GUARD": "off"}).enabled


# -- why no worker took a dispatch: the guard asks the workers (their GET /worker) -----------------------------


async def worker_port(answer: dict) -> tuple[web.AppRunner, str]:
    """A worker's health port as LiveKit's agent SDK serves it: GET /worker -> its agent name, load and jobs."""
    async def worker(_request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/worker", worker)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/worker"


@pytest.mark.parametrize("workers_up", [True, False])
async def test_the_guard_says_full_when_workers_answer_and_none_registered_when_none_do(
    workers_up: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: one worker, its one call slot taken by a caller who closed the tab. LiveKit does not take
    the dispatch; the guard's warning must say the worker is full, not that none is registered."""
    caplog.set_level("WARNING", logger="token_server.agent_guard")
    runner, url = await worker_port({"agent_name": "voice-agent", "worker_type": "JT_ROOM", "worker_load": 1.0,
                                     "active_jobs": 1, "sdk_version": "1.8.9", "project_type": "python"})
    other_runner, other_url = await worker_port({"agent_name": "another-agent", "worker_load": 0.0, "active_jobs": 0})
    if not workers_up:
        await runner.cleanup()
    rooms = FakeRooms(workers=0)
    rooms.people["r1"] = [participant("user-1")]
    guard = AgentGuard(rooms, "voice-agent", GuardConfig(**{**FAST.__dict__, "worker_urls": (url, other_url)}))
    try:
        guard.caller_joined("r1")
        await until(lambda: guard.recoveries.get("r1") and guard.recoveries["r1"].untaken_because)
        message = next(r.getMessage() for r in caplog.records if "no worker took the agent dispatch" in r.getMessage())
    finally:
        await guard.aclose()
        await other_runner.cleanup()
        if workers_up:
            await runner.cleanup()
    if workers_up:
        assert "every worker of this agent is full or draining" in message, message
        assert f"{url}: 1 call(s), load 1.00" in message and "none registered" not in message, message
        assert other_url not in message, message  # another agent's worker is not this agent's
    else:
        assert "no worker of this agent answers" in message and "none registered?" in message, message
        assert f"{url}: ClientConnectorError" in message, message
        assert f"{other_url}: serves agent 'another-agent'" in message, message


def test_worker_urls_default_to_the_local_workers_health_port() -> None:
    from agent.config import AgentConfig

    assert GuardConfig.from_env({}).worker_urls == (
        f"http://127.0.0.1:{AgentConfig.from_env({}).http_port}/worker",)  # the same default port on both sides
    assert GuardConfig.from_env({"AGENT_HTTP_PORT": "9001"}).worker_urls == ("http://127.0.0.1:9001/worker",)
    assert GuardConfig.from_env({"AGENT_WORKER_URLS": "http://a:1/worker, http://b:2/worker"}).worker_urls == (
        "http://a:1/worker", "http://b:2/worker")
    with pytest.raises(ValueError, match="AGENT_WORKER_URLS"):
        GuardConfig.from_env({"AGENT_WORKER_URLS": "a:1"})


class ScriptedWorkers:
    """The guard's `Workers`: one worker whose load is what `load` says at each census."""

    def __init__(self, load: float) -> None:
        self.load = load
        self.asked = 0

    async def census(self, agent_name: str) -> agent_guard.WorkerCensus:
        self.asked += 1
        answer = agent_guard.WorkerAnswer("http://w/worker", agent_name, self.load, 1 if self.load else 0)
        return agent_guard.WorkerCensus(answered=[answer])


@pytest.mark.parametrize("full_at_join", [True, False])
async def test_a_caller_who_came_while_every_worker_was_full_gets_one_as_soon_as_a_worker_has_room(
    full_at_join: bool,
) -> None:
    """Issue 43's next caller: the one-call worker was still ending the previous call when they joined, so the
    token's dispatch found no worker. The guard dispatches once the worker has room, not after the whole grace;
    when a worker had room at the join, the token's own dispatch is given the whole grace as before."""
    rooms = FakeRooms()
    rooms.people["next"] = [participant("user-2")]
    workers = ScriptedWorkers(load=0.9 if full_at_join else 0.45)
    guard = AgentGuard(rooms, "voice-agent", GuardConfig(**{**FAST.__dict__, "join_grace_s": 2.0}), workers)
    t0 = time.monotonic()
    guard.caller_joined("next")
    await asyncio.sleep(0.5)
    assert rooms.dispatches == []  # full: no dispatch while it stays full
    workers.load = 0.45  # the previous call's job closed
    await until(lambda: rooms.dispatches, timeout=3.0)
    waited = time.monotonic() - t0
    if full_at_join:
        assert 0.5 <= waited < 0.5 + 2 * agent_guard.FREE_POLL_S + 0.3, waited
    else:
        assert waited >= 2.0, waited
    await until(lambda: guard.finished)
    assert guard.finished[0].outcome == "recovered" and reasons(rooms) == ["no_agent"]


def test_the_guard_reads_full_as_the_worker_does() -> None:
    from agent.config import AgentConfig

    assert GuardConfig.from_env({}).load_threshold == AgentConfig.from_env({}).load_threshold
    assert GuardConfig.from_env({"AGENT_LOAD_THRESHOLD": "0.7"}).load_threshold == 0.7
    census = agent_guard.WorkerCensus(answered=[agent_guard.WorkerAnswer("u", "a", 0.9, 1)])
    assert census.all_full(0.9) and not census.all_full(0.95)
    assert not agent_guard.WorkerCensus(silent=["u: refused"]).all_full(0.9)  # nobody answers: not "full"
