"""Where the host's CPU goes while a many-calls run plays (issue 32): every process's CPU, grouped by its role.

- `HostSampler(path, bench_pid).start()`: a thread that once a second reads every process on the host (psutil)
  and appends one JSON line to `path`: `t_wall`, `busy` (the host's busy share of all its cores) and `roles`,
  the cores each role used since the last line. `stop()` ends it.
- A process's role comes from its command line (`role_of`), else from its parent's: LiveKit's server, the
  engine servers, the workers (`python -m agent start|standby` and their job processes), the LLM/STT stand-in,
  the token server, the caller processes (children of the bench itself), the bench, and `other`.
- `summarize(records, t0, t1)`: per role the mean and max cores over [t0, t1), and the host's busy share, so a
  level's report says whether the workers, the callers or LiveKit took the host when the audio went late.
- `read(path)` is worker_stats.read: the same torn-line rules.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from lab.convbench.worker_stats import read

__all__ = ["HostSampler", "read", "role_of", "summarize"]

INTERVAL_S = 1.0
ROLES = ("workers", "callers", "livekit_server", "engine_server", "stand_in", "token_server", "bench", "other")
# (role, pattern in the command line), first match wins
_RULES = (
    ("livekit_server", re.compile(r"livekit-server")),
    ("engine_server", re.compile(r"-m tts_engine serve\b")),
    ("stand_in", re.compile(r"-m lab\.fake_openai\b")),
    ("token_server", re.compile(r"token_server")),
    ("workers", re.compile(r"-m agent (start|standby)\b")),
)


def role_of(cmdline: list[str], parent_role: str | None, is_bench: bool) -> str:
    """A process's role: its own command line's, else what its parent's makes it (the bench's children are the
    caller processes), else `other`."""
    if is_bench:
        return "bench"
    line = " ".join(cmdline)
    for role, pattern in _RULES:
        if pattern.search(line):
            return role
    if parent_role == "bench":
        return "callers"
    return parent_role if parent_role not in (None, "other") else "other"


class HostSampler:
    """One JSON line a second to `path`: the host's busy share and the cores each role used (module docstring)."""

    def __init__(self, path: Path, bench_pid: int | None = None, interval_s: float = INTERVAL_S) -> None:
        self.path = Path(path)
        self.bench_pid = bench_pid if bench_pid is not None else os.getpid()
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[tuple[int, float], float] = {}  # (pid, create_time) -> CPU seconds at the last sample

    def start(self) -> HostSampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        psutil.cpu_percent(None)  # the first call only sets the baseline
        self._thread = threading.Thread(target=self._run, name="host_cpu", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        self.sample()  # the baseline of every process's CPU seconds
        with self.path.open("a") as out:
            last = time.monotonic()
            while not self._stop.wait(self.interval_s):
                roles = self.sample()
                now = time.monotonic()
                record = {"t_wall": round(time.time(), 3), "interval_s": round(now - last, 3),
                          "busy": round(psutil.cpu_percent(None) / 100.0, 3),
                          "cores": psutil.cpu_count() or 1,
                          "roles": {r: round(s / max(now - last, 1e-3), 3) for r, s in roles.items()}}  # fmt: skip
                last = now
                out.write(json.dumps(record) + "\n")
                out.flush()

    def sample(self) -> dict[str, float]:
        """CPU seconds each role used since the last call (a process first seen counts from its next sample)."""
        procs = {}
        for p in psutil.process_iter(["pid", "ppid", "cmdline", "create_time", "cpu_times"]):
            info = p.info
            if info.get("cpu_times") is None:
                continue
            procs[info["pid"]] = info
        roles: dict[str, str] = {}

        def role(pid: int, depth: int = 0) -> str:
            if pid in roles:
                return roles[pid]
            info = procs.get(pid)
            if info is None or depth > 32:
                return "other"
            parent = info.get("ppid")
            parent_role = role(parent, depth + 1) if parent and parent != pid else None
            roles[pid] = role_of(info.get("cmdline") or [], parent_role, pid == self.bench_pid)
            return roles[pid]

        used = dict.fromkeys(ROLES, 0.0)
        seen: dict[tuple[int, float], float] = {}
        for pid, info in procs.items():
            key = (pid, info.get("create_time") or 0.0)
            t = info["cpu_times"]
            seen[key] = t.user + t.system
            if key in self._last:
                used[role(pid)] += max(0.0, seen[key] - self._last[key])
        self._last = seen
        return used


def _mean_max(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "max": None}
    return {"mean": round(sum(values) / len(values), 3), "max": round(max(values), 3)}


def summarize(records: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """The host over [t0, t1): samples, cores, busy share (mean, max) and each role's cores (mean, max)."""
    rows = [r for r in records if t0 <= r["t_wall"] < t1]
    if not rows:
        return {"samples": 0}
    roles = {role: _mean_max([float((r.get("roles") or {}).get(role, 0.0)) for r in rows]) for role in ROLES}
    return {"samples": len(rows), "cores": max(int(r.get("cores") or 0) for r in rows),
            "busy": _mean_max([float(r.get("busy") or 0.0) for r in rows]), "roles": roles}
