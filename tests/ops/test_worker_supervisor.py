"""start_all's worker supervisor (scripts/run_worker.sh) and the smaller start_all behaviours of issue 29.

The worker here is a stand-in process that does what matters to the supervisor: it opens a real call journal
(agent/journal.py) with a turn in flight, prints LiveKit Agents' "registered worker" line, and waits. It is killed
with SIGKILL; the supervisor must say why, run the real `python -m agent recover` (which closes the open turn in
the traces as worker_lost) and start it again. The real worker under the supervisor, killed mid-call with a
LiveKit server, is tests/call/test_worker_loss.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "start_all.sh"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="start_all.sh uses /proc and setsid")

STAND_IN = """
import http.server, os, sys, threading, time
from agent.journal import CallJournal
from agent.tracing import TraceCollector
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
traces = sys.argv[1]
collector = TraceCollector("room-s-abcdef", traces)
journal = CallJournal(traces, room="room-s", agent_identity="agent-AJ_s", job_id=f"AJ_{os.getpid()}",
                      session_id="room-s-abcdef")
journal.watch(collector)
collector.open_turn().mark("llm_request")
print('{"message": "registered worker", "agent_name": "voice-agent"}', flush=True)
time.sleep(600)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.fixture
def ops_env(tmp_path: Path) -> dict[str, str]:
    """Nothing enabled but what a test turns on; production URLs point at closed ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "TTS_", "LLM_", "AGENT", "TRACES"))}
    env.update(RUN_DIR=str(tmp_path / "run"), LOG_DIR=str(tmp_path / "logs"), ENV_FILE=os.devnull,
               PYTHON=sys.executable, STOP_TIMEOUT="15", TOKEN_SERVER="1", TOKEN_DEV="1",
               TOKEN_SERVER_HOST="127.0.0.1", TOKEN_SERVER_PORT=str(_free_port()), AGENT="0", LLM_LOCAL="0",
               TTS_STANDALONE="0", LIVEKIT_URL=f"ws://127.0.0.1:{_free_port()}",
               LLM_BASE_URL=f"http://127.0.0.1:{_free_port()}/v1")  # fmt: skip
    return env


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


# after registering, a real worker logs for minutes: 512 KB of it (more than a pipe holds) before the kill
CHATTY = STAND_IN.replace(
    "time.sleep(600)", 'sys.stdout.write(("x" * 1023 + chr(10)) * 512); sys.stdout.flush()\ntime.sleep(600)'
)


@pytest.mark.parametrize("log_after_registering", ["short", "long"])
def test_a_killed_worker_is_restarted_and_its_open_turn_closed(
    ops_env: dict[str, str], tmp_path: Path, log_after_registering: str
) -> None:
    """Also after a long log: the supervisor read "registered worker" through `tail | grep -q` under pipefail, so
    past a pipe's worth of output tail died of SIGPIPE and the worker counted as never registered (not restarted)."""
    script, traces = tmp_path / "stand_in.py", tmp_path / "traces"
    script.write_text(STAND_IN if log_after_registering == "short" else CHATTY)
    port = _free_port()
    env = dict(ops_env, TOKEN_SERVER="0", AGENT="1", AGENT_HTTP_PORT=str(port), AGENT_START_TIMEOUT="30",
               AGENT_CMD=f"{sys.executable} {script} {traces} {port}", TRACES_DIR=str(traces),
               PYTHONPATH=str(ROOT))  # fmt: skip
    log = Path(env["LOG_DIR"]) / "agent.log"
    try:
        started = _run(env, "start", timeout=60)
        assert started.returncode == 0, started.stdout + started.stderr
        supervisor = int((Path(env["RUN_DIR"]) / "agent.pid").read_text().split()[0])
        wait_until(lambda: children(supervisor), 10, "the supervisor has no worker")
        (first,) = children(supervisor)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: log.read_text().count("registered worker") >= 2, 30, "the worker was not started again")
        text = log.read_text()
        assert f"worker (pid {first}) died: killed by signal 9 (SIGKILL)" in text, text
        assert "restarting the worker in 0s" in text  # the first restart is immediate
        records = []
        wait_until(lambda: list(traces.glob("*.jsonl")), 30, "no trace record for the killed turn")
        for path in traces.glob("*.jsonl"):
            records += [json.loads(line) for line in path.read_text().splitlines()]
        (record,) = records
        assert record["outcome"] == "worker_lost" and "llm_request" in record["points"], record
        assert "killed by signal 9" in record["errors"][0]
        status = _run(env, "status", "agent", timeout=30)
        assert status.returncode == 0 and " up " in status.stdout, status.stdout
    finally:
        stopped = _run(env, "stop", timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not list(Path(env["RUN_DIR"]).glob("*.pid"))


# a stand-in standby: "imports" (sleeps), says it is ready, waits on the FIFO, then becomes the stand-in worker
STANDBY = """
import sys, time
fifo = sys.argv[sys.argv.index("--fifo") + 1]
time.sleep(0.5)
print("standby: ready", flush=True)
with open(fifo) as f:
    if f.readline().strip() != "go":
        sys.exit(0)
print("standby: taking over", flush=True)
sys.argv = [sys.argv[1], sys.argv[2], sys.argv[3]]
exec(open(sys.argv[0]).read())
"""


def test_a_standby_takes_over_from_a_killed_worker(ops_env: dict[str, str], tmp_path: Path) -> None:
    script, standby, traces = tmp_path / "stand_in.py", tmp_path / "standby.py", tmp_path / "traces"
    script.write_text(STAND_IN)
    standby.write_text(STANDBY)
    port = _free_port()
    env = dict(ops_env, TOKEN_SERVER="0", AGENT="1", AGENT_HTTP_PORT=str(port), AGENT_START_TIMEOUT="30",
               AGENT_CMD=f"{sys.executable} {script} {traces} {port}", TRACES_DIR=str(traces), PYTHONPATH=str(ROOT),
               STANDBY_CMD=f"{sys.executable} {standby} {script} {traces} {port}")  # fmt: skip
    log = Path(env["LOG_DIR"]) / "agent.log"
    worker_pid = Path(env["RUN_DIR"]) / "agent.worker.pid"
    try:
        assert _run(env, "start", timeout=60).returncode == 0
        wait_until(lambda: "standby: ready" in log.read_text(), 20, "no standby was started")
        first = int(worker_pid.read_text())
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: log.read_text().count("registered worker") >= 2, 30, "the standby did not take over")
        text = log.read_text()
        assert "took over (start 2)" in text and "standby: taking over" in text, text
        second = int(worker_pid.read_text())
        assert second != first
        wait_until(lambda: log.read_text().count("standby: ready") >= 2, 20, "no new standby after the takeover")
    finally:
        stopped = _run(env, "stop", timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not worker_pid.exists()


def test_a_worker_that_dies_before_registering_is_not_restarted(ops_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text("import sys, time\ntime.sleep(0.5)\nprint('cannot load the model', flush=True)\nsys.exit(1)\n")
    env = dict(ops_env, TOKEN_SERVER="0", AGENT="1", AGENT_START_TIMEOUT="30", AGENT_CMD=f"{sys.executable} {script}")
    result = _run(env, "start", timeout=60)
    assert result.returncode == 1
    assert "agent: exited during start-up (exit status 1)" in result.stderr
    assert "died before it registered with LiveKit" in result.stderr and "not restarting" in result.stderr
    assert result.stderr.count("cannot load the model") == 1  # one try, not a restart loop


def test_status_says_which_services_this_stack_does_not_use(ops_env: dict[str, str]) -> None:
    status = _run(dict(ops_env, TOKEN_SERVER="0"), "status", timeout=30)
    assert status.returncode == 0, status.stdout  # nothing enabled is down
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[1:]}
    for svc in ("livekit", "llm", "local_llm", "tts", "token", "agent"):
        assert rows[svc].split()[1] == "off" and "(not used:" in rows[svc], status.stdout
    assert "TTS_STANDALONE=1 enables it" in rows["tts"]


def test_logs_keep_several_rotations(ops_env: dict[str, str]) -> None:
    env = dict(ops_env, LOG_KEEP="2")
    logs = Path(env["LOG_DIR"])
    for _ in range(4):
        started = _run(env, "start", "token", timeout=60)
        assert started.returncode == 0, started.stderr
        assert _run(env, "stop", "token", timeout=60).returncode == 0
    names = sorted(p.name for p in logs.iterdir())
    assert names == ["token.log", "token.log.1", "token.log.2"], names
    assert all("starting:" in (logs / n).read_text() for n in names)
