"""The stall watchdog of an asyncio process: a probe on each event loop that says when and why the loop ran nothing.

- `LoopProbe(loop, name=...)`: a timer on one loop, started and stopped on the loop's own thread. Each wake records
  how late it ran (`take()`: the lags in ms since the last take); a wake `stall_log_s` (`STALL_LOG_S`) or more late
  logs a WARNING from the loop once it runs again (0.2 s after the stall's end), saying for how long and what the
  loop's thread did meanwhile, and hands the `Stall` to `on_stall`. `stalled_for()` (any thread) is how long the
  loop has run nothing so far: a supervisor thread's test for a loop that is not coming back.
- Why a loop stalled (`stall_cause`): its thread ran (something blocked the loop: "busy"), the whole process ran
  nothing ("process_stopped": SIGSTOP, a suspended VM, or starved of CPU; `PauseClock`, one thread per process that
  ticks every `PAUSE_TICK_S`, was paused as long), or it waited while the process ran ("waiting": the GIL, a lock,
  blocking I/O).
- Users: the worker (each call's loop and its own; agent/worker_stats.py adds the restart of a stuck worker) and the
  engine's HTTP server (tts_engine/server/app.py, listed in its /healthz). Standard library only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("common.loop_watch")

#: how often a loop probe wakes: 20 wakes a second per loop; a stall is seen whenever a wake falls inside it,
#: so every stall of 50 ms or more, and a stall of d ms with probability d/50
PROBE_PERIOD_S = 0.05
#: a loop that ran nothing for this long is logged as stalled (a caller hears a gap of about as long)
STALL_LOG_S = 1.0


@dataclass(frozen=True)
class Stall:
    """One stall of a loop, logged when the loop ran again."""

    loop: str  # the probe's name
    seconds: float  # how long the loop ran nothing beyond its probe's period
    ended: float  # Unix time the loop ran again
    cause: str  # "busy" | "waiting" | "process_stopped" (see `stall_cause`)


STALL_WORDS = {
    "busy": "its thread was running code that blocked the loop",
    "waiting": "its thread waited while the process ran (the GIL, a lock or blocking I/O on the loop)",
    "process_stopped": "the whole process ran nothing (stopped: SIGSTOP or a suspended VM; or starved of CPU)",
}


PAUSE_TICK_S = 0.1  # the pause clock's period


class PauseClock:
    """A thread that wakes every `PAUSE_TICK_S` and remembers each wake that came much later than due: a time
    when no thread of this process ran (stopped by SIGSTOP, a suspended VM, or given no CPU). A blocked event loop
    does not delay it; a stopped process delays every thread alike. One per process (`pause_clock()`)."""

    def __init__(self, tick_s: float = PAUSE_TICK_S) -> None:
        self.tick_s = tick_s
        self._pauses: deque[tuple[float, float]] = deque(maxlen=50)  # (monotonic end, seconds)
        self._thread = threading.Thread(target=self._run, name="pause_clock", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic() + self.tick_s
        while True:
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            if now - due >= 3 * self.tick_s:
                self._pauses.append((now, now - due))
            due = now + self.tick_s

    def paused_within(self, start: float, end: float) -> float:
        """The longest pause of the process that ended between monotonic `start` and `end` (0.0: none)."""
        return max((s for t, s in list(self._pauses) if start <= t <= end), default=0.0)


_pause_clock: PauseClock | None = None
_pause_clock_lock = threading.Lock()


def pause_clock() -> PauseClock:
    global _pause_clock
    with _pause_clock_lock:
        if _pause_clock is None:
            _pause_clock = PauseClock()
        return _pause_clock


def stall_cause(seconds: float, thread_cpu_s: float, process_paused_s: float) -> str:
    """Why a loop ran nothing for `seconds`: its thread ran (busy: a quarter of the time or more, since on a shared
    host a running thread gets only its share of a core), or the whole process was paused about as long
    (process_stopped), or else its thread waited while the process ran (waiting)."""
    if thread_cpu_s >= 0.25 * seconds:
        return "busy"
    if process_paused_s >= 0.5 * seconds:
        return "process_stopped"
    return "waiting"


class LoopProbe:
    """A timer on one event loop: each wake records how late it ran (ms), i.e. how long the loop was busy with
    something else, and logs a stall of `stall_log_s` or more (the module docstring). Started and stopped on the
    loop's own thread; `take()` and `stalled_for()` are called from the sampler's."""

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float = PROBE_PERIOD_S, *, name: str = "call",
                 stall_log_s: float | None = None,
                 on_stall: Callable[[Stall], None] | None = None) -> None:  # fmt: skip
        self.loop = loop
        self.period_s = period_s
        self.name = name
        self.stall_log_s = STALL_LOG_S if stall_log_s is None else stall_log_s
        self.on_stall = on_stall
        self._lags: list[float] = []
        self._lock = threading.Lock()
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._woke = time.monotonic()  # read by the sampler thread: when the loop last ran this probe
        self._cpu = 0.0  # this loop's thread's CPU seconds at the last wake
        self._clock: PauseClock | None = None

    def start(self) -> None:
        self._clock = pause_clock()
        self._due = self.loop.time() + self.period_s
        self._woke = time.monotonic()
        self._cpu = time.thread_time()
        self._handle = self.loop.call_at(self._due, self._wake)

    def _wake(self) -> None:
        now = self.loop.time()
        lag_s = max(0.0, now - self._due)
        with self._lock:
            self._lags.append(lag_s * 1000.0)
        woke, self._woke = self._woke, time.monotonic()
        cpu, self._cpu = self._cpu, time.thread_time()
        if lag_s >= self.stall_log_s:
            # logged two pause-clock ticks later: by then the clock has run since the stall and seen a pause in it
            self.loop.call_later(2 * PAUSE_TICK_S, self._stalled, lag_s, self._cpu - cpu, woke, self._woke)
        self._due = now + self.period_s
        self._handle = self.loop.call_at(self._due, self._wake)

    def _stalled(self, seconds: float, thread_cpu_s: float, start: float, end: float) -> None:
        paused_s = self._clock.paused_within(start, end + 2 * PAUSE_TICK_S) if self._clock is not None else 0.0
        cause = stall_cause(seconds, thread_cpu_s, paused_s)
        stall = Stall(self.name, round(seconds, 3), round(time.time(), 3), cause)
        logger.warning("event loop stalled: the %s loop ran nothing for %.1f s: %s; its thread used %.2f s of CPU, "
                       "the process was paused %.1f s", self.name, seconds, STALL_WORDS[cause], thread_cpu_s,
                       paused_s)  # fmt: skip
        if self.on_stall is not None:
            self.on_stall(stall)

    def stalled_for(self) -> float:
        """Seconds since this probe's loop last ran it, beyond its period (0 while the loop keeps up)."""
        if not self.running or not self.loop.is_running():
            return 0.0
        return max(0.0, time.monotonic() - self._woke - self.period_s)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def running(self) -> bool:
        return self._handle is not None and not self.loop.is_closed()

    def take(self) -> list[float]:
        with self._lock:
            lags, self._lags = self._lags, []
        return lags


__all__ = ["LoopProbe", "PauseClock", "Stall", "STALL_WORDS", "pause_clock", "stall_cause"]
