"""The worker's sampler (agent/worker_stats.py): what each record holds, measured on this process for real: a loop
that is blocked shows its lag, a collection shows as a GC pause, a busy thread shows under its name, the file gets
one JSON line per sample; a loop stuck past the restart threshold ends the worker. The loop probe itself is
tests/test_loop_watch.py."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent import worker_stats
from agent.worker_stats import WorkerStats
from common.cpu import usable_cores

KEYS = {
    "t_wall", "interval_s", "cpu_s", "cpu_cores", "cpu_children_cores", "cpu_python_cores", "cpu_usable", "host_busy",
    "threads",
    "loop_lag_ms", "gc", "rss_mb", "calls", "engine", "load", "load_terms", "livekit_jobs", "sampler_ms",
}  # fmt: skip


def state() -> dict[str, int]:
    return {"calls": 3, "engine_active": 2, "engine_capacity": 16}


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture
def manual(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler thread never samples by itself: the test's own sample() covers everything since start."""
    monkeypatch.setattr(worker_stats, "SAMPLE_PERIOD_S", 3600.0)


async def test_a_record_holds_every_field_and_measures_this_process(manual: None) -> None:
    stats = WorkerStats(None, state)
    stats.start()
    try:
        probe = stats.watch_loop()
        busy = [threading.Thread(target=spin, args=(0.3,), name=f"busy-{i}") for i in range(2)]
        for thread in busy:
            thread.start()
        for thread in busy:
            thread.join()
        gc.collect()
        await asyncio.sleep(0.2)  # the probe wakes a few times
        stats.note_load(0.45, {"calls": 0.5, "engine": 0.125, "cpu": 0.2}, jobs=4)
        record = stats.sample()
        probe.stop()
    finally:
        stats.stop()
    assert set(record) == KEYS
    assert record["cpu_cores"] > 0 and record["cpu_python_cores"] > 0 and record["host_busy"] > 0
    assert record["cpu_usable"] == usable_cores()
    assert record["gc"]["count"] >= 1 and record["gc"]["gen2"] >= 1 and record["gc"]["ms"] > 0
    assert record["loop_lag_ms"]["loops"] == 1 and record["loop_lag_ms"]["samples"] >= 2
    assert record["calls"] == 3 and record["engine"] == {"active": 2, "capacity": 16}
    assert record["load"] == 0.45 and record["load_terms"] == {"calls": 0.5, "engine": 0.125, "cpu": 0.2}
    assert record["livekit_jobs"] == 4
    assert record["rss_mb"] > 10 and record["sampler_ms"] > 0


def test_thread_cpu_is_grouped_by_python_name(manual: None) -> None:
    stats = WorkerStats(None, state)
    stats.start()
    try:
        done = threading.Event()

        def work() -> None:
            spin(0.25)
            done.wait()  # alive at the sample, so its CPU is counted under its name

        busy = [threading.Thread(target=work, name=f"busy-{i}") for i in range(2)]
        for thread in busy:
            thread.start()
        time.sleep(0.6)
        record = stats.sample()
        done.set()
        for thread in busy:
            thread.join()
    finally:
        stats.stop()
    group = record["threads"]["busy"]  # "busy-0" and "busy-1" are one kind
    assert group["n"] == 2 and group["cores"] > 0
    assert "MainThread" in record["threads"]


