"""What the worker measures about itself: one sampler thread per process (agent/worker.py starts it at its first
load check).

- Every second a record: the process's CPU (user+sys) and CPU per thread grouped by name (Python's name where
  Python started the thread, else the kernel's `comm`), the host's busy share of the cores this process may use,
  RSS, GC pauses (`gc.callbacks`), the lag of every call's event loop (a `LoopProbe` per job loop: under the THREAD
  executor each call has its own loop in its own thread), and what the worker gives it: calls, engine streams and
  the load it last reported to LiveKit.
- `cpu_cores(window_s)` / `host_busy(window_s)`: this process's CPU in cores and the host's busy share over the
  last seconds; the load's CPU term reads the first.
- With a path (`AGENT_STATS_PATH`) each record is appended there as one JSON line; docs/operations.md gives the
  format ("The worker's stats file"). Each line carries its own cost (`sampler_ms`).
- `usable_cores()`: the cores this process may use (`NUM_CPUS`, else its CPU affinity capped by a cgroup quota).
- Stall watchdog: every `LoopProbe` (each call's loop, and the worker's own loop: `watch_loop(name="worker")`) logs
  a WARNING from its loop once the loop runs again after a stall of `STALL_LOG_S` or more (0.2 s after the stall's
  end), saying for how long and what the loop's thread did meanwhile: it ran (something blocked the loop), the
  whole process ran nothing (stopped: SIGSTOP, a suspended VM; or starved of CPU: `PauseClock`, a thread that
  ticks every 0.1 s, was paused as long), or it waited while the process ran (the GIL, a lock, blocking I/O).
  The sampler thread checks every second for a loop that is still stalled: past `STALL_RESTART_S` while the
  process itself runs, it logs an ERROR with every thread's stack and exits with `STALL_EXIT_STATUS`, so the
  supervisor (scripts/run_worker.sh) restarts the worker and recovers its calls. `stalls()` gives the health
  endpoint the stalls seen (agent/worker.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import gc
import json
import logging
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("agent.worker_stats")

SAMPLE_PERIOD_S = 1.0
#: how often a loop probe wakes: 20 wakes a second per call; a stall is seen whenever a wake falls inside it,
#: so every stall of 50 ms or more, and a stall of d ms with probability d/50
PROBE_PERIOD_S = 0.05
LATE_LAG_MS = 20.0  # one audio frame: a loop that stalled this long sent that call's frame late
#: a loop that ran nothing for this long is logged as stalled (the caller hears a gap of about as long)
STALL_LOG_S = 1.0
#: a loop still stalled after this long, in a process that runs, is not coming back: the worker exits for a restart
STALL_RESTART_S = 30.0
STALL_EXIT_STATUS = 70  # EX_SOFTWARE: scripts/run_worker.sh restarts a worker that exits with it
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_NUMBERED = re.compile(r"[-_]\d+")  # "Thread-7 (run)" and "asyncio_3" are one kind of thread each


def usable_cores() -> float:
    """Cores this process may use: `NUM_CPUS` (LiveKit's override) or its CPU affinity, capped by a cgroup
    CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) when there is one."""
    if raw := os.environ.get("NUM_CPUS"):
        return float(raw)
    cores = float(len(os.sched_getaffinity(0)))
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ):
        try:
            parts = Path(quota_file).read_text().split()
            if period_file is not None:
                parts.append(Path(period_file).read_text().strip())
            if parts[0] not in ("max", "-1") and len(parts) > 1 and float(parts[1]) > 0:
                return min(cores, float(parts[0]) / float(parts[1]))
        except (OSError, ValueError, IndexError):
            continue
    return cores


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


@dataclass
class _GcTimer:
    """gc.callbacks hook. It runs inside the collection with the GIL held, so it takes no lock (the sampler
    may be the thread that triggered the collection); the sampler reads the cumulative counters."""

    count: int = 0
    gen2: int = 0
    total_ms: float = 0.0
    pauses: list[float] = field(default_factory=list)
    _t0: float = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        ms = (time.perf_counter() - self._t0) * 1000.0
        self.count += 1
        self.gen2 += info.get("generation") == 2
        self.total_ms += ms
        self.pauses.append(ms)


def _read_threads() -> dict[int, tuple[str, int]]:
    """tid -> (kernel comm, CPU ticks user+sys) for every thread of this process (os.read: the GIL is released
    during each read, and it is ~40 % cheaper than open())."""
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fd = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:  # the thread ended between listdir and open
            continue
        close = stat.rfind(b")")
        fields = stat[close + 2 :].split()  # fields[0] is stat's field 3 (state); utime, stime are 14, 15
        comm = stat[stat.find(b"(") + 1 : close].decode(errors="replace")
        threads[int(tid)] = (comm, int(fields[11]) + int(fields[12]))
    return threads


def _host_cpu_s() -> float:
    """CPU seconds used by everything on this host (or in this container: its cgroup's counter when there is one)."""
    try:
        with open("/sys/fs/cgroup/cpu.stat") as f:  # cgroup v2
            for line in f:
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/cpuacct/cpuacct.usage") as f:  # cgroup v1, ns
            return int(f.read()) / 1e9
    except (OSError, ValueError):
        pass
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) * _TICK_S  # all but idle and iowait (guest is inside user)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


