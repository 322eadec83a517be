"""The load the worker reports to LiveKit (agent/worker.py `current_load`): the largest share in use of its three
limits, scaled so that any limit reached reads as AGENT_LOAD_THRESHOLD (where LiveKit offers it no call), and every
report lands in the stats record. With a real LiveKit server (two workers, bursts): tests/call/test_load.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from agent import worker, worker_stats
from agent.config import CPU_LIMIT, AgentConfig, ConfigError


@dataclass
class Server:  # what load_fnc reads of LiveKit's AgentServer: its running jobs
    active_jobs: list[object] = field(default_factory=list)


@dataclass
class Backend:
    active_streams: int = 0
    capacity: int = 16


class Stats:
    """The sampler's reading, set by the test (the sampler itself is tests/agent/test_worker_stats.py)."""

    cores = 2.0

    def __init__(self, busy: float = 0.0) -> None:
        self.busy = busy  # the process's share of its cores
        self.reports: list[tuple[float, dict[str, float]]] = []

    def cpu_cores(self, window_s: float) -> float:
        assert window_s == worker.CPU_WINDOW_S
        return self.busy * self.cores

    def note_load(self, value: float, terms: dict[str, float], jobs: int | None = None) -> None:
        self.reports.append((value, terms))
        self.jobs = jobs


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> Any:
    def configure(env: dict[str, str], *, busy: float = 0.0, streams: int = 0) -> Stats:
        stats = Stats(busy)
        monkeypatch.setattr(worker, "_config", AgentConfig.from_env(env))
        monkeypatch.setattr(worker_stats, "_sampler", stats)
        monkeypatch.setattr(worker, "_backend", Backend(active_streams=streams))
        monkeypatch.setattr(worker, "_active_calls", 0)
        return stats

    return configure


def test_calls_fill_the_worker_at_max_sessions_exactly(setup: Any) -> None:
    stats = setup({"AGENT_MAX_SESSIONS": "3", "AGENT_CPU_LIMIT": "off"})
    loads = [worker.current_load(Server([object()] * n)) for n in range(4)]
    threshold = AgentConfig.load_threshold
    assert loads[0] < 0.01 and all(load < threshold for load in loads[:3])
    assert loads[3] >= threshold  # full at 3 of 3, not at 0.9 * 3
    assert loads[1] == pytest.approx(threshold / 3)
    assert stats.reports[-1] == (loads[3], {"calls": 1.0, "engine": 0.0, "cpu": 0.0})


def test_livekits_reserved_slot_estimate_stops_at_the_limit(setup: Any) -> None:
    """LiveKit counts a job it offered but has not launched as load / jobs more (AgentServer._get_effective_load)."""
    threshold = AgentConfig.load_threshold
    for max_sessions in range(1, 12):
        setup({"AGENT_MAX_SESSIONS": str(max_sessions), "AGENT_CPU_LIMIT": "off"})
        for jobs in range(1, max_sessions + 1):
            load = worker.current_load(Server([object()] * jobs))
            for reserved in range(max_sessions + 1):
                full = load + reserved * load / jobs >= threshold
                assert full == (jobs + reserved >= max_sessions), (max_sessions, jobs, reserved)


def test_the_job_count_is_livekits_not_the_connected_calls(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = setup({"AGENT_MAX_SESSIONS": "2", "AGENT_CPU_LIMIT": "off"})
    monkeypatch.setattr(worker, "_active_calls", 0)  # a job launched, its entrypoint not yet connected
    assert worker.current_load(Server([object(), object()])) >= AgentConfig.load_threshold
    assert stats.jobs == 2  # LiveKit's count goes to the stats line beside ours
    monkeypatch.setattr(worker, "_active_calls", 1)
    assert worker.current_load() < AgentConfig.load_threshold  # without the server (tests): the connected calls


def test_engine_streams_and_cpu_fill_it_too(setup: Any) -> None:
    threshold = AgentConfig.load_threshold
    setup({"AGENT_MAX_SESSIONS": "100", "AGENT_CPU_LIMIT": "off"}, streams=16)
    assert worker.current_load(Server([object()])) >= threshold  # 16 of 16 engine streams
    setup({"AGENT_MAX_SESSIONS": "100", "AGENT_CPU_LIMIT": "0.8"}, busy=0.8)
    assert worker.current_load(Server([object()])) >= threshold  # the worker keeps 80 % of its cores busy, limit 0.8
    stats = setup({"AGENT_MAX_SESSIONS": "100", "AGENT_CPU_LIMIT": "0.8"}, busy=0.4)
    assert worker.current_load(Server([object()])) == pytest.approx(threshold / 2)
    assert stats.reports[-1][1]["cpu"] == pytest.approx(0.5)
    setup({"AGENT_MAX_SESSIONS": "100", "AGENT_CPU_LIMIT": "off"}, busy=1.0)
    assert worker.current_load(Server([object()])) < threshold / 50  # no CPU limit: only the call counts


def test_the_load_never_passes_one(setup: Any) -> None:
    setup({"AGENT_MAX_SESSIONS": "1", "AGENT_LOAD_THRESHOLD": "1.0"}, busy=3.0, streams=40)
    assert worker.current_load(Server([object()] * 5)) == 1.0


def test_cpu_limit_setting() -> None:
    assert AgentConfig.from_env({}).cpu_limit == CPU_LIMIT
    assert AgentConfig.from_env({"AGENT_CPU_LIMIT": "off"}).cpu_limit is None
    assert AgentConfig.from_env({"AGENT_CPU_LIMIT": "0.7"}).cpu_limit == 0.7
    for bad in ("0", "1.5", "lots", "nan"):
        with pytest.raises(ConfigError, match="AGENT_CPU_LIMIT"):
            AgentConfig.from_env({"AGENT_CPU_LIMIT": bad})
    assert AgentConfig.from_env({"AGENT_STATS_PATH": "/tmp/s.jsonl"}).stats_path == "/tmp/s.jsonl"


def test_the_calls_limit_by_default_follows_the_engine_and_the_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset AGENT_MAX_SESSIONS: one call with the embedded engine on a CPU; on a GPU or with a remote engine,
    what the H200 host measured: 2 calls a THREAD worker, 8 a PROCESS worker (agent/config.py)."""

    @dataclass
    class Engine:
        device: Any

    from types import SimpleNamespace

    from agent.config import MAX_SESSIONS, MAX_SESSIONS_CPU_ENGINE, MAX_SESSIONS_THREAD

    assert (MAX_SESSIONS_CPU_ENGINE, MAX_SESSIONS_THREAD, MAX_SESSIONS) == (1, 2, 8)
    monkeypatch.setattr(worker, "_engine", Engine(SimpleNamespace(type="cpu")))
    assert worker.max_sessions(AgentConfig.from_env({})) == 1
    monkeypatch.setattr(worker, "_engine", Engine(SimpleNamespace(type="cuda")))
    assert worker.max_sessions(AgentConfig.from_env({})) == 2
    assert worker.max_sessions(AgentConfig.from_env({"AGENT_JOB_EXECUTOR": "process"})) == 8
    monkeypatch.setattr(worker, "_engine", None)  # a remote engine: nothing loaded here
    remote = {"TTS_ENGINE_URL": "http://127.0.0.1:9/"}
    assert worker.max_sessions(AgentConfig.from_env(remote)) == 2
    assert worker.max_sessions(AgentConfig.from_env({**remote, "AGENT_JOB_EXECUTOR": "process"})) == 8
    assert worker.max_sessions(AgentConfig.from_env({**remote, "AGENT_MAX_SESSIONS": "5"})) == 5
