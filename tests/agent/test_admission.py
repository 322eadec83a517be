"""The worker's admission (agent/admission.py): offers that arrive together never take the worker past its limit,
a declined offer goes back to LiveKit for another worker (reject without terminate), and a slot frees when a
launch fails. The requests stand in for LiveKit's JobRequest: accept() returns once the job is launched, as
LiveKit's does (it waits for the assignment, then launches), and the launched job joins `active_jobs`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agent import worker
from agent.admission import Admission
from agent.config import AgentConfig


class Offer:
    """A job offer: accept() waits until the test lets the launch finish, then the job is active."""

    def __init__(self, n: int, active: list[str], fail: bool = False) -> None:
        self.id = f"AJ_{n}"
        self.room = SimpleNamespace(name=f"room-{n}")
        self._active, self._fail = active, fail
        self.launch = asyncio.Event()
        self.answer: str | None = None
        self.terminate: bool | None = None

    async def accept(self) -> None:
        self.answer = "accept"
        await self.launch.wait()
        if self._fail:
            raise TimeoutError("no assignment")  # LiveKit's AssignmentTimeoutError path
        self._active.append(self.id)

    async def reject(self, *, terminate: bool = True) -> None:
        self.answer, self.terminate = "reject", terminate


async def test_offers_arriving_together_stop_at_the_limit_and_go_elsewhere() -> None:
    active: list[str] = []
    admit = Admission(lambda: 2, lambda: active)
    offers = [Offer(i, active) for i in range(4)]
    tasks = [asyncio.create_task(admit(o)) for o in offers]
    await asyncio.sleep(0)
    # the first two are accepted and still launching: they hold their slots, the other two are declined for now
    assert [o.answer for o in offers] == ["accept", "accept", "reject", "reject"]
    assert [o.terminate for o in offers[2:]] == [False, False]  # LiveKit may offer them to another worker
    assert admit.in_use() == 2 and admit.declined == 2
    offers[0].launch.set()
    await tasks[0]
    assert active == ["AJ_0"] and admit.launching == 1 and admit.in_use() == 2  # launched: counted as a job now
    late = Offer(9, active)
    await admit(late)
    assert late.answer == "reject"  # still full: one running, one launching
    offers[1].launch.set()
    await asyncio.gather(*tasks)
    assert active == ["AJ_0", "AJ_1"] and admit.in_use() == 2


async def test_a_failed_launch_frees_its_slot() -> None:
    active: list[str] = []
    admit = Admission(lambda: 1, lambda: active)
    offer = Offer(0, active, fail=True)
    offer.launch.set()
    with pytest.raises(TimeoutError):
        await admit(offer)
    assert admit.in_use() == 0
    again = Offer(1, active)
    again.launch.set()
    await admit(again)
    assert again.answer == "accept" and active == ["AJ_1"]


def test_the_worker_registers_it_with_its_calls_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MAX_SESSIONS", "3")
    server = worker.build_server(AgentConfig.from_env())
    admission = server._request_fnc  # LiveKit 1.8.9 keeps rtc_session's on_request here
    assert isinstance(admission, Admission)
    assert admission.limit() == 3
