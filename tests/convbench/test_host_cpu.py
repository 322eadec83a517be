"""The host sampler of the many-calls run (lab/convbench/host_cpu.py): which role a process gets, that a
busy child of the bench is counted as a caller's CPU, and the per-level summary of its file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lab.convbench import host_cpu


def test_roles_come_from_the_command_line_then_the_parent() -> None:
    role = host_cpu.role_of
    assert role(["/tmp/tools/livekit-server-1.13.5/livekit-server", "--config", "x"], None, False) == "livekit_server"
    assert role(["python", "-m", "tts_engine", "serve", "--port", "1"], None, False) == "engine_server"
    assert role(["python", "-m", "lab.fake_openai", "--preset", "production"], None, False) == "stand_in"
    assert role(["python", "-m", "token_server"], None, False) == "token_server"
    assert role(["/v/bin/python", "-m", "agent", "start"], "other", False) == "workers"
    assert role(["/v/bin/python", "-m", "agent", "standby"], None, False) == "workers"
    # a job process of a worker, a caller process of the bench, the bench itself, anything else
    assert role(["python", "-c", "from multiprocessing.spawn import spawn_main"], "workers", False) == "workers"
    assert role(["python", "-c", "from multiprocessing.spawn import spawn_main"], "bench", False) == "callers"
    assert role(["python", "-m", "lab.convbench.many"], None, True) == "bench"
    assert role(["sshd"], None, False) == "other"
    assert role(["python", "-m", "agent", "recover"], None, False) == "other"  # not a worker


def test_a_busy_child_of_the_bench_counts_as_a_caller(tmp_path: Path) -> None:
    path = tmp_path / "host.jsonl"
    sampler = host_cpu.HostSampler(path, interval_s=0.25).start()
    try:
        spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass"
        subprocess.run([sys.executable, "-c", spin], check=True, timeout=30)
        time.sleep(0.6)  # the sample after the child's last busy interval
    finally:
        sampler.stop()
    records = host_cpu.read(path)
    assert records and all(set(r["roles"]) == set(host_cpu.ROLES) for r in records)
    summary = host_cpu.summarize(records, 0.0, time.time() + 1)
    assert summary["samples"] == len(records)
    assert summary["roles"]["callers"]["max"] > 0.3  # one core spun; a shared CI box gives it less than all


def test_summary_of_a_window(tmp_path: Path) -> None:
    path = tmp_path / "host.jsonl"
    rows = [{"t_wall": 100.0 + i, "busy": 0.1 * i, "cores": 16, "roles": {"workers": float(i), "callers": 1.0}}
            for i in range(5)]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn")
    records = host_cpu.read(path)
    assert len(records) == 5
    s = host_cpu.summarize(records, 101.0, 104.0)  # t = 101, 102, 103
    assert s["samples"] == 3 and s["cores"] == 16
    assert s["roles"]["workers"] == {"mean": 2.0, "max": 3.0}
    assert s["roles"]["livekit_server"] == {"mean": 0.0, "max": 0.0}  # a role with no process reads zero
    assert s["busy"] == {"mean": 0.2, "max": 0.3}
    assert host_cpu.summarize(records, 200.0, 300.0) == {"samples": 0}
