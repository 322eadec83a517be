"""Engine fixtures: one engine per module over the shared tiny model (tests/conftest.py has make_engine)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tts_engine.config import EngineConfig
from tts_engine.engine import Engine


@pytest.fixture(scope="module")
def shared_engine(tiny_model: Any, tiny_checkpoint: Path) -> Iterator[Engine]:
    config = dataclasses.replace(EngineConfig.from_env({}), model_dir=str(tiny_checkpoint), device="cpu")
    engine = Engine(tiny_model, config)
    yield engine
    engine.close()
