"""A test harness, never shipped: the real worker (agent/worker.py's server options and entrypoint) whose agent joins
its room `SLOW_AGENT_DELAY_S` after it took the job, as a worker with a lagging event loop does on a loaded host
(issue 32's run C: loop lags of 1-3 s). Run: `python -m livekit.agents start tests/call/slow_agent.py` with the
worker's environment (LIVEKIT_URL and keys, AGENT_NAME...)."""

from __future__ import annotations

import asyncio
import logging
import os

from livekit.agents import AgentServer, JobContext

from agent import worker

log = logging.getLogger("slow_agent")
DELAY_S = float(os.environ.get("SLOW_AGENT_DELAY_S", "4.0"))

_cfg = worker.check_startup()
server = AgentServer(**worker.server_options(_cfg))


@server.rtc_session(agent_name=_cfg.agent_name)
async def entrypoint(ctx: JobContext) -> None:
    log.info("slow agent took job %s of room %s", ctx.job.id, ctx.job.room.name)
    await asyncio.sleep(DELAY_S)
    await worker.entrypoint(ctx)
