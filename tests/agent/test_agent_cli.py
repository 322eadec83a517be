"""`python -m agent`: every command listed with one line in --help (exit 0, before any heavy import), the worker
on LiveKit's current entry point with no deprecation warning at start, console and connect refused by name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def run_agent(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_help_lists_every_command_with_one_line() -> None:
    result = run_agent("--help")
    assert result.returncode == 0, result.stderr
    listing = result.stdout.replace("\n                  ", " ")  # argparse wraps long help lines
    for name, line in COMMANDS.items():
        assert f"{name}" in listing and " ".join(line.split()) in " ".join(listing.split()), name
    assert set(COMMANDS) == {"preflight", "dev", "start", "download-files", "simulate", "stress", "trace-review",
                              "standby", "recover", "console", "connect"}
    # nothing heavy is imported to print it
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.argv=['agent','--help']\n"
                            "from agent.__main__ import main\ntry: main()\nexcept SystemExit: pass\n"
                            "heavy=[m for m in ('torch','livekit.agents','agent.worker') if m in sys.modules]\n"
                            "print('HEAVY', heavy)"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in probe.stdout, probe.stdout[-500:] + probe.stderr[-500:]


@pytest.mark.parametrize("command", ["dev", "start", "simulate", "stress", "trace-review"])
def test_each_command_has_its_own_help(command: str) -> None:
    result = run_agent(command, "--help")
    assert result.returncode == 0, result.stderr
    assert f"python -m agent {command}" in result.stdout


@pytest.mark.parametrize(("command", "words"), [("console", "lk agent console"), ("connect", "lk dispatch create")])
def test_console_and_connect_are_refused_with_a_reason(command: str, words: str) -> None:
    result = run_agent(command, "--text")
    assert result.returncode == 2
    assert f"python -m agent {command}: not supported by this worker." in result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr


def test_an_unknown_command_is_a_usage_error() -> None:
    result = run_agent("consol")
    assert result.returncode == 2 and "invalid choice: 'consol'" in result.stderr


@pytest.mark.parametrize("command", ["dev", "start"])
def test_the_worker_starts_without_a_deprecation_warning(command: str) -> None:
    """LiveKit's deprecated path warned twice (`cli.run_app`: a DeprecationWarning; `dev`: "dev mode is deprecated");
    the worker now starts through `python -m livekit.agents start agent/app.py`. No LiveKit server here: it starts,
    fails to connect (retrying), and stops on SIGINT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_", "LIVEKIT_", "AGENT_"))}
    env.update(LIVEKIT_URL="ws://127.0.0.1:9", LIVEKIT_API_KEY="devkey", LIVEKIT_API_SECRET="s" * 32,
               ENV_FILE=os.devnull, AGENT_NUM_IDLE_PROCESSES="0", AGENT_HTTP_PORT="0",
               PYTHONWARNINGS="always::DeprecationWarning")
    proc = subprocess.Popen([sys.executable, "-m", "agent", command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "failed to connect to livekit" in line:  # the server ran: it registered, or tried to
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = "".join(lines)
    assert "starting worker" in log and "failed to connect to livekit" in log, log[-3000:]
    assert "deprecat" not in log.lower(), log[-3000:]


def test_a_bad_otlp_protocol_stops_the_worker_before_it_starts() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_", "LIVEKIT_", "AGENT_", "OTEL_"))}
    env.update(ENV_FILE=os.devnull, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    result = run_agent("start", env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "configuration error: OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_lab_commands_say_so_when_the_lab_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`simulate` and `stress` run the lab in a child process; an installed worker without the source tree gets one
    clear line and exit 2, not a traceback."""
    from agent import __main__ as cli

    monkeypatch.setattr(cli, "CHECKOUT", tmp_path)
    assert cli.main(["stress", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert "the lab (lab/, beside agent/ in a source checkout) is not here" in err and "Traceback" not in err


def test_the_product_cli_starts_the_lab_in_a_child_process() -> None:
    """The worker's command line never imports the lab: `simulate --help` is answered by a child process."""
    probe = subprocess.run([sys.executable, "-c", "import sys\nfrom agent.__main__ import main\n"
                            "code = main(['simulate', '--help'])\n"
                            "print('LAB', sorted(m for m in sys.modules if m == 'lab' or m.startswith('lab.')), code)"],
                           cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert "LAB [] 0" in probe.stdout, probe.stdout[-800:] + probe.stderr[-800:]
    assert "python -m agent simulate" in probe.stdout
