"""Agent guard: every room with a caller has a live agent. When the agent leaves while a caller is still there, or
never arrives, the guard dispatches one again through LiveKit's AgentDispatchService (`CreateDispatch`).

Why here: LiveKit dispatches a room's agent once, when the room is created (the token's RoomConfiguration), and
never again: a room created while no worker was registered, or whose agent's worker died, stays without one. The
token server already holds the API key pair and decides which agent a room gets, so it is the one place that can
put an agent back, for any front end (the page needs no part in it).

Contract
- Inputs: LiveKit's webhooks (`POST /api/livekit/webhook`, verified against the API key pair with livekit-api's
  `WebhookReceiver`: 401 when the signature or body hash does not match; `participant_left` of an agent,
  `participant_joined`, `room_finished`), and a room watch every `AGENT_GUARD_POLL_S` (ListRooms +
  ListParticipants) for a lost webhook or a LiveKit without webhooks configured. A webhook only says where to
  look; what a room holds is read from LiveKit each time.
- A room needs an agent when it holds a caller (a participant that is not an agent) and no agent that is still
  connected. An agent that left such a room is replaced at once (dispatch metadata reason `agent_lost`); a
  caller alone for `AGENT_JOIN_GRACE_S` (the token's own dispatch normally brings the agent within ~1 s) gets one
  with reason `no_agent`. The worker reads the reason and says one short sentence (agent/worker.py).
- When the caller joined while every worker that answers was full (its load at `AGENT_LOAD_THRESHOLD`, the
  worker's own setting), the token's dispatch found no worker and LiveKit does not keep it: the grace then ends as
  soon as a worker answers with room (polled every `FREE_POLL_S`), so the next caller of a one-call worker is not
  kept waiting for the rest of it.
- A dispatch that no worker took (no job on it after `AGENT_TAKE_S`; LiveKit does not queue a job while no
  worker is registered: "not dispatching agent job since no worker is available") is tried again every
  `AGENT_RETRY_S` for the first `AGENT_RETRY_FAST_S` (a restarting worker registers within them), then backing
  off by 1.5x to `AGENT_RETRY_MAX_S`, while the room still needs an agent, at most `AGENT_GUARD_MAX_ATTEMPTS`
  times. Before each new dispatch the earlier ones are checked: one a busy worker took late is awaited instead.
  A dispatch taken but whose agent has not joined after `AGENT_ARRIVAL_S` is tried again too. Untaken dispatches
  are left in place (deleting one makes LiveKit terminate a job that may still be on its way); they end with the
  room.
- What "taken" can see: LiveKit's ListDispatch shows a dispatch's job only once its agent has joined the room
  (livekit-server 1.13.5, seen 2026-11-28 by polling ListDispatch; tests/call/test_one_agent.py relies on it).
  A worker that took the job but joins late (a loaded host) looks untaken, so the guard may dispatch a room that
  already has an agent on its way. The worker makes that harmless: the agent of ours whose call began first (else
  the first to join) keeps the room and each later one leaves at once, without a word (agent/one_agent.py).
- Why no worker took a dispatch: LiveKit's API does not say, so the guard asks the workers themselves (LiveKit's
  agent SDK serves `GET /worker` on each worker's health port: its agent name, load and jobs, as protobuf JSON
  that leaves out a field at 0), at the addresses
  in `AGENT_WORKER_URLS` (comma-separated; default `http://127.0.0.1:$AGENT_HTTP_PORT/worker`, the local stack's
  one worker). Its warning then says "full" (workers of this agent answer, all of them busy: they decline or are
  not offered calls; a call must end first) or "none answers" (none registered, or elsewhere than those URLs).
- One recovery per room at a time; it ends when the room has an agent, has no caller, or is gone.
- `AGENT_GUARD=0` turns all of this off (the webhook route then answers 404).
What LiveKit does not say: an agent whose worker died stays in the room until LiveKit's media timeout drops it
(~21 s on the local server). The worker's supervisor removes it at once (agent/recovery.py); without one the
guard acts when LiveKit drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from aiohttp import web
from livekit import api
from livekit.protocol.models import ParticipantInfo

from common import worker_defaults
from common.env import Env
from token_server.config import ConfigError, ServerConfig

log = logging.getLogger("token_server.agent_guard")

WEBHOOK_PATH = "/api/livekit/webhook"
AGENT = ParticipantInfo.Kind.AGENT
#: participants that are not callers (a caller is what agent/callers.py listens to)
NOT_CALLERS = (AGENT, ParticipantInfo.Kind.EGRESS, ParticipantInfo.Kind.INGRESS)
GONE = ParticipantInfo.State.DISCONNECTED
API_TIMEOUT_S = 5.0
WORKER_TIMEOUT_S = 1.0  # a worker's /worker answer; one that takes longer is counted as not answering
FREE_POLL_S = 0.2  # during a caller's grace, while every worker is full: how often the workers are asked again


@dataclass(frozen=True)
class GuardConfig:
    enabled: bool = True
    poll_s: float = 5.0
    join_grace_s: float = 3.0
    take_s: float = 1.0
    retry_s: float = 0.5
    retry_fast_s: float = 30.0
    retry_max_s: float = 5.0
    arrival_s: float = 15.0
    max_attempts: int = 300
    worker_urls: tuple[str, ...] = (f"http://127.0.0.1:{worker_defaults.AGENT_HTTP_PORT}/worker",)
    load_threshold: float = worker_defaults.AGENT_LOAD_THRESHOLD  # a worker at this load is full: offered no call

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GuardConfig:
        env = Env(environ, error=ConfigError)
        port = env.int("AGENT_HTTP_PORT", worker_defaults.AGENT_HTTP_PORT, lo=1, hi=65535)
        urls = env.str("AGENT_WORKER_URLS", f"http://127.0.0.1:{port}/worker")
        worker_urls = tuple(u.strip() for u in urls.split(",") if u.strip())
        for url in worker_urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"AGENT_WORKER_URLS: {url!r} is not an http(s) URL (a worker's GET /worker)")
        return cls(
            worker_urls=worker_urls,
            enabled=env.bool("AGENT_GUARD", True),
            poll_s=env.float("AGENT_GUARD_POLL_S", 5.0, lo=0.2, hi=600.0),
            join_grace_s=env.float("AGENT_JOIN_GRACE_S", 3.0, lo=0.0, hi=600.0),
            take_s=env.float("AGENT_TAKE_S", 1.0, lo=0.2, hi=60.0),
            retry_s=env.float("AGENT_RETRY_S", 0.5, lo=0.1, hi=600.0),
            retry_fast_s=env.float("AGENT_RETRY_FAST_S", 30.0, lo=0.0, hi=3600.0),
            retry_max_s=env.float("AGENT_RETRY_MAX_S", 5.0, lo=0.1, hi=3600.0),
            arrival_s=env.float("AGENT_ARRIVAL_S", 15.0, lo=1.0, hi=600.0),
            max_attempts=env.int("AGENT_GUARD_MAX_ATTEMPTS", 300, lo=1, hi=100_000),
            load_threshold=env.float("AGENT_LOAD_THRESHOLD", worker_defaults.AGENT_LOAD_THRESHOLD, lo=0.05,
                                     hi=1.0),
        )


@dataclass
class Occupancy:
    """Who is in a room now, as LiveKit says."""

    callers: list[ParticipantInfo] = field(default_factory=list)
    agents: list[ParticipantInfo] = field(default_factory=list)

    @property
    def needs_agent(self) -> bool:
        return bool(self.callers) and not self.agents

    def caller_since(self) -> float:
        """Unix seconds since which a caller has been in the room (the earliest one still there)."""
        return min((p.joined_at_ms / 1000.0 or float(p.joined_at)) for p in self.callers)


class Rooms(Protocol):
    """The LiveKit server API calls the guard makes (LiveKitRooms; tests drive the policy with their own)."""

    async def rooms(self) -> list[str]: ...
    async def occupancy(self, room: str) -> Occupancy | None: ...  # None: no such room
    async def dispatch(self, room: str, agent_name: str, metadata: str) -> str: ...
    async def taken(self, room: str, dispatch_ids: set[str]) -> bool: ...  # has any of them a job?


class LiveKitRooms:
    """`Rooms` over livekit-api's RoomService and AgentDispatchService."""

    def __init__(self, url: str, api_key: str, api_secret: str) -> None:
        self._api = api.LiveKitAPI(
            http_url(url), api_key, api_secret, timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S)
        )

    async def rooms(self) -> list[str]:
        listed = await self._api.room.list_rooms(api.ListRoomsRequest())
        return [r.name for r in listed.rooms if r.num_participants > 0]

    async def occupancy(self, room: str) -> Occupancy | None:
        try:
            listed = await self._api.room.list_participants(api.ListParticipantsRequest(room=room))
        except api.TwirpError as exc:
            if exc.code == api.TwirpErrorCode.NOT_FOUND:
                return None
            raise
        here = [p for p in listed.participants if p.state != GONE]
        return Occupancy(
            callers=[p for p in here if p.kind not in NOT_CALLERS], agents=[p for p in here if p.kind == AGENT]
        )

    async def dispatch(self, room: str, agent_name: str, metadata: str) -> str:
        request = api.CreateAgentDispatchRequest(agent_name=agent_name, room=room, metadata=metadata)
        return (await self._api.agent_dispatch.create_dispatch(request)).id

    async def taken(self, room: str, dispatch_ids: set[str]) -> bool:
        dispatches = await self._api.agent_dispatch.list_dispatch(room)
        return any(d.id in dispatch_ids and len(d.state.jobs) > 0 for d in dispatches)

    async def aclose(self) -> None:
        await self._api.aclose()


