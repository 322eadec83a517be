"""scripts/start_all.sh on loopback: start -> status shows every service up and healthy -> stop leaves no process.

What runs (all real processes, real HTTP, ephemeral ports):
- llm:   `LLM_LOCAL=1` with LLM_CMD = `python -m lab.fake_openai` (the OpenAI-compatible fake that stands in
         for vLLM; the real scripts/run_llm_server.sh needs a GPU and weights);
- tts:   `TTS_STANDALONE=1`: scripts/run_tts_server.sh (its restart loop runs `python -m tts_engine serve`)
         on the tiny random-weight checkpoint;
- token: `python -m token_server --dev`;
- agent: `python -m agent start`, the real LiveKit worker. No LiveKit server can exist here, so LIVEKIT_URL
         points at a closed loopback port: the worker keeps retrying to register, and its own health server
         (LiveKit Agents' `GET /` on AGENT_HTTP_PORT) answers 200 meanwhile. This proves the process starts,
         serves health and stops cleanly; it does NOT prove registration with LiveKit or a call (those need a
         LiveKit server: see docs/operations.md, "what the tests cover").
The stop check collects every process of every service's process group before stopping and asserts each is
gone afterwards, and that a decoy process with the same command line, not started by start_all, survives.
"""

from __future__ import annotations

import importlib.util
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _worker_port() -> str:
    """The worker's health port: a free one when the worker reads AGENT_HTTP_PORT, else LiveKit's 8081."""
    from agent.config import AgentConfig

    if "http_port" in AgentConfig.__dataclass_fields__:
        return str(_free_port())
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8081)) == 0:
            pytest.fail("port 8081 (LiveKit worker health, not configurable yet) is taken on this machine")
    return "8081"


def _group_members(pgid: int) -> set[int]:
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:  # field 5 (pgrp): after ")" come state, ppid, pgrp
            members.add(int(entry.name))
    return members


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _run(env: dict[str, str], *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def ops_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "TTS_", "LLM_", "AGENT"))}
    env.update(
        RUN_DIR=str(tmp_path / "run"),
        LOG_DIR=str(tmp_path / "logs"),
        ENV_FILE=os.devnull,
        PYTHON=sys.executable,
        STOP_TIMEOUT="15",
        TOKEN_SERVER="1",
        TOKEN_DEV="1",
        TOKEN_SERVER_HOST="127.0.0.1",
        TOKEN_SERVER_PORT=str(_free_port()),
        AGENT="0",
        LLM_LOCAL="0",
        TTS_STANDALONE="0",
        # production URLs (closed ports): the embedded LiveKit / llama.cpp services stay off in these tests;
        # tests/call runs the whole local stack
        LIVEKIT_URL=f"ws://127.0.0.1:{_free_port()}",
        LLM_BASE_URL=f"http://127.0.0.1:{_free_port()}/v1",
    )
    return env


def test_local_livekit_without_a_key_pair_is_refused_by_name(ops_env: dict[str, str]) -> None:
    env = dict(ops_env, LIVEKIT_URL="", TOKEN_SERVER="0", LIVEKIT_BIN=sys.executable)
    result = _run(env, "start", timeout=60)
    assert result.returncode == 1
    assert "LIVEKIT_API_KEY and LIVEKIT_API_SECRET must be set for the local LiveKit server" in result.stderr
    short = dict(env, LIVEKIT_API_KEY="devkey", LIVEKIT_API_SECRET="short")
    result = _run(short, "start", timeout=60)
    assert result.returncode == 1 and "use at least 32" in result.stderr
    assert "short" not in result.stderr.replace("LIVEKIT_API_SECRET is 5 characters", "")  # the secret is never printed


