"""The engine on a CPU leaves the media path a core (TTS_DEEP_STREAM_CPU_THREADS, default cores - 1) and runs
its thread at a lower priority (TTS_DEEP_STREAM_CPU_NICE, default 10)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

from common.niceness import lower_thread
from tts_engine.config import EngineConfig
from tts_engine.engine import Engine
from tts_engine.errors import ConfigError


def test_the_default_leaves_one_core_and_zero_keeps_torchs_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert EngineConfig.from_env({}).cpu_threads == max(1, len(os.sched_getaffinity(0)) - 1)
    monkeypatch.setenv("NUM_CPUS", "5")  # the cores this process may use (common/cpu.py), e.g. a container's quota
    assert EngineConfig.from_env({}).cpu_threads == 4
    assert EngineConfig.from_env({"TTS_DEEP_STREAM_CPU_THREADS": "0"}).cpu_threads == 0
    assert EngineConfig().cpu_threads == 0  # built in code (tests, benchmarks): torch's default
    with pytest.raises(ConfigError, match="TTS_DEEP_STREAM_CPU_THREADS=-1 is out of range"):
        EngineConfig.from_env({"TTS_DEEP_STREAM_CPU_THREADS": "-1"})


def test_loading_on_a_cpu_sets_torchs_threads(tiny_checkpoint: Path) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        engine = Engine.load(tiny_checkpoint, EngineConfig(device="cpu", cpu_threads=1), warmup=False)
        engine.close()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_the_cpu_nice_default_is_ten_from_the_environment_and_off_in_code() -> None:
    assert EngineConfig.from_env({}).cpu_nice == 10
    assert EngineConfig().cpu_nice == 0
    with pytest.raises(ConfigError, match="TTS_DEEP_STREAM_CPU_NICE=20 is out of range"):
        EngineConfig.from_env({"TTS_DEEP_STREAM_CPU_NICE": "20"})


def test_on_a_cpu_the_engine_thread_yields_to_the_media_path(tiny_checkpoint: Path) -> None:
    base = nice_of(threading.get_native_id())
    engine = Engine.load(tiny_checkpoint, EngineConfig(device="cpu", cpu_threads=1, cpu_nice=5), warmup=False)
    try:
        worker = engine.scheduler._thread.native_id
        assert worker is not None and nice_of(worker) == min(19, base + 5)
        assert nice_of(threading.get_native_id()) == base  # only the engine's thread: the caller is untouched
    finally:
        engine.close()


def test_lower_thread_changes_only_that_thread_and_refuses_nothing_to_do() -> None:
    base = nice_of(threading.get_native_id())
    seen: dict[str, int] = {}

    def body() -> None:
        tid = threading.get_native_id()
        seen["lowered"] = lower_thread(tid, 3)
        seen["nice"] = nice_of(tid)
        seen["zero"] = lower_thread(tid, 0)
        seen["after_zero"] = nice_of(tid)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == {"lowered": True, "nice": min(19, base + 3), "zero": False, "after_zero": min(19, base + 3)}
    assert nice_of(threading.get_native_id()) == base
    assert lower_thread(None, 5) is False
