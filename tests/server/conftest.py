"""Server fixtures: a real aiohttp server on 127.0.0.1 (ephemeral port) around an engine on the tiny checkpoint."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tts_engine.config import EngineConfig
from tts_engine.engine import Engine
from tts_engine.server import start_server


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> Any:
    from tts_engine.model.loader import load_model

    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


@pytest.fixture
def engine_factory(tiny_model: Any, tiny_checkpoint: Path) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        config = dataclasses.replace(EngineConfig.from_env({}), model_dir=str(tiny_checkpoint), device="cpu")
        engine = Engine(tiny_model, dataclasses.replace(config, **overrides))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


class Served:
    def __init__(self, engine: Engine, base: str, server: Any, session: aiohttp.ClientSession) -> None:
        self.engine = engine
        self.base = base
        self.server = server
        self.session = session


@pytest.fixture
async def serve(engine_factory: Callable[..., Engine]) -> AsyncIterator[Callable[..., Any]]:
    runners: list[Any] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(**overrides: Any) -> Served:
        engine = engine_factory(**overrides)
        runner, port, server = await start_server(engine, "127.0.0.1", 0)
        runners.append(runner)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        sessions.append(session)
        return Served(engine, f"http://127.0.0.1:{port}", server, session)

    yield start
    for session in sessions:
        await session.close()
    for runner in runners:
        await runner.cleanup()