def test_the_file_gets_one_json_line_per_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_stats, "SAMPLE_PERIOD_S", 0.1)
    path = tmp_path / "sub" / "stats.jsonl"
    stats = WorkerStats(path, state)
    stats.start()
    try:
        deadline = time.monotonic() + 20
        while (not path.exists() or len(path.read_text().splitlines()) < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stats.stop()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 3 and all(set(row) == KEYS for row in rows)
    assert rows[0]["load"] is None  # no load reported yet
    assert all(b["t_wall"] > a["t_wall"] and b["cpu_s"] >= a["cpu_s"] for a, b in zip(rows, rows[1:], strict=False))


def test_a_failing_sample_is_logged_and_the_next_one_still_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(worker_stats, "SAMPLE_PERIOD_S", 0.05)
    calls = {"n": 0}

    def flaky() -> dict[str, int]:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise RuntimeError("state unavailable")
        return state()

    path = tmp_path / "stats.jsonl"
    stats = WorkerStats(path, flaky)
    stats.start()
    try:
        deadline = time.monotonic() + 20
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stats.stop()
    assert path.exists() and json.loads(path.read_text().splitlines()[0])["calls"] == 3
    assert sum("sample failed" in r.getMessage() for r in caplog.records) == 1  # logged once, not per second


def test_cpu_windows_measure_this_process_and_the_host(manual: None) -> None:
    stats = WorkerStats(None, state)
    before = time.monotonic()
    stats.start()
    try:
        spin(0.3)  # 0.3 s of this thread's CPU
        cores, busy = stats.cpu_cores(5.0), stats.host_busy(5.0)  # one sample so far: the window is since start
    finally:
        stats.stop()
    window = time.monotonic() - before  # at least the window they measured over
    assert cores * window >= 0.29  # the process used at least the spin's CPU (10 ms ticks)
    assert busy * window * stats.cores >= 0.29  # and the host (or container) counted it too


def test_the_cpu_of_child_processes_counts_for_the_worker(manual: None) -> None:
    """A PROCESS worker's calls run in its child processes (their forkserver's children): their CPU is the worker's
    too, in the load's window and in the record, while they run and after they ended."""
    stats = WorkerStats(None, state)
    before = time.monotonic()
    stats.start()
    try:
        spinner = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
        grandchild = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spinner!r}], check=True)"
        subprocess.run([sys.executable, "-c", grandchild], check=True, timeout=60)  # a child that waits for its own
        cores, record = stats.cpu_cores(30.0), stats.sample()
    finally:
        stats.stop()
    window = time.monotonic() - before
    assert cores * window >= 0.39  # the grandchild's 0.4 s spin, counted once it ended
    assert record["cpu_children_cores"] * record["interval_s"] >= 0.39
    assert record["cpu_cores"] * record["interval_s"] < 0.39  # this process itself did not spin


# -- the stall watchdog ----------------------------------------------------------------------------------------


CHILD = """
import asyncio, logging, sys, time
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(created).3f %(levelname)s %(message)s")
from agent import worker_stats
stats = worker_stats.WorkerStats(None, lambda: {})
stats.stall_restart_s = float(sys.argv[1])
stats.start()
async def main():
    stats.watch_loop(name="worker")
    print("ready", flush=True)
    await asyncio.sleep(float(sys.argv[2]))
    if float(sys.argv[3]) > 0:
        time.sleep(float(sys.argv[3]))  # stuck on the loop, the process running
asyncio.run(main())
"""


def run_child(restart_s: float, run_s: float, stuck_s: float) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(restart_s), str(run_s), str(stuck_s)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_a_stopped_worker_logs_its_stall_within_two_seconds_of_going_on() -> None:
    """The issue's fault: the worker frozen by SIGSTOP. Nothing in it can run meanwhile; once continued, its loop
    logs the stall, with the whole process paused as the cause, well within 2 s."""
    child = run_child(restart_s=60, run_s=6, stuck_s=0)
    try:
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(child.pid, signal.SIGCONT)
        continued = time.time()
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    lines = [line for line in err.splitlines() if "event loop stalled" in line]
    assert len(lines) == 1, err
    logged = float(lines[0].split()[0])
    print(f"logged {logged - continued:.2f} s after SIGCONT: {lines[0]}")
    assert 0 <= logged - continued < 2.0, (logged - continued, lines)
    stalled = float(re.search(r"the worker loop ran nothing for ([\d.]+) s", lines[0]).group(1))
    assert 2.8 <= stalled <= 3.3 and "the whole process ran nothing" in lines[0], lines


def test_a_loop_stuck_past_the_restart_threshold_ends_the_worker_for_its_supervisor() -> None:
    """A loop that stays stuck while the process runs: the sampler thread logs it with every thread's stack and
    exits with STALL_EXIT_STATUS (scripts/run_worker.sh restarts a worker that exits with it)."""
    child = run_child(restart_s=1.5, run_s=0.3, stuck_s=30)
    try:
        started = time.monotonic()
        _, err = child.communicate(timeout=20)
        took = time.monotonic() - started
    finally:
        child.kill()
    assert child.returncode == worker_stats.STALL_EXIT_STATUS, (child.returncode, err)
    assert took < 5.0, took
    assert "event loop stuck: the worker loop for" in err and "exiting with status 70" in err, err
    assert "time.sleep" in err or "in main" in err, err  # the stack of the loop's thread, where it is stuck
