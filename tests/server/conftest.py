"""Server fixtures: a real aiohttp server on 127.0.0.1 (ephemeral port) around an engine on the tiny checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tts_engine.engine import Engine
from tts_engine.server import start_server


class Served:
    def __init__(self, engine: Engine, base: str, server: Any, session: aiohttp.ClientSession) -> None:
        self.engine = engine
        self.base = base
        self.server = server
        self.session = session


@pytest.fixture
async def serve(make_engine: Callable[..., Engine]) -> AsyncIterator[Callable[..., Any]]:
    runners: list[Any] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(**overrides: Any) -> Served:
        engine = make_engine(**overrides)
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
