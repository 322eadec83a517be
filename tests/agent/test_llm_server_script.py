"""scripts/run_llm_server.sh with stand-ins for `nvidia-smi` and `vllm` (the fake OpenAI server): flags it
passes, refusal on low free GPU memory, bad values named, readiness wait on /v1/models."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run_llm_server.sh"

FAKE_VLLM = """#!/usr/bin/env bash
echo "$@" > "{args_file}"
port=; name=
while [ $# -gt 0 ]; do
  case $1 in --port) port=$2; shift 2;; --served-model-name) name=$2; shift 2;; *) shift;; esac
done
exec "{python}" -m lab.fake_openai --port "$port" --model "$name"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env_with(tmp_path: Path, free_mib: int, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho {free_mib}\n")
    vllm = bin_dir / "vllm"
    vllm.write_text(FAKE_VLLM.format(args_file=tmp_path / "args", python=sys.executable))
    for f in (smi, vllm):
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", ENV_FILE=str(tmp_path / "none.env"), PYTHONPATH=str(ROOT), **extra)
    return env


def test_refuses_when_the_gpu_is_full(tmp_path: Path) -> None:
    env = env_with(tmp_path, 1000, LLM_MODEL_DIR="/models/omni")
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "1000 MiB free, less than LLM_MIN_FREE_GPU_MIB=8000" in proc.stderr


@pytest.mark.parametrize(
    "var, value", [("LLM_GPU_MEMORY_UTILIZATION", "1.5"), ("LLM_PORT", "http"), ("LLM_KV_CACHE_DTYPE", "int3")]
)
def test_bad_values_are_named(tmp_path: Path, var: str, value: str) -> None:
    env = env_with(tmp_path, 20000, LLM_MODEL_DIR="/models/omni", **{var: value})
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and f"{var}={value}" in proc.stderr


def test_starts_waits_for_models_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = env_with(tmp_path, 20000, LLM_MODEL_DIR="/models/omni", LLM_PORT=str(port), LLM_MODEL="omni-test",
                   LLM_QUANTIZATION="awq", LLM_HOST="127.0.0.1")
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 60
        lines: list[str] = []
        assert proc.stdout is not None
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "ready:" in line:
                break
        assert any(f"ready: http://127.0.0.1:{port}/v1/models serves omni-test" in x for x in lines), lines
        args = (tmp_path / "args").read_text().split()
        assert args[:2] == ["serve", "/models/omni"]
        expected = [("--max-model-len", "2048"), ("--gpu-memory-utilization", "0.6"), ("--kv-cache-dtype", "fp8"),
                    ("--quantization", "awq"), ("--served-model-name", "omni-test")]
        for flag, value in expected:
            assert args[args.index(flag) + 1] == value
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
