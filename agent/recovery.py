"""After a worker died: close its open turns and take its dead agents out of their rooms.

`python -m agent recover [--pid PID ...] [--reason TEXT]` (scripts/run_worker.sh runs it the moment the worker
it supervises exits abnormally; the systemd unit runs it as ExecStopPost), and the worker itself at start-up for
workers that died with no supervisor watching (`recover_dead_calls(cfg)`):
- every open call of a dead worker on this host (agent/journal.py) has its open turns appended to the traces
  with outcome `worker_lost`;
- those turns also go to OpenTelemetry as spans when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (agent/trace_otel.py),
  like every other finished turn;
- each such call's agent participant is removed from its room through LiveKit's RoomService. LiveKit itself
  notices a dead agent participant only when its media connection times out (measured on the local server:
  21.3 s after kill -9); removed, the callers see the agent leave at once, and the token server's agent guard
  (token_server/agent_guard.py), told by LiveKit's participant_left webhook, dispatches a new agent.
Exit status 0 when the traces were written (a LiveKit that cannot be reached is logged: the guard still
recovers the room once LiveKit drops the agent itself); 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from agent.config import AgentConfig
from agent.journal import LostCall, recover
from agent.trace_otel import flush as flush_spans
from agent.trace_otel import install_from_env as install_otel

logger = logging.getLogger("agent.recovery")

REMOVE_TIMEOUT_S = 5.0


def http_url(livekit_url: str) -> str:
    """LiveKit's server API answers on the signalling URL's host, over HTTP(S)."""
    if livekit_url.startswith("ws://"):
        return "http://" + livekit_url[len("ws://") :]
    if livekit_url.startswith("wss://"):
        return "https://" + livekit_url[len("wss://") :]
    return livekit_url


async def remove_agents(cfg: AgentConfig, lost: list[LostCall]) -> int:
    """Remove each lost call's agent participant from its room; returns how many LiveKit removed."""
    if not lost:
        return 0
    if not (cfg.livekit_api_key and cfg.livekit_api_secret):
        logger.warning("cannot remove dead agents from their rooms: LIVEKIT_API_KEY/LIVEKIT_API_SECRET not set")
        return 0
    import aiohttp
    from livekit import api

    removed = 0
    timeout = aiohttp.ClientTimeout(total=REMOVE_TIMEOUT_S)
    async with api.LiveKitAPI(
        http_url(cfg.livekit_url), cfg.livekit_api_key, cfg.livekit_api_secret, timeout=timeout
    ) as lk:
        for call in lost:
            if not (call.room and call.agent_identity):
                continue
            try:
                await lk.room.remove_participant(
                    api.RoomParticipantIdentity(room=call.room, identity=call.agent_identity)
                )
                removed += 1
                logger.info("removed the dead agent %s from room %s", call.agent_identity, call.room)
            except api.TwirpError as exc:  # not_found: LiveKit dropped it already, or the room closed
                logger.info("agent %s in room %s: %s", call.agent_identity, call.room, exc.message)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                logger.warning("cannot reach LiveKit at %s to remove %s: %s", cfg.livekit_url, call.agent_identity, exc)
                break
    return removed


def recover_dead_calls(cfg: AgentConfig, *, pids: set[int] | None = None, reason: str = "") -> list[LostCall]:
    """Close the dead workers' open turns and remove their agents (see the module docstring)."""
    if not cfg.traces_dir:
        return []
    install_otel()  # once per process: the worker has already; `python -m agent recover` has not
    lost = recover(cfg.traces_dir, pids=pids, reason=reason)
    if lost:
        flush_spans()  # the recover command exits next
    for call in lost:
        logger.warning(
            "worker lost: call %s in room %s (agent %s): %d open turn(s) closed as worker_lost",
            call.session_id,
            call.room,
            call.agent_identity,
            call.turns,
        )
    if lost:
        asyncio.run(remove_agents(cfg, lost))
    return lost


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent recover", description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, action="append", help="the dead worker's pid (repeatable; default: all)")
    parser.add_argument("--reason", default="", help="why it died, for the trace (e.g. 'killed by signal 9')")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = AgentConfig.from_env()
    lost = recover_dead_calls(cfg, pids=set(args.pid) if args.pid else None, reason=args.reason)
    print(f"recover: {len(lost)} call(s) of a dead worker closed" + "".join(f"; {c.room}" for c in lost))
    return 0
