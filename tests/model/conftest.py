"""Fixtures of the model tests: the tiny checkpoint loaded once (CPU, fp32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tts_engine.model.loader import LoadedModel, load_model


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> LoadedModel:
    return load_model(tiny_checkpoint, device="cpu", dtype="float32")