@dataclass(frozen=True)
class WorkerAnswer:
    """One worker's `GET /worker` answer (LiveKit's agent SDK)."""

    url: str
    agent_name: str
    load: float
    active_jobs: int


@dataclass
class WorkerCensus:
    """The workers of one agent name that answered, and the addresses where none did."""

    answered: list[WorkerAnswer] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)  # "url (why)"

    def all_full(self, threshold: float) -> bool:
        """Some worker answered and every one that did is at the load LiveKit reads as full."""
        return bool(self.answered) and all(w.load >= threshold for w in self.answered)

    def why_untaken(self) -> str:
        """Why a dispatch no worker took was not taken, as far as the workers say."""
        if self.answered:
            each = ", ".join(f"{w.url}: {w.active_jobs} call(s), load {w.load:.2f}" for w in self.answered)
            return f"every worker of this agent is full or draining ({each}): it waits for a call to end"
        where = "; ".join(self.silent) or "no AGENT_WORKER_URLS"
        return f"no worker of this agent answers ({where}): none registered?"


class Workers(Protocol):
    async def census(self, agent_name: str) -> WorkerCensus: ...


class HttpWorkers:
    """`Workers` over each worker's `GET /worker` (LiveKit's agent SDK serves it on the worker's health port)."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls

    async def census(self, agent_name: str) -> WorkerCensus:
        census = WorkerCensus()
        timeout = aiohttp.ClientTimeout(total=WORKER_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for url in self.urls:
                try:
                    async with session.get(url) as resp:
                        resp.raise_for_status()
                        data = await resp.json(content_type=None)
                    # protobuf JSON (livekit.protocol's WorkerInfo): a field at its default (0) is left out
                    answer = WorkerAnswer(url, str(data["agent_name"]), float(data.get("worker_load", 0.0)),
                                          int(data.get("active_jobs", 0)))  # fmt: skip
                except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError, TypeError) as exc:
                    census.silent.append(f"{url}: {type(exc).__name__} {exc}".rstrip())
                    continue
                if answer.agent_name == agent_name:
                    census.answered.append(answer)
                else:
                    census.silent.append(f"{url}: serves agent {answer.agent_name!r}")
        return census


def http_url(livekit_url: str) -> str:
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if livekit_url.startswith(ws):
            return http + livekit_url[len(ws) :]
    return livekit_url


def recovery_metadata(reason: str) -> str:
    return json.dumps({"voice_agent": {"recovery": reason}}, separators=(",", ":"))


@dataclass
class Recovery:
    """One room's recovery in progress (what the log and tests read)."""

    room: str
    reason: str
    started: float = field(default_factory=time.monotonic)
    attempts: int = 0
    dispatch_ids: set[str] = field(default_factory=set)
    outcome: str = "running"  # running | recovered | not_needed | gave_up
    untaken_because: str = ""  # the last reason the workers gave for a dispatch none took


