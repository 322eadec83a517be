"""Shared fixtures: a tiny random-weight checkpoint in the real HF layout, built once per session."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
        if item.get_closest_marker("gpu") is not None:  # the marker, not any name with "gpu" in it
            item.add_marker(skip_gpu)


EXIT_GRACE_S = 60.0


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """End the run if a test left a thread that keeps the interpreter alive (e.g. a LiveKit job runner after a
    hang): CI would otherwise report its own timeout instead of the failure. A daemon watchdog, so a normal
    exit (thread pools shut down by the interpreter) is not delayed; it fires only if exit takes > 60 s."""
    status = int(exitstatus)

    def force_exit() -> None:
        time.sleep(EXIT_GRACE_S)
        main, me = threading.main_thread(), threading.current_thread()
        alive = [t.name for t in threading.enumerate() if t not in (main, me) and not t.daemon]
        print(f"\npytest: the interpreter did not exit within {EXIT_GRACE_S:.0f} s of the session's end; threads "
              f"still running: {', '.join(sorted(alive))}; exiting with the session's status {status}",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(status)

    threading.Thread(target=force_exit, name="pytest-exit-watchdog", daemon=True).start()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny CustomVoice checkpoint (real layout, random weights, seed 0)."""
    from tts_engine.model.factory import make_checkpoint

    out = tmp_path_factory.mktemp("tiny_ckpt") / "Qwen3-TTS-tiny"
    make_checkpoint("tiny", out, seed=0)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> Any:
    """The tiny checkpoint loaded once per session (CPU, fp32); engines in tests share its weights."""
    from tts_engine.model.loader import load_model

    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture
def make_engine(tiny_model: Any, tiny_checkpoint: Path) -> Iterator[Callable[..., Any]]:
    """Build engines over the shared tiny model with EngineConfig overrides; all are closed afterwards."""
    from tts_engine.config import EngineConfig
    from tts_engine.engine import Engine

    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        config = dataclasses.replace(EngineConfig.from_env({}), model_dir=str(tiny_checkpoint), device="cpu")
        engine = Engine(tiny_model, dataclasses.replace(config, **overrides))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
