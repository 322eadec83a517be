"""Shared fixtures: a tiny random-weight checkpoint in the real HF layout, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CustomVoice checkpoint (real layout, random weights, seed 0)."""
    from tts_engine.model.factory import make_checkpoint

    out = tmp_path_factory.mktemp("tiny_ckpt") / "Qwen3-TTS-tiny"
    make_checkpoint("tiny", out, seed=0)
    return out
