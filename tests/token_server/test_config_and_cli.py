"""Configuration parsing (errors name the variable) and `python -m token_server` start-up behaviour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from token_server.config import DEV_API_KEY, DEV_API_SECRET, ConfigError, ServerConfig

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"LIVEKIT_URL": "wss://lk.example.test", "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s" * 40}


def test_defaults() -> None:
    cfg = ServerConfig.from_env(KEYS)
    assert (cfg.agent_name, cfg.token_ttl_s, cfg.rate_limit_per_min) == ("voice-agent", 900, 30)
    assert (cfg.host, cfg.port, cfg.vad_silence_ms, cfg.allowed_origins, cfg.dev) == ("127.0.0.1", 3000, 224, (), False)
    assert "s" * 40 not in repr(cfg)


def test_missing_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="LIVEKIT_API_KEY and LIVEKIT_API_SECRET"):
        ServerConfig.from_env({"LIVEKIT_URL": "ws://x"})
    with pytest.raises(ConfigError, match="LIVEKIT_API_SECRET") as err:
        ServerConfig.from_env({"LIVEKIT_URL": "ws://x", "LIVEKIT_API_KEY": "k"})
    assert "LIVEKIT_API_KEY " not in str(err.value)
    with pytest.raises(ConfigError, match="LIVEKIT_URL"):
        ServerConfig.from_env({"LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s"})


def test_dev_uses_the_dev_pair_and_local_url() -> None:
    cfg = ServerConfig.from_env({}, dev=True)
    assert (cfg.api_key, cfg.api_secret, cfg.livekit_url, cfg.dev) == (
        DEV_API_KEY,
        DEV_API_SECRET,
        "ws://127.0.0.1:7880",
        True,
    )


def test_cli_overrides_host_and_port() -> None:
    cfg = ServerConfig.from_env(
        {**KEYS, "TOKEN_SERVER_HOST": "0.0.0.0", "TOKEN_SERVER_PORT": "8000"}, host="::1", port=0
    )
    assert (cfg.host, cfg.port) == ("::1", 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOKEN_TTL_S", "abc"),
        ("TOKEN_TTL_S", "0"),
        ("TOKEN_TTL_S", "3601"),
        ("TOKEN_RATE_LIMIT_PER_MIN", "0"),
        ("TOKEN_RATE_LIMIT_PER_MIN", "many"),
        ("TOKEN_SERVER_PORT", "70000"),
        ("VAD_SILENCE_MS", "10"),
        ("AGENT_NAME", "my agent"),
        ("ALLOWED_ORIGINS", "*"),
        ("ALLOWED_ORIGINS", "https://ok.example,app.example.com"),
        ("ALLOWED_ORIGINS", "https://ok.example/path"),
        ("LIVEKIT_URL", "localhost:7880"),
        ("LIVEKIT_URL", "ftp://lk"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name) as err:
        ServerConfig.from_env({**KEYS, name: value})
    assert "s" * 40 not in str(err.value)


def test_origins_are_normalised() -> None:
    cfg = ServerConfig.from_env({**KEYS, "ALLOWED_ORIGINS": " https://App.Example.test ,, http://localhost:5173/"})
    assert cfg.allowed_origins == ("https://app.example.test", "http://localhost:5173")


def _run_cli(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "TOKEN_", "AGENT_", "ALLOWED_"))}
    return subprocess.run(
        [sys.executable, "-m", "token_server", "--env-file", str(tmp_path / "none.env"), *args],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_refuses_to_start_without_keys(tmp_path: Path) -> None:
    secret = "only-the-secret-is-set-" + "x" * 20
    proc = _run_cli([], {"LIVEKIT_API_SECRET": secret, "LIVEKIT_URL": "ws://x"}, tmp_path)
    assert proc.returncode == 2
    assert "LIVEKIT_API_KEY" in proc.stderr and "--dev" in proc.stderr
    assert "Traceback" not in proc.stderr and secret not in proc.stderr + proc.stdout


def test_cli_names_a_bad_ttl(tmp_path: Path) -> None:
    proc = _run_cli(["--dev"], {"TOKEN_TTL_S": "forever"}, tmp_path)
    assert proc.returncode == 2 and "TOKEN_TTL_S='forever'" in proc.stderr and "60..3600" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_dev_mode_warns_and_serves_tokens(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "TOKEN_", "AGENT_", "ALLOWED_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "token_server", "--dev", "--port", "0", "--env-file", str(tmp_path / "none.env")],
        env={**base, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 30
        port = None
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        assert port, "server did not start:\n" + "".join(lines)
        assert "DEV MODE" in "".join(lines) and "devkey" in "".join(lines)
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/token",
            data=json.dumps({"room": "r1", "identity": "me"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["url"] == "ws://127.0.0.1:7880" and body["room"] == "r1"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    log = "".join(lines) + out
    assert "token issued: room=r1 identity=me" in log
    # the dev secret is the word "secret", so look for it as a value, not as a word in the warning
    assert f"={DEV_API_SECRET}" not in log and f"'{DEV_API_SECRET}'" not in log and body["token"] not in log
