"""Agent test fixtures: one tiny engine per test session (loading costs seconds on CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint: Path) -> Iterator[Any]:
    from tts_engine import Engine, EngineConfig

    engine = Engine.load(tiny_checkpoint, EngineConfig.from_env({}, device="cpu"))
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def sim_backend(tiny_engine: Any) -> Any:
    """The real engine, 3 codec frames (240 ms) per segment so random weights do not talk for seconds."""
    from agent.engine_client import LocalBackend

    return LocalBackend(tiny_engine, max_frames_per_segment=3)
