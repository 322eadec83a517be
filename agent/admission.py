"""Admission: the worker says yes to a job offer only while it has a free call slot, counted on the loop.

- `Admission(limit, active_jobs)` is LiveKit's `on_request` (request_fnc) for our rtc_session. It counts the
  jobs LiveKit runs here (`active_jobs()`) plus the offers it has said yes to whose job has not launched yet, and
  declines an offer when that count has reached `limit()` (AGENT_MAX_SESSIONS): `reject(terminate=False)`, so
  LiveKit offers the call to another worker, and the log says why.
- Why LiveKit's own load check is not enough: it runs `load_fnc` in a thread and compares the result later, on
  the worker's loop. Under load the loop runs seconds late (issue 32's H200 run: event-loop lag up to 4.9 s at 64
  calls); by then jobs that were reserved have launched and left the reservation count, while the stale load
  does not hold them yet, so the worker took 12 jobs with a limit of 8. The count here has no await between the
  check and the increment, so it is exact however late the loop runs.
- CPU and engine limits stay with the load (`current_load`): they are estimates, the call count is not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sized

from livekit.agents import JobRequest

logger = logging.getLogger("agent.admission")


class Admission:
    """LiveKit's request_fnc: accept while `len(active_jobs()) + launching < limit()`, else decline (docstring)."""

    def __init__(self, limit: Callable[[], int], active_jobs: Callable[[], Sized]) -> None:
        self.limit = limit
        self._active_jobs = active_jobs
        self.launching = 0  # offers accepted here whose job LiveKit has not launched yet
        self.declined = 0

    def in_use(self) -> int:
        return len(self._active_jobs()) + self.launching

    async def __call__(self, request: JobRequest) -> None:
        limit, in_use = self.limit(), self.in_use()
        if in_use >= limit:  # no await between this check and the increment below: the count is exact
            self.declined += 1
            logger.info(
                "job %s for room %s declined: %d of %d calls in use (AGENT_MAX_SESSIONS); LiveKit offers it elsewhere",
                request.id,
                request.room.name,
                in_use,
                limit,
            )
            await request.reject(terminate=False)
            return
        self.launching += 1
        try:
            await request.accept()  # returns once the job is launched (then it is in active_jobs) or failed
        finally:
            self.launching -= 1
