"""What a Linux process reads about its own CPU and memory, and the host's (from /proc and the cgroup files).

- `usable_cores()`: the cores this process may use: `NUM_CPUS` (LiveKit's override), else its CPU affinity capped by
  a cgroup CPU quota. The worker's load and the engine's CPU thread count read it, so both see a container's limit.
- `counters()`: a `Counters` reading (monotonic time, this process's CPU seconds, the host's or container's CPU
  seconds); two readings give CPU in cores and the host's busy share over the time between them.
- `children_cpu_s()`: CPU seconds of every process below this one (a PROCESS worker's job processes, its
  forkserver, LiveKit's inference process), live or ended; `counters()` carries it as `children_s`.
- `read_threads()`: every thread of this process with its kernel name and CPU ticks (`TICK_S` seconds each).
- `rss_mb()`: this process's resident memory.
Standard library only; Linux (the deployment's platform).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def usable_cores() -> float:
    """Cores this process may use: `NUM_CPUS` (LiveKit's override) or its CPU affinity, capped by a cgroup
    CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) when there is one."""
    try:  # as LiveKit reads it; a value that is not a positive number is passed over, as LiveKit does
        if 0 < (declared := float(os.environ.get("NUM_CPUS") or "nan")) < math.inf:
            return declared
    except ValueError:
        pass
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


def read_threads() -> dict[int, tuple[str, int]]:
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


def _stat_fields(pid: int | str) -> list[bytes]:
    """/proc/PID/stat after the command name: [0] is stat's field 3 (state), [1] the parent pid; utime, stime,
    cutime, cstime at 11-14."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 1024)
    finally:
        os.close(fd)
    return stat[stat.rfind(b")") + 2 :].split()


def children_cpu_s() -> float:
    """CPU seconds of every process below this one: for each one still running, its own and that of the children it
    has reaped (cutime, cstime), and this process's reaped children's. A process that ends moves its CPU into its
    parent's reaped count, so the sum only grows (a child is counted in neither only between its exit and the
    parent's wait, a moment). One pass over /proc/*/stat, the tree found by parent pid: its cost follows the host's
    process count, not the threads of the job processes. Linux; 0.0 where /proc is not readable."""
    try:
        own = _stat_fields("self")
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0.0
    ticks_of: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    for name in names:
        try:
            fields = _stat_fields(name)
        except OSError:  # it ended between the listing and the read
            continue
        pid = int(name)
        ticks_of[pid] = sum(int(fields[i]) for i in (11, 12, 13, 14))
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1] is stat's field 4, the parent pid
    ticks = int(own[13]) + int(own[14])
    todo, seen = list(children.get(os.getpid(), ())), set()
    while todo:
        pid = todo.pop()
        if pid not in seen:  # a pid reused during the pass cannot make the walk go round
            seen.add(pid)
            ticks += ticks_of[pid]
            todo.extend(children.get(pid, ()))
    return ticks * TICK_S


def host_cpu_s() -> float:
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
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) * TICK_S  # all but idle and iowait (guest is inside user)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


@dataclass(frozen=True)
class Counters:
    t: float  # monotonic
    process_s: float  # this process's CPU seconds (user+sys)
    host_s: float  # the host's (or container's) CPU seconds
    children_s: float = 0.0  # the CPU seconds of the processes below this one (`children_cpu_s`)


def counters() -> Counters:
    t = os.times()
    return Counters(time.monotonic(), t.user + t.system, host_cpu_s(), children_cpu_s())


__all__ = ["Counters", "TICK_S", "children_cpu_s", "counters", "host_cpu_s", "read_threads", "rss_mb", "usable_cores"]
