"""The engine on a CPU leaves the media path a core: TTS_DEEP_STREAM_CPU_THREADS (default cores - 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tts_engine.config import EngineConfig
from tts_engine.engine import Engine
from tts_engine.errors import ConfigError


def test_the_default_leaves_one_core_and_zero_keeps_torchs_choice() -> None:
    assert EngineConfig.from_env({}).cpu_threads == max(1, (os.cpu_count() or 1) - 1)
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