def test_start_status_stop_leaves_no_process(ops_env: dict[str, str], tiny_checkpoint: Path, tmp_path: Path) -> None:
    env = dict(ops_env)
    expected = ["token"]
    llm_port = _free_port()
    env.update(
        LLM_LOCAL="1",
        LLM_CMD=f"{sys.executable} -m lab.fake_openai --port {llm_port}",
        LLM_BASE_URL=f"http://127.0.0.1:{llm_port}/v1",
        STT_BASE_URL=f"http://127.0.0.1:{llm_port}/v1",
        LLM_START_TIMEOUT="60",
    )
    expected.insert(0, "llm")
    if _has("tts_engine.server"):
        tts_port = _free_port()
        env.update(
            TTS_STANDALONE="1",
            TTS_PORT=str(tts_port),
            TTS_DEEP_STREAM_MODEL_DIR=str(tiny_checkpoint),
            TTS_DEEP_STREAM_DEVICE="cpu",
            TTS_HOST="127.0.0.1",  # the default TTS_CMD: scripts/run_tts_server.sh (its restart loop + server)
            TTS_START_TIMEOUT="120",
        )
        expected.insert(1, "tts")
    if _has("agent.worker"):
        env.update(
            AGENT="1",
            AGENT_HTTP_PORT=_worker_port(),
            LIVEKIT_URL=f"ws://127.0.0.1:{_free_port()}",  # nothing listens: the worker retries
            LIVEKIT_API_KEY="devkey",
            LIVEKIT_API_SECRET="secret",
            TTS_DEEP_STREAM_MODEL_DIR=str(tiny_checkpoint),
            TTS_DEEP_STREAM_DEVICE="cpu",
            AGENT_START_TIMEOUT="120",
            AGENT_READY_LINE="",  # it cannot register here; test_the_agent_is_up_once_registered covers that
        )
        expected.append("agent")

    # a decoy with the fake server's exact command line that start_all did not start: stop must spare it
    decoy_port = _free_port()
    decoy = subprocess.Popen(
        [sys.executable, "-m", "lab.fake_openai", "--port", str(decoy_port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    members: dict[str, set[int]] = {}
    try:
        started = _run(env, "start")
        assert started.returncode == 0, started.stdout + started.stderr
        for svc in expected:
            assert f"{svc}: up" in started.stdout

        status = _run(env, "status", timeout=60)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = {line.split()[0]: line for line in status.stdout.splitlines()[1:]}
        for svc in expected:
            assert rows[svc].split()[1] == "up" and "ok (HTTP 2" in rows[svc], status.stdout
            pid = int((Path(env["RUN_DIR"]) / f"{svc}.pid").read_text().split()[0])
            assert rows[svc].split()[2] == str(pid)
            members[svc] = _group_members(pid)
            assert pid in members[svc]
    finally:
        stopped = _run(env, "stop", timeout=120)
        decoy_alive = decoy.poll() is None
        decoy.send_signal(signal.SIGTERM)
        decoy.wait(timeout=10)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    deadline = time.monotonic() + 5
    leftover = {pid for group in members.values() for pid in group if _alive(pid)}
    while leftover and time.monotonic() < deadline:
        time.sleep(0.1)
        leftover = {pid for pid in leftover if _alive(pid)}
    assert not leftover, f"processes left after stop: {leftover}"
    assert not list(Path(env["RUN_DIR"]).glob("*.pid"))
    assert decoy_alive, "stop killed a process it did not start"
    status = _run(env, "status", timeout=60)
    assert status.returncode == 3  # enabled services are down
    for svc in expected:
        assert f"{svc} " in status.stdout and "down" in status.stdout


def test_failed_start_names_the_service_rolls_back_and_shows_the_log(ops_env: dict[str, str]) -> None:
    env = dict(ops_env)
    env.update(AGENT="1", AGENT_CMD=f"{sys.executable} -c 'import sys; print(\"no LIVEKIT_URL here\"); sys.exit(3)'")
    result = _run(env, "start", timeout=90)
    assert result.returncode == 1
    assert "agent: exited during start-up (exit status 3)" in result.stderr
    assert "no LIVEKIT_URL here" in result.stderr  # the log tail
    assert "token: stopped" in result.stdout  # what this start brought up is stopped again
    assert not list(Path(env["RUN_DIR"]).glob("*.pid"))


def test_stale_pid_file_is_never_signalled(ops_env: dict[str, str]) -> None:
    """A pid file whose process is gone (or whose pid now belongs to another program) is removed, not killed."""
    run_dir = Path(ops_env["RUN_DIR"])
    run_dir.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        # right pid, wrong start time: the pid was reused by a program we did not start
        (run_dir / "token.pid").write_text(f"{bystander.pid} 1\n")
        status = _run(ops_env, "status", timeout=30)
        assert "stale" in status.stdout
        stopped = _run(ops_env, "stop", timeout=30)
        assert stopped.returncode == 0
        assert "stale pid file" in stopped.stdout
        assert bystander.poll() is None
        assert not (run_dir / "token.pid").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_usage_errors() -> None:
    result = subprocess.run(["bash", str(SCRIPT), "launch"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "usage:" in result.stderr
    result = subprocess.run(["bash", str(SCRIPT), "status", "redis"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "unknown service 'redis'" in result.stderr


def test_demo_fails_fast_naming_what_is_missing(ops_env: dict[str, str], tmp_path: Path) -> None:
    # production parts configured but not there (set in the environment: a developer's .env cannot fill them in)
    env = dict(ops_env, SKIP_SETUP="1", LLM_BASE_URL=f"http://127.0.0.1:{_free_port()}/v1", TTS_ENGINE_URL="")
    env.update(TTS_DEEP_STREAM_MODEL_DIR=str(tmp_path / "no-weights"), LIVEKIT_API_KEY="k", LIVEKIT_API_SECRET="s")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "[MISSING] tts weights: " in result.stdout and "no-weights" in result.stdout
    assert "[MISSING] livekit: cannot reach LIVEKIT_URL" in result.stdout
    assert "[MISSING] llm: cannot reach LLM_BASE_URL" in result.stdout
    assert "[default:" not in result.stdout  # every part was configured: no embedded default stands in
    assert "preflight found something missing" in result.stderr
    assert not list(Path(env["RUN_DIR"]).glob("*.pid"))  # nothing was started


# a stand-in worker: its health server answers at once, it "registers" (the line LiveKit Agents logs) after 1.5 s
_SLOW_WORKER = """
import http.server, sys, threading, time
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(1.5)
if sys.argv[2] == "register":
    print('{"message": "registered worker", "agent_name": "voice-agent"}', flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("registers", [True, False])
def test_the_agent_is_up_once_registered(ops_env: dict[str, str], tmp_path: Path, registers: bool) -> None:
    """The worker's health server answers seconds before it has registered with LiveKit, and a room created in
    between never gets an agent (LiveKit dispatches once, at creation). start_all waits for the registration."""
    script, port = tmp_path / "worker.py", _free_port()
    script.write_text(_SLOW_WORKER)
    env = dict(ops_env, TOKEN_SERVER="0", AGENT="1", AGENT_HTTP_PORT=str(port), AGENT_START_TIMEOUT="6",
               AGENT_CMD=f"{sys.executable} {script} {port} {'register' if registers else 'stay'}")
    t0 = time.monotonic()
    try:
        result = _run(env, "start", timeout=60)
        if registers:
            assert result.returncode == 0, result.stderr
            assert "agent: up" in result.stdout and "registered with LiveKit" in result.stdout, result.stdout
            assert time.monotonic() - t0 >= 1.5  # not at the health answer
        else:
            assert result.returncode == 1
            assert "not healthy after 6s" in result.stderr and "no 'registered worker' line yet" in result.stderr
    finally:
        _run(env, "stop", timeout=60)


def _livekit_binary() -> str | None:
    version = next(line.split("=", 1)[1] for line in SCRIPT.read_text().splitlines()
                   if line.startswith("LIVEKIT_VERSION="))  # fmt: skip
    for candidate in (os.environ.get("LIVEKIT_BIN"), ROOT / ".tools" / f"livekit-server-{version}" / "livekit-server",
                      Path.home() / ".cache" / "voice-agent" / f"livekit-server-{version}"):  # fmt: skip
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


async def test_restart_livekit_mid_call_says_why_it_drains_and_takes_seconds_not_a_sigkill(
    ops_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 43: `restart livekit` with a call in progress waited STOP_TIMEOUT (20 s) and then SIGKILLed LiveKit
    (22.6 s): LiveKit drains on SIGTERM, waiting for every participant to leave, and a caller does not. Now stop
    says so and kills it after LIVEKIT_DRAIN_S; the participant reconnects to the new server with its session (a
    second SIGTERM would have told it to leave: its call would have ended)."""
    import asyncio

    from livekit import api, rtc

    binary = _livekit_binary()
    if binary is None:
        pytest.fail("livekit-server not found: run scripts/setup.sh (it builds it) or set LIVEKIT_BIN")
    udp = _free_port()
    env = dict(ops_env, LIVEKIT_URL="", LIVEKIT_BIN=binary, LIVEKIT_API_KEY="opskey",
               LIVEKIT_API_SECRET="ops-secret-" + "x" * 32, LIVEKIT_PORT=str(_free_port()),
               LIVEKIT_TCP_PORT=str(_free_port()), LIVEKIT_UDP_PORTS=f"{udp}-{udp + 20}", TOKEN_SERVER="0",
               LIVEKIT_DRAIN_S="2", STOP_TIMEOUT="20")  # fmt: skip

    async def start_all(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec("bash", str(SCRIPT), *args, env=env, cwd=ROOT,
                                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode or 0, out.decode()

    rc, out = await start_all("start", "livekit")
    assert rc == 0, out
    room = rtc.Room()
    try:
        token = (api.AccessToken(env["LIVEKIT_API_KEY"], env["LIVEKIT_API_SECRET"]).with_identity("caller")
                 .with_grants(api.VideoGrants(room_join=True, room="mid-call")).to_jwt())  # fmt: skip
        await room.connect(f"ws://127.0.0.1:{env['LIVEKIT_PORT']}", token)  # a caller in a call
        sid = room.local_participant.sid
        events: list[str] = []
        for event in ("disconnected", "reconnected"):
            room.on(event, lambda *_args, event=event: events.append(event))
        started = time.monotonic()
        rc, out = await start_all("restart", "livekit")
        took = time.monotonic() - started
        deadline = time.monotonic() + 20
        while "reconnected" not in events and "disconnected" not in events:
            assert time.monotonic() < deadline, events
            await asyncio.sleep(0.1)
        assert events == ["reconnected"] and room.isconnected(), events  # the same Room object, never left
        assert room.local_participant.identity == "caller" and sid
    finally:
        await room.disconnect()
        await start_all("stop")
    assert rc == 0, out
    assert "livekit: still draining after 2s: LiveKit waits for every participant to leave its rooms" in out, out
    assert "Killing it (SIGKILL): callers and agents reconnect to the next server" in out, out
    assert "still running after 20s" not in out, out  # not the STOP_TIMEOUT path
    stopped = float(out.split("livekit: stopped after ")[1].split("s")[0])
    print(f"livekit stopped after {stopped}s; restart took {took:.1f}s")
    assert 2.0 <= stopped < 5.0, out
