"""What the worker measures about itself: one sampler thread per process (agent/worker.py starts it at its first
load check).

- Every second a record: the process's CPU (user+sys), its child processes' CPU, and CPU per thread grouped by
  name (Python's name where Python started the thread, else the kernel's `comm`), the host's busy share of the
  cores this process may use (common/cpu.py), RSS, GC pauses (`gc.callbacks`), the lag of every call's event loop
  (a `LoopProbe` per job loop, common/loop_watch.py: under the THREAD executor each call has its own loop in its
  own thread), and what the worker gives it: calls, engine streams and the load it last reported to LiveKit.
- `cpu_cores(window_s)` / `host_busy(window_s)`: the worker's CPU in cores (this process and its child processes:
  a PROCESS worker's calls run there) and the host's busy share over the last seconds; the load's CPU term reads
  the first.
- With a path (`AGENT_STATS_PATH`) each record is appended there as one JSON line; docs/operations.md gives the
  format ("The worker's stats file"). Each line carries its own cost (`sampler_ms`).
- Stall watchdog: `watch_loop(name)` puts a `LoopProbe` on the running loop (each call's, and the worker's own:
  "worker"), which logs each stall with its cause. The sampler thread checks every second for a loop that is still
  stalled: past `STALL_RESTART_S` while the process itself runs, it logs an ERROR with every thread's stack and
  exits with `STALL_EXIT_STATUS`, so the supervisor (scripts/run_worker.sh) restarts the worker and recovers its
  calls. `stalls()` gives the health endpoint the stalls seen (agent/worker.py).
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

from common.cpu import TICK_S, Counters, counters, read_threads, rss_mb, usable_cores
from common.loop_watch import LoopProbe, Stall

logger = logging.getLogger("agent.worker_stats")

SAMPLE_PERIOD_S = 1.0
LATE_LAG_MS = 20.0  # one audio frame: a loop that stalled this long sent that call's frame late
#: a loop still stalled after this long, in a process that runs, is not coming back: the worker exits for a restart
STALL_RESTART_S = 30.0
STALL_EXIT_STATUS = 70  # EX_SOFTWARE: scripts/run_worker.sh restarts a worker that exits with it
_NUMBERED = re.compile(r"[-_]\d+")  # "Thread-7 (run)" and "asyncio_3" are one kind of thread each


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
        self._history: deque[Counters] = deque(maxlen=120)  # one per sample: the CPU windows are read from it
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
        self._history.append(counters())
        self._threads = read_threads()
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
        """The worker's CPU over about the last `window_s` seconds (at least since the first sample), in cores: this
        process's and its child processes' (a PROCESS worker's calls, LiveKit's inference process)."""
        now, then = counters(), self._since(window_s)
        used = now.process_s + now.children_s - then.process_s - then.children_s
        return used / (now.t - then.t) if now.t - then.t > 1e-3 else 0.0

    def host_busy(self, window_s: float) -> float:
        """The busy share of the cores this process may use, over about the last `window_s` seconds: everything on
        the host (or in the container) counts, since it all competes for those cores."""
        now, then = counters(), self._since(window_s)
        return (now.host_s - then.host_s) / ((now.t - then.t) * self.cores) if now.t - then.t > 1e-3 else 0.0

    def _since(self, window_s: float) -> Counters:
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
        prev, now = self._history[-1], counters()
        self._history.append(now)
        interval = max(now.t - prev.t, 1e-6)
        threads, python_cores = self._thread_cpu(interval)
        state = self.state()
        record: dict[str, Any] = {
            "t_wall": round(time.time(), 3),
            "interval_s": round(interval, 3),
            "cpu_s": round(now.process_s, 3),
            "cpu_cores": round((now.process_s - prev.process_s) / interval, 3),
            "cpu_children_cores": round(max(0.0, now.children_s - prev.children_s) / interval, 3),
            "cpu_python_cores": round(python_cores, 3),
            "cpu_usable": self.cores,
            "host_busy": round((now.host_s - prev.host_s) / (interval * self.cores), 3),
            "threads": threads,
            "loop_lag_ms": self._loop_lag(),
            "gc": self._gc_interval(),
            "rss_mb": round(rss_mb(), 1),
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
        now = read_threads()
        groups: dict[str, dict[str, float]] = {}
        python_ticks = 0
        for tid, (comm, ticks) in now.items():
            delta = ticks - self._threads.get(tid, (comm, 0))[1]
            name = _NUMBERED.sub("", python_names.get(tid, comm)).strip()
            group = groups.setdefault(name, {"n": 0, "cores": 0.0})
            group["n"] += 1
            group["cores"] += delta * TICK_S / interval_s
            if tid in python_names:
                python_ticks += delta
        self._threads = now
        for group in groups.values():
            group["cores"] = round(group["cores"], 3)
        return groups, python_ticks * TICK_S / interval_s

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
