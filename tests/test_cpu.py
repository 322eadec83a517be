"""What a process reads of its CPU (common/cpu.py): the cores it may use follow `NUM_CPUS`, else its affinity; the CPU
of its child processes counts while they run and after they ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from common.cpu import children_cpu_s, usable_cores


def test_usable_cores_follow_num_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUM_CPUS", "3.5")
    assert usable_cores() == 3.5
    monkeypatch.delenv("NUM_CPUS")
    own = usable_cores()
    assert 0 < own <= len(os.sched_getaffinity(0))
    for bad in ("four", "0", "-2", "nan", "inf"):  # passed over, as LiveKit passes it over: the process's own cores
        monkeypatch.setenv("NUM_CPUS", bad)
        assert usable_cores() == own


def test_a_child_process_counts_while_it_runs_and_after_it_ended() -> None:
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(1.5)"
    before = children_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        deadline = time.monotonic() + 10
        while children_cpu_s() - before < 0.29 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, "the child ended before its CPU was seen"  # seen while it still runs
    finally:
        child.wait(timeout=30)
    assert children_cpu_s() - before >= 0.29  # and kept once it ended (its parent reaped it)
