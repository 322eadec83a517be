"""LiveKit's server offers a worker calls up to the worker's own limit: a worker of 4 sessions at load threshold 1.0
gets its 4th call at once. The server has a cut-off of its own (`agents.target_load`, 0.7 by default): without
`target_load: 1.0` in scripts/local/livekit.yaml the 4th call (load 0.75) waited with "no servers available" until
a call ended (docs/operations.md, "Capacity and load"). Its own stack: the shared one's worker holds 2 calls."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.callbench.rtc_caller import RtcCaller
from lab.callbench.stack import LocalStack

pytestmark = pytest.mark.call

SESSIONS = 4
STATUS_S = 3.0  # a worker reports its load every 2.5 s: each call's share reaches the server before the next call


@pytest.fixture(scope="module")
def four_call_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("cutoff"), LLM_MAX_TOKENS="40", AGENT_MAX_SESSIONS=str(SESSIONS),
                       AGENT_LOAD_THRESHOLD="1.0", AGENT_CPU_LIMIT="off")  # fmt: skip
    local.start()
    try:
        yield local
    finally:
        print(local.stop())


async def test_a_worker_is_offered_every_call_up_to_its_own_limit(four_call_stack: LocalStack,
                                                                  silent_wav: Path) -> None:
    stack = four_call_stack
    callers: list[RtcCaller] = []
    waits = []
    try:
        for i in range(SESSIONS):
            started = time.monotonic()
            callers.append(await RtcCaller.join(stack.page_url, f"cutoff-{i}-{secrets.token_hex(3)}", silent_wav))
            await asyncio.wait_for(callers[-1].agent_joined.wait(), 30)
            waits.append(round(time.monotonic() - started, 2))
            await asyncio.sleep(STATUS_S)
    finally:
        for caller in callers:
            await caller.aclose()
    refused = stack.log("livekit").read_text(errors="replace").count("no servers available")
    print(f"agent after {waits} s; refusals {refused}")
    assert refused == 0 and max(waits) < 5.0, (waits, refused)
