"""The stall watchdog of an event loop (common/loop_watch.py), on this process's own loop for real: a blocked loop
shows its lag; a stall is logged from the loop once it runs again, with what held it. The stop of a whole process
(SIGSTOP) is tests/agent/test_worker_stats.py's child; the engine server's probe is tests/server/."""

from __future__ import annotations

import asyncio
import time

import pytest

from common.loop_watch import LoopProbe, Stall


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_blocked_loop_shows_its_lag() -> None:
    loop = asyncio.get_running_loop()
    probe = LoopProbe(loop, period_s=0.05)
    probe.start()
    loop.call_soon(time.sleep, 0.2)  # blocks the loop before the probe's first wake (due in 50 ms) can run
    await asyncio.sleep(0.4)
    probe.stop()
    lags = probe.take()
    assert lags and max(lags) >= 150.0, lags  # the wake due at +50 ms ran after the 200 ms block: >= 150 ms late
    assert not probe.running and probe.take() == []


async def test_a_stalled_loop_is_logged_when_it_runs_again_with_what_held_it(caplog: pytest.LogCaptureFixture) -> None:
    """A loop blocked by a blocking call (its thread waits) and one blocked by code that runs (its thread busy):
    each stall is logged from the loop itself, within 0.5 s of its end, with the cause."""
    caplog.set_level("WARNING", logger="common.loop_watch")
    loop = asyncio.get_running_loop()
    stalls: list[Stall] = []
    probe = LoopProbe(loop, period_s=0.05, name="call", stall_log_s=0.5, on_stall=stalls.append)
    probe.start()
    await asyncio.sleep(0.2)
    blocks = []  # (wall seconds, end)
    for block in (lambda: time.sleep(0.8), lambda: spin(0.8)):
        t0 = time.time()
        block()  # on the loop: nothing else runs meanwhile
        blocks.append((time.time() - t0, time.time()))
        await asyncio.sleep(0.6)
    probe.stop()
    assert [s.cause for s in stalls] == ["waiting", "busy"], stalls
    for stall, (wall, end) in zip(stalls, blocks, strict=True):
        assert wall - 0.1 <= stall.seconds <= wall and 0 <= stall.ended - end <= 0.5, (stall, wall, end)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert all(m.startswith("event loop stalled: the call loop ran nothing for") for m in messages), messages
    assert "waited while the process ran" in messages[0] and "running code that blocked the loop" in messages[1]