@dataclass(frozen=True)
class _Counters:
    t: float  # monotonic
    process_s: float  # this process's CPU seconds (user+sys)
    host_s: float  # the host's (or container's) CPU seconds


def _counters() -> _Counters:
    t = os.times()
    return _Counters(time.monotonic(), t.user + t.system, _host_cpu_s())


class WorkerStats:
    """The sampler (see the module doc). `state()` gives what only the worker knows: `calls`, `engine_active`,
    `engine_capacity`; `note_load(value, terms, jobs)` records each load the worker reports and LiveKit's own count of
    the worker's jobs it came from (`livekit_jobs`, beside `calls`, the calls our entrypoint holds)."""

    def __init__(self, path: str | Path | None, state: Callable[[], dict[str, int]]) -> None:
        self.path = Path(path) if path else None
        self.state = state
        self.cores = usable_cores()
        self._probes: set[LoopProbe] = set()
        self._lock = threading.Lock()
        self._gc = _GcTimer()
        self._gc_seen = (0, 0, 0.0)
        self._history: deque[_Counters] = deque(maxlen=120)  # one per sample: the CPU windows are read from it
        self._threads: dict[int, tuple[str, int]] = {}
        self._load: dict[str, Any] = {}
        self._stalls: deque[Stall] = deque(maxlen=20)
        self.stall_restart_s = STALL_RESTART_S
        self.exit: Callable[[int], None] = os._exit  # what the watchdog calls on a loop past stall_restart_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker_stats", daemon=True)

    def start(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        gc.callbacks.append(self._gc)
        self._history.append(_counters())
        self._threads = _read_threads()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)

    # -- what the worker calls
    def watch_loop(self, name: str = "call") -> LoopProbe:
        """Probe the running loop (a call's, or the worker's own: `name`); call `stop()` on the result from that loop
        when it is done with (a call's, when the call ends)."""
        probe = LoopProbe(asyncio.get_running_loop(), name=name, on_stall=self._stalls.append)
        probe.start()
        with self._lock:
            self._probes.add(probe)
        return probe

    def note_load(self, value: float, terms: dict[str, float], jobs: int | None = None) -> None:
        self._load = {"load": round(value, 4), "load_terms": {k: round(v, 4) for k, v in terms.items()},
                      "livekit_jobs": jobs}  # fmt: skip

    def stalls(self) -> list[dict[str, Any]]:
        """The last stalls logged, oldest first (for the health endpoint)."""
        return [dataclasses.asdict(stall) for stall in list(self._stalls)]

    def check_stuck(self, sampler_late_s: float) -> None:
        """The watchdog's check (the sampler thread's, every sample): a loop stalled past `stall_restart_s` while
        this thread ran on time (`sampler_late_s`: how late its own wake was; a stopped process wakes it late too,
        and a stall that ends with the stop is the probe's to log) ends the process for the supervisor."""
        with self._lock:
            probes = list(self._probes)
        stuck = [(p, p.stalled_for()) for p in probes]
        stuck = [(p, s) for p, s in stuck if s >= self.stall_restart_s]
        if not stuck or sampler_late_s >= 1.0:
            return
        names = ", ".join(f"the {p.name} loop for {s:.0f} s" for p, s in stuck)
        logger.error("event loop stuck: %s (past %.0f s) while the process runs; exiting with status %d for the "
                     "supervisor to restart the worker; every thread's stack follows", names, self.stall_restart_s,
                     STALL_EXIT_STATUS)  # fmt: skip
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.exit(STALL_EXIT_STATUS)

    def cpu_cores(self, window_s: float) -> float:
        """This process's CPU over about the last `window_s` seconds (at least since the first sample), in cores."""
        now, then = _counters(), self._since(window_s)
        return (now.process_s - then.process_s) / (now.t - then.t) if now.t - then.t > 1e-3 else 0.0

    def host_busy(self, window_s: float) -> float:
        """The busy share of the cores this process may use, over about the last `window_s` seconds: everything on
        the host (or in the container) counts, since it all competes for those cores."""
        now, then = _counters(), self._since(window_s)
        return (now.host_s - then.host_s) / ((now.t - then.t) * self.cores) if now.t - then.t > 1e-3 else 0.0

    def _since(self, window_s: float) -> _Counters:
        history = list(self._history)  # the sampler thread appends to it
        now = time.monotonic()
        return next((c for c in reversed(history) if now - c.t >= window_s), history[0])

    # -- the sampler thread
    def _run(self) -> None:
        due = time.monotonic()
        failed = False
        while True:
            due = max(due + SAMPLE_PERIOD_S, time.monotonic())  # a late sample shifts the schedule, never bunches
            if self._stop.wait(due - time.monotonic()):
                return
            try:
                self.check_stuck(sampler_late_s=time.monotonic() - due)
            except Exception:
                logger.exception("worker stats: the stall check failed")
            try:
                record = self.sample()
                if self.path is not None:
                    with self.path.open("a") as f:
                        f.write(json.dumps(record, separators=(",", ":")) + "\n")
                failed = False
            except Exception:  # a bad sample is logged once and the next one tried; it never stops the worker
                if not failed:
                    logger.exception("worker stats: sample failed")
                failed = True

    def sample(self) -> dict[str, Any]:
        """One record (the module doc and docs/operations.md list its keys), covering the time since the last."""
        t0 = time.perf_counter()
        prev, now = self._history[-1], _counters()
        self._history.append(now)
        interval = max(now.t - prev.t, 1e-6)
        threads, python_cores = self._thread_cpu(interval)
        state = self.state()
        record: dict[str, Any] = {
            "t_wall": round(time.time(), 3),
            "interval_s": round(interval, 3),
            "cpu_s": round(now.process_s, 3),
            "cpu_cores": round((now.process_s - prev.process_s) / interval, 3),
            "cpu_python_cores": round(python_cores, 3),
            "cpu_usable": self.cores,
            "host_busy": round((now.host_s - prev.host_s) / (interval * self.cores), 3),
            "threads": threads,
            "loop_lag_ms": self._loop_lag(),
            "gc": self._gc_interval(),
            "rss_mb": round(_rss_mb(), 1),
            "calls": state.get("calls", 0),
            "engine": {"active": state.get("engine_active", 0), "capacity": state.get("engine_capacity", 0)},
            **(self._load or {"load": None, "load_terms": {}, "livekit_jobs": None}),
        }
        record["sampler_ms"] = round((time.perf_counter() - t0) * 1000.0, 3)
        return record

    def _thread_cpu(self, interval_s: float) -> tuple[dict[str, dict[str, float]], float]:
        """CPU per thread kind over the interval: name -> {"n": threads, "cores": CPU s / s}; and the part of it
        spent by threads Python started (they run Python under the GIL, except inside native calls)."""
        python_names = {t.native_id: t.name for t in threading.enumerate()}
        now = _read_threads()
        groups: dict[str, dict[str, float]] = {}
        python_ticks = 0
        for tid, (comm, ticks) in now.items():
            delta = ticks - self._threads.get(tid, (comm, 0))[1]
            name = _NUMBERED.sub("", python_names.get(tid, comm)).strip()
            group = groups.setdefault(name, {"n": 0, "cores": 0.0})
            group["n"] += 1
            group["cores"] += delta * _TICK_S / interval_s
            if tid in python_names:
                python_ticks += delta
        self._threads = now
        for group in groups.values():
            group["cores"] = round(group["cores"], 3)
        return groups, python_ticks * _TICK_S / interval_s

    def _loop_lag(self) -> dict[str, Any]:
        with self._lock:
            probes = list(self._probes)
            self._probes = {p for p in probes if p.running}
        per_loop = [p.take() for p in probes]
        lags = np.array([lag for loop in per_loop for lag in loop])
        if lags.size == 0:
            return {"loops": len(self._probes), "samples": 0, "p50": None, "p95": None, "p99": None, "max": None,
                    "late_loops": 0}  # fmt: skip
        p50, p95, p99 = np.percentile(lags, [50, 95, 99])
        return {
            "loops": len(self._probes),
            "samples": int(lags.size),
            "p50": round(float(p50), 2),
            "p95": round(float(p95), 2),
            "p99": round(float(p99), 2),
            "max": round(float(lags.max()), 2),
            "late_loops": sum(1 for loop in per_loop if loop and max(loop) >= LATE_LAG_MS),
        }

    def _gc_interval(self) -> dict[str, Any]:
        gc_ = self._gc
        pauses, gc_.pauses = gc_.pauses, []
        count, gen2, total = gc_.count, gc_.gen2, gc_.total_ms
        seen_count, seen_gen2, seen_total = self._gc_seen
        self._gc_seen = (count, gen2, total)
        return {
            "count": count - seen_count,
            "gen2": gen2 - seen_gen2,
            "ms": round(total - seen_total, 3),
            "max_ms": round(max(pauses), 3) if pauses else 0.0,
        }


_sampler: WorkerStats | None = None
_sampler_lock = threading.Lock()


def start(path: str | Path | None, state: Callable[[], dict[str, int]]) -> WorkerStats:
    """The process's sampler, started on the first call (later calls return it; their arguments are ignored)."""
    global _sampler
    with _sampler_lock:
        if _sampler is None:
            _sampler = WorkerStats(path, state)
            _sampler.start()
        return _sampler


def running() -> WorkerStats | None:
    return _sampler
