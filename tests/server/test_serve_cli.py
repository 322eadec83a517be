"""`scripts/run_tts_server.sh` -> `python -m tts_engine serve`: env + flags, unknown TTS_* warning, pid file,
restart after the server dies, clean stop on SIGTERM, no restart loop on a bad configuration."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run_tts_server.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _wait(predicate, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(PYTHON=sys.executable, ENV_FILE=str(tmp_path / "absent.env"), **extra)
    return env


@pytest.mark.skipif(sys.platform != "linux", reason="bash launcher")
def test_launcher_serves_restarts_and_stops(tiny_checkpoint: Path, tmp_path: Path) -> None:
    port = _free_port()
    pid_file = tmp_path / "tts.pid"
    log_file = tmp_path / "tts.log"
    env = _env(tmp_path, TTS_DEEP_STREAM_MODEL_DIR=str(tiny_checkpoint), TTS_DEEP_STREEM_SEED="1")
    proc = subprocess.Popen(
        [
            "bash",
            str(SCRIPT),
            "--pid-file",
            str(pid_file),
            "--log-file",
            str(log_file),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--device",
            "cpu",
            "--max-streams",
            "3",
        ],
        env=env,
        start_new_session=True,
    )
    try:
        _wait(lambda: _healthy(port))
        supervisor, child = (int(x) for x in pid_file.read_text().split())
        assert supervisor == proc.pid
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            assert b'"capacity": 3' in resp.read(), "the --max-streams flag did not reach the engine"
        assert "TTS_DEEP_STREEM_SEED" in log_file.read_text(), "unknown TTS_* variable was not warned about"
        os.kill(child, signal.SIGKILL)  # the server dies; the launcher must bring it back
        _wait(lambda: len(pid_file.read_text().split()) == 2 and int(pid_file.read_text().split()[1]) != child)
        _wait(lambda: _healthy(port))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not pid_file.exists()
        assert not _healthy(port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_bad_configuration_is_not_restarted(tmp_path: Path) -> None:
    env = _env(tmp_path, TTS_DEEP_STREAM_MODEL_DIR=str(tmp_path / "no-such-model"))
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--pid-file", str(tmp_path / "p.pid"), "--port", str(_free_port()), "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no-such-model" in proc.stderr and "not restarting" in proc.stderr


def test_every_tts_variable_in_env_example_is_known() -> None:
    from tts_engine.config import unknown_tts_variables

    names = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            names[line.split("=", 1)[0].removeprefix("export ").strip()] = "x"
    assert any(name.startswith("TTS_") for name in names)
    assert unknown_tts_variables(names) == [], "serve would warn about variables the project itself documents"


def test_a_taken_port_fails_before_anything_heavy_loads(tmp_path: Path) -> None:
    from tests.server.test_cli_help import ONLY_STDLIB, OURS

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--model", str(tmp_path / "no-such-model"), "--port", str(port), "--device", "cpu",
                "--env-file", os.devnull]
        # torch and aiohttp unimportable: the port is checked before either is needed, and before the checkpoint
        code = ONLY_STDLIB.format(ours=OURS, module="tts_engine", args=args)
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                              text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "nothing was loaded" in proc.stderr
    assert "Traceback" not in proc.stderr and "no-such-model" not in proc.stderr


def test_listening_beyond_this_machine_without_a_key_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from tts_engine.server.cli import warn_if_exposed
    from tts_engine.server.config import ServerConfig, listen_sockets

    loopback = listen_sockets("127.0.0.1", 0)
    anywhere = [socket.socket()]  # not bound: it reports 0.0.0.0, what --host 0.0.0.0 binds (not done in a test)
    try:
        with caplog.at_level("WARNING", logger="tts_engine.server"):
            assert not warn_if_exposed(loopback, ServerConfig())
            assert not warn_if_exposed(anywhere, ServerConfig(api_keys=("k",)))
            assert warn_if_exposed(anywhere, ServerConfig())
        assert [r.getMessage() for r in caplog.records if "without TTS_API_KEY" in r.getMessage()]
    finally:
        for sock in loopback + anywhere:
            sock.close()
