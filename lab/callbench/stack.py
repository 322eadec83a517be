"""LocalStack: the whole call stack on this machine, through scripts/start_all.sh, on free loopback ports.

Contract
- `LocalStack(workdir, **env)`: nothing runs yet. Every production variable is set empty, so each part is
  its embedded default (agent/local/): LiveKit's own server, llama.cpp + SmolLM2, faster-whisper, the
  random-weight TTS checkpoint. A fresh key pair, its own run/, logs/ and traces/ under `workdir`, and
  `ENV_FILE=/dev/null` so a developer's .env does not leak in; of the service variables in the caller's
  environment only the tuning knobs in `PASSED_THROUGH` reach it (so `STT_EARLY_MS=off python -m
  lab.callbench` is the A/B). `env` overrides any variable.
- `start()` runs `start_all.sh start` and returns once the worker has registered with the LiveKit server
  (its log says so); on failure it raises with the start_all output and stops what started.
  `start(services=("livekit", "token"))` starts only those (the transport floor needs no worker).
- `stop()` runs `start_all.sh stop` (idempotent); `start_worker(name)` starts one more worker process
  registered with the same server (for dispatch tests; `supervised=True`: under scripts/run_worker.sh, as
  start_all runs its own), stopped by `stop()` too. `worker_pid(name)` is the worker process itself ("agent":
  start_all's), for a test that kills it.
- `traces()` reads every trace record the workers wrote.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # lab/callbench/stack.py -> the repository
PRODUCTION_VARIABLES = ("LIVEKIT_URL", "LLM_BASE_URL", "STT_BASE_URL", "TTS_DEEP_STREAM_MODEL_DIR", "TTS_ENGINE_URL")
#: Worker tuning read from the caller's environment although its prefix marks it as a service's (A/B runs).
PASSED_THROUGH = ("STT_EARLY_MS", "TURN_HANDLING")


def room_traces(stack: LocalStack | list[dict], room: str) -> list[dict]:
    """The trace records of `room`'s calls (the worker names a call `<room>-<job>`), from a stack or a list."""
    records = stack.traces() if isinstance(stack, LocalStack) else stack
    return [r for r in records if str(r.get("session_id", "")).startswith(f"{room}-")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _udp_range(width: int = 60) -> tuple[int, int]:
    for _ in range(50):
        start = random.randrange(40_000, 49_000)
        try:
            for port in (start, start + width - 1):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return start, start + width - 1
    raise RuntimeError("no free UDP port range for the LiveKit server")


def wait_for_line(
    path: Path, needle: str, timeout: float, *, count: int = 1, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text(errors="replace").count(needle) >= count:
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{path.name}: process exited ({proc.returncode}) before {needle!r}")
        time.sleep(0.2)
    tail = path.read_text(errors="replace")[-3000:] if path.is_file() else "(no log)"
    raise TimeoutError(f"{path}: no {needle!r} within {timeout:.0f}s; last lines:\n{tail}")


class LocalStack:
    def __init__(self, workdir: Path, **env: str) -> None:
        self.workdir = Path(workdir)
        udp_start, udp_end = _udp_range()
        self.ports = {
            "LIVEKIT_PORT": free_port(),
            "LIVEKIT_TCP_PORT": free_port(),
            "LOCAL_LLM_PORT": free_port(),
            "TOKEN_SERVER_PORT": free_port(),
            "AGENT_HTTP_PORT": free_port(),
        }
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k in PASSED_THROUGH or not k.startswith(("TTS_", "LLM_", "STT_", "LIVEKIT_"))
        }
        self.env.update({name: "" for name in PRODUCTION_VARIABLES})
        self.env.update({k: str(v) for k, v in self.ports.items()})
        self.env.update(
            LIVEKIT_UDP_PORTS=f"{udp_start}-{udp_end}",
            LIVEKIT_API_KEY="devkey",
            LIVEKIT_API_SECRET=secrets.token_hex(24),
            ENV_FILE="/dev/null",
            RUN_DIR=str(self.workdir / "run"),
            LOG_DIR=str(self.workdir / "logs"),
            TRACES_DIR=str(self.workdir / "traces"),
            AEC_WARMUP_S="0",  # the fake microphone has no echo to adapt to
            PYTHONUNBUFFERED="1",
            PYTHON=self.env.get("PYTHON") or sys.executable,  # the services run this interpreter, as the tests do
        )
        self.env.update(env)
        self.extra_workers: dict[str, subprocess.Popen] = {}

    @property
    def page_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['TOKEN_SERVER_PORT']}/"

    @property
    def livekit_url(self) -> str:
        return f"ws://127.0.0.1:{self.ports['LIVEKIT_PORT']}"

    def log(self, service: str) -> Path:
        return self.workdir / "logs" / f"{service}.log"

    def _start_all(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "start_all.sh"), *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def start(self, timeout: float = 300, services: tuple[str, ...] = ()) -> None:
        """Start every service, or only `services` (start_all names); the worker's registration is awaited
        when it is among them."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        result = self._start_all("start", *services, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"start_all start failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        if services and "agent" not in services:
            return
        try:
            wait_for_line(self.log("agent"), "registered worker", timeout)
        except Exception:
            self.stop()
            raise

    def start_worker(
        self, name: str, timeout: float = 180, *, supervised: bool = False, **env: str
    ) -> subprocess.Popen:
        """One more worker (same code, same server) with its own health port and log."""
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        worker_env = {**self.env, "AGENT_HTTP_PORT": str(free_port()), **env}
        command = [sys.executable, "-m", "agent", "start"]
        if supervised:  # run_worker.sh's default command is this one (and only then it keeps a standby)
            command = ["bash", str(ROOT / "scripts" / "run_worker.sh")]
            worker_env["WORKER_PID_FILE"] = str(self.workdir / "run" / f"{name}.worker.pid")
        proc = subprocess.Popen(
            command, cwd=ROOT, env=worker_env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        proc.health_port = int(worker_env["AGENT_HTTP_PORT"])
        self.extra_workers[name] = proc
        wait_for_line(log, "registered worker", timeout, proc=proc)
        return proc

    def worker_pid(self, name: str = "agent") -> int:
        """The worker process of `name` ("agent": start_all's; else an extra worker): the one its supervisor
        (scripts/run_worker.sh) says runs now, else the process itself."""
        supervised = self.workdir / "run" / f"{name}.worker.pid"
        if supervised.is_file():
            return int(supervised.read_text().split()[0])
        return self.extra_workers[name].pid

    def stop_worker(self, name: str, timeout: float = 30) -> int | None:
        proc = self.extra_workers.pop(name, None)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(10)

    def stop(self) -> str:
        for name in list(self.extra_workers):
            self.stop_worker(name)
        result = self._start_all("stop", timeout=120)
        return result.stdout + result.stderr

    def traces(self) -> list[dict]:
        records = []
        for path in sorted((self.workdir / "traces").glob("*.jsonl")):
            records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return records

    def wait_traces(self, done: Callable[[list[dict]], bool], timeout: float = 60.0) -> list[dict]:
        """The trace records once `done(records)` holds. The worker writes a turn when the turn finishes, which
        can be after its caller has left (a reply cut by the hang-up is written at the job's end)."""
        deadline = time.monotonic() + timeout
        while not done(records := self.traces()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the traces did not meet the condition within {timeout:.0f} s: "
                                     f"{[r.get('session_id') for r in records]}")
            time.sleep(0.25)
        return records

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
