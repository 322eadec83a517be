"""Engine fixtures: the tiny checkpoint loaded once; engines with different configs share its weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tts_engine.config import EngineConfig
from tts_engine.engine import Engine


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> Any:
    from tts_engine.model.loader import load_model

    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture
def make_engine(tiny_model: Any, tiny_checkpoint: Path) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        config = dataclasses.replace(EngineConfig.from_env({}), model_dir=str(tiny_checkpoint), device="cpu")
        engine = Engine(tiny_model, dataclasses.replace(config, **overrides))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture(scope="module")
def shared_engine(tiny_model: Any, tiny_checkpoint: Path) -> Iterator[Engine]:
    config = dataclasses.replace(EngineConfig.from_env({}), model_dir=str(tiny_checkpoint), device="cpu")
    engine = Engine(tiny_model, config)
    yield engine
    engine.close()