class AgentGuard:
    def __init__(self, rooms: Rooms, agent_name: str, config: GuardConfig, workers: Workers | None = None) -> None:
        self.rooms = rooms
        self.workers = workers if workers is not None else HttpWorkers(config.worker_urls)
        self.agent_name = agent_name
        self.config = config
        self.recoveries: dict[str, Recovery] = {}  # running ones, by room
        self.finished: list[Recovery] = []  # the last 100 ended ones
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._watch_failing = False

    # -- inputs ------------------------------------------------------------------------------
    def agent_left(self, room: str) -> None:
        """An agent left `room`: replace it at once if a caller is still there."""
        self._start(room, "agent_lost", wait_s=0.0)

    def caller_joined(self, room: str) -> None:
        """A caller joined `room`: give the token's own dispatch its grace time, then check."""
        self._start(room, "no_agent", wait_s=self.config.join_grace_s)

    def room_finished(self, room: str) -> None:
        task = self._tasks.get(room)
        if task is not None:
            task.cancel()

    async def watch(self) -> None:
        """Every poll interval: any room whose caller has waited past the grace time without an agent."""
        while True:
            await asyncio.sleep(self.config.poll_s)
            try:
                names = await self.rooms.rooms()
                for room in names:
                    if room in self._tasks:
                        continue
                    occupancy = await self.rooms.occupancy(room)
                    if occupancy is not None and occupancy.needs_agent:
                        waited = time.time() - occupancy.caller_since()
                        self._start(room, "no_agent", wait_s=max(0.0, self.config.join_grace_s - waited))
                if self._watch_failing:
                    log.info("room watch: LiveKit answers again")
                self._watch_failing = False
            except (TimeoutError, api.TwirpError, aiohttp.ClientError, OSError) as exc:
                if not self._watch_failing:  # once per outage, not every poll
                    log.warning("room watch: cannot list rooms on LiveKit (%s); retrying every %gs", exc,
                                self.config.poll_s)  # fmt: skip
                self._watch_failing = True

    # -- recovery ----------------------------------------------------------------------------
    def _start(self, room: str, reason: str, *, wait_s: float) -> None:
        running = self._tasks.get(room)
        if running is not None and not running.done():
            if reason == "agent_lost":  # more urgent than a pending grace check: restart it now
                running.cancel()
            else:
                return
        recovery = Recovery(room, reason)
        task = asyncio.get_running_loop().create_task(self._recover(recovery, wait_s), name=f"agent-guard-{room}")
        self._tasks[room] = task
        self.recoveries[room] = recovery
        task.add_done_callback(functools.partial(self._ended, recovery))

    def _ended(self, recovery: Recovery, task: asyncio.Task[None]) -> None:
        if self._tasks.get(recovery.room) is task:
            del self._tasks[recovery.room]
            self.recoveries.pop(recovery.room, None)
        if not task.cancelled() and task.exception() is not None:
            recovery.outcome = "failed"
            log.error("room %s: agent recovery failed: %r", recovery.room, task.exception())
        self.finished = [*self.finished[-99:], recovery]

    async def _grace(self, room: str, wait_s: float) -> None:
        """Wait `wait_s` for the token's own dispatch, or less: when every worker was full as the grace began, until
        one answers with room (that dispatch found none, and LiveKit did not keep it)."""
        deadline = time.monotonic() + wait_s
        threshold = self.config.load_threshold
        if (await self.workers.census(self.agent_name)).all_full(threshold):
            while time.monotonic() + FREE_POLL_S < deadline:
                await asyncio.sleep(FREE_POLL_S)
                if not (await self.workers.census(self.agent_name)).all_full(threshold):
                    log.info("room %s: a worker has room again; the caller's agent is dispatched now", room)
                    return
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))

    async def _recover(self, recovery: Recovery, wait_s: float) -> None:
        cfg, room = self.config, recovery.room
        if wait_s > 0:
            await self._grace(room, wait_s)
        delay = cfg.retry_s
        while True:
            occupancy = await self._occupancy(room)
            if occupancy is None or not occupancy.needs_agent:
                recovery.outcome = "recovered" if recovery.attempts else "not_needed"
                if recovery.attempts:
                    log.info(
                        "room %s: agent back after %.1fs (%d dispatch(es))",
                        room,
                        time.monotonic() - recovery.started,
                        recovery.attempts,
                    )
                return
            if recovery.attempts >= cfg.max_attempts:
                recovery.outcome = "gave_up"
                log.error("room %s: no agent after %d dispatches; giving up", room, recovery.attempts)
                return
            if recovery.dispatch_ids and await self.rooms.taken(room, recovery.dispatch_ids):
                # a worker took an earlier dispatch late: wait for its agent rather than sending a second one
                if await self._arrives(room, cfg.arrival_s):
                    continue
            recovery.attempts += 1
            dispatch_id = await self.rooms.dispatch(room, self.agent_name, recovery_metadata(recovery.reason))
            recovery.dispatch_ids.add(dispatch_id)
            log.info("room %s: %s; dispatched agent %r (%s, attempt %d)", room, _words(recovery.reason),
                     self.agent_name, dispatch_id, recovery.attempts)  # fmt: skip
            if await self._taken(room, {dispatch_id}):
                delay = cfg.retry_s
                await self._arrives(room, cfg.arrival_s)
                continue
            if recovery.attempts == 1 or recovery.attempts % 30 == 0:
                census = await self.workers.census(self.agent_name)
                recovery.untaken_because = census.why_untaken()
                log.warning("room %s: no worker took the agent dispatch: %s; retrying every %.1f-%.1fs",
                            room, recovery.untaken_because, cfg.retry_s, cfg.retry_max_s)  # fmt: skip
            await asyncio.sleep(delay)
            if time.monotonic() - recovery.started > cfg.retry_fast_s:
                delay = min(cfg.retry_max_s, delay * 1.5)

    async def _occupancy(self, room: str) -> Occupancy | None:
        while True:
            try:
                return await self.rooms.occupancy(room)
            except (TimeoutError, api.TwirpError, aiohttp.ClientError, OSError) as exc:
                log.warning("room %s: cannot read its participants from LiveKit (%s); retrying", room, exc)
                await asyncio.sleep(self.config.retry_s)

    async def _taken(self, room: str, dispatch_ids: set[str]) -> bool:
        deadline = time.monotonic() + self.config.take_s
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            if await self.rooms.taken(room, dispatch_ids):
                return True
        return False

    async def _arrives(self, room: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            occupancy = await self._occupancy(room)
            if occupancy is None or not occupancy.needs_agent:
                return True
            await asyncio.sleep(0.2)
        log.warning("room %s: a worker took the dispatch but no agent joined within %.0fs", room, timeout_s)
        return False

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


REASON_WORDS = {"agent_lost": "the agent left while a caller is there", "no_agent": "a caller waits with no agent"}


def _words(reason: str) -> str:
    return REASON_WORDS.get(reason, reason)


# -- aiohttp wiring ----------------------------------------------------------------------------
GUARD_KEY = web.AppKey("agent_guard", AgentGuard)


def install(app: web.Application, config: ServerConfig, guard_config: GuardConfig | None = None) -> None:
    """Add the webhook route and run the guard (its room watch) while the app runs."""
    gcfg = guard_config or GuardConfig.from_env()
    if not gcfg.enabled:
        return
    receiver = api.WebhookReceiver(api.TokenVerifier(config.api_key, config.api_secret))

    async def handle_webhook(request: web.Request) -> web.Response:
        body = (await request.read()).decode("utf-8", errors="replace")
        try:
            event = receiver.receive(body, request.headers.get("Authorization", ""))
        except Exception as exc:  # noqa: BLE001 - livekit-api: plain Exception for a bad hash, jwt's for a bad token
            log.warning("refused a webhook: %s", exc)
            message = "webhook signature does not verify with this server's LiveKit key pair"
            return web.json_response({"error": message, "field": "Authorization"}, status=401)
        guard = request.app[GUARD_KEY]
        room, kind = event.room.name, event.participant.kind
        if room:
            if event.event in ("participant_left", "participant_connection_aborted") and kind == AGENT:
                guard.agent_left(room)
            elif event.event == "participant_joined" and kind not in NOT_CALLERS:
                guard.caller_joined(room)
            elif event.event == "room_finished":
                guard.room_finished(room)
        return web.json_response({"status": "ok"})

    async def run_guard(app: web.Application) -> AsyncIterator[None]:
        rooms = LiveKitRooms(config.livekit_url, config.api_key, config.api_secret)
        guard = AgentGuard(rooms, config.agent_name, gcfg)
        app[GUARD_KEY] = guard
        watch = asyncio.get_running_loop().create_task(guard.watch(), name="agent-guard-watch")
        log.info("agent guard on: webhook %s, room watch every %gs", WEBHOOK_PATH, gcfg.poll_s)
        try:
            yield
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            await guard.aclose()
            await rooms.aclose()

    app.router.add_post(WEBHOOK_PATH, handle_webhook)
    app.cleanup_ctx.append(run_guard)
