"""The LiveKit worker without a LiveKit server: the AgentServer's settings (THREAD executor, raised init timeout,
load_fnc, the one rtc_session), and one simulated job (LiveKit's own `simulate_job` with a mock room) running
prewarm + entrypoint on the process-wide engine."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import AgentServer, JobExecutorType

from agent import worker
from agent.config import AgentConfig
from agent.engine_client import LocalBackend, RemoteBackend
from lab.fake_openai import FakeOpenAIServer


def test_the_server_follows_the_config() -> None:
    cfg = AgentConfig.from_env({"AGENT_INIT_TIMEOUT_S": "300", "AGENT_LOAD_THRESHOLD": "0.5", "AGENT_NAME": "x",
                                "AGENT_DRAIN_TIMEOUT_S": "20"})
    opts = worker.server_options(cfg)
    assert opts["job_executor_type"] is JobExecutorType.THREAD
    assert opts["initialize_process_timeout"] == 300.0 and opts["drain_timeout"] == 20
    assert opts["load_threshold"] == 0.5
    assert opts["load_fnc"] is worker.current_load and opts["setup_fnc"] is worker.prewarm
    proc = worker.server_options(AgentConfig.from_env({"AGENT_JOB_EXECUTOR": "process"}))
    assert proc["job_executor_type"] is JobExecutorType.PROCESS
    server = worker.build_server(cfg)
    assert isinstance(server, AgentServer)
    assert server.setup_fnc is worker.prewarm and server.load_fnc is worker.current_load
    with pytest.raises(RuntimeError, match="only one rtc_session"):  # the entrypoint is registered (one allowed)
        server.rtc_session(worker.entrypoint)


def test_remote_engine_url_loads_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "_backend", None)
    backend = worker.get_backend(AgentConfig.from_env({"TTS_ENGINE_URL": "http://127.0.0.1:9/"}))
    assert isinstance(backend, RemoteBackend) and backend.base_url == "http://127.0.0.1:9"
    assert worker.get_backend(AgentConfig.from_env({})) is backend  # one per process


async def test_simulated_job_runs_on_the_shared_engine(
    tiny_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeOpenAIServer() as fake:
        for key, value in {
            "LLM_BASE_URL": fake.base_url,
            "TRACES_DIR": str(tmp_path),
            "LIVEKIT_URL": "ws://127.0.0.1:9",
            "LIVEKIT_API_KEY": "devkey",
            "LIVEKIT_API_SECRET": "secret" * 6,
        }.items():
            monkeypatch.setenv(key, value)
        backend = LocalBackend(tiny_engine)
        monkeypatch.setattr(worker, "_backend", backend)
        monkeypatch.setattr(worker, "_active_calls", 0)
        server = worker.build_server(AgentConfig.from_env())
        started = asyncio.Event()
        server.on("worker_started", started.set)
        run = asyncio.create_task(server.run(devmode=True, unregistered=True))
        try:
            await asyncio.wait_for(started.wait(), timeout=60)
            await server.simulate_job("room-1", fake_job=True)
            for _ in range(200):
                if worker._active_calls == 1:
                    break
                await asyncio.sleep(0.1)
            assert worker._active_calls == 1
            assert 0.0 < worker.current_load() <= 1.0
            assert worker.get_backend(AgentConfig.from_env()) is backend
        finally:  # bounded: a close that hangs (a runner cancelled in prewarm) fails here, not at CI's limit
            await asyncio.wait_for(server.aclose(), timeout=60)
            run.cancel()


async def test_the_health_route_reports_traces_not_written_and_loop_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /health on the worker's own health server, as LiveKit's AgentServer.run() starts it (beside its / and
    /worker; LiveKit itself unreachable here): "ok", then "degraded" naming the failing traces file once writes
    fail, and with a stall of the worker's loop."""
    import socket
    import time

    import aiohttp

    from agent import tracing
    from common import loop_watch
    from token_server.agent_guard import HttpWorkers

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    # a fixed port: with port 0, LiveKit's server (on every interface) gets one port for IPv4, another for IPv6
    closed, http_port = free_port(), free_port()
    cfg = AgentConfig.from_env({"TRACES_DIR": str(tmp_path), "AGENT_NAME": "h", "AGENT_HTTP_PORT": str(http_port),
                                "AGENT_NUM_IDLE_PROCESSES": "0", "LIVEKIT_URL": f"ws://127.0.0.1:{closed}",
                                "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s" * 32})  # fmt: skip
    monkeypatch.setattr(worker, "_config", cfg)
    monkeypatch.setattr(worker, "_traces_problems", None)
    monkeypatch.setattr(worker, "_worker_probe", None)
    writes = tracing.WriteHealth()
    monkeypatch.setattr(worker, "WRITES", writes)
    monkeypatch.setattr(loop_watch, "STALL_LOG_S", 0.3)
    server = worker.build_server(cfg)
    run = asyncio.create_task(server.run())
    try:
        base = f"http://127.0.0.1:{http_port}"
        assert worker.check_traces_once(cfg) == []
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> dict[str, Any]:
                async with http.get(base + path) as resp:
                    assert resp.status == 200, path
                    return await resp.json()

            for _ in range(100):  # until LiveKit's server runs and has its agent name
                census = await HttpWorkers((base + "/worker",)).census("h")  # what the token server's guard reads
                if census.answered:
                    break
                await asyncio.sleep(0.1)
            assert [(w.agent_name, w.active_jobs) for w in census.answered] == [("h", 0)], census
            health = await get(worker.HEALTH_PATH)
            assert health["status"] == "ok" and health["traces"]["ok"] and health["traces"]["dir"] == str(tmp_path)

            day_file = tmp_path / "2026-12-02.jsonl"
            writes.failed(day_file, "trace x", OSError(28, "No space left on device"))
            health = await get(worker.HEALTH_PATH)
            assert health["status"] == "degraded" and health["traces"]["not_written"] == 1
            assert "No space left on device" in health["traces"]["failing"][str(day_file)]["last_error"]

            writes.written(day_file)
            for _ in range(100):  # "worker_started": the worker's loop has its probe
                if worker._worker_probe is not None:
                    break
                await asyncio.sleep(0.05)
            time.sleep(0.5)  # the worker's loop stalls
            await asyncio.sleep(0.4)
            health = await get(worker.HEALTH_PATH)
        assert health["status"] == "degraded" and health["traces"]["ok"], health
        (stall,) = health["loop_stalls"]
        assert stall["loop"] == "worker" and stall["seconds"] >= 0.4 and stall["cause"] == "waiting", stall
    finally:
        if worker._worker_probe is not None:
            worker._worker_probe.stop()
        await server.aclose()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


def test_a_worker_with_a_remote_engine_leaves_the_gpus_to_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """LiveKit's WebRTC creates a CUDA context in each process's first room join when it sees a GPU (0.6 s a process
    on the H200 host, serialized across processes): a worker whose engine is remote hides the GPUs, whatever it was
    given, before any room is joined; a worker with its own engine keeps them."""
    env = {"LIVEKIT_URL": "ws://127.0.0.1:9", "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s" * 32}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert not worker.leave_the_gpus(AgentConfig.from_env(env)) and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    remote = AgentConfig.from_env({**env, "TTS_ENGINE_URL": "http://127.0.0.1:9000"})
    assert worker.leave_the_gpus(remote) and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert not worker.leave_the_gpus(remote)  # once: the job processes inherit it
