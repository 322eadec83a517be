"""Server fixtures: a real aiohttp server on 127.0.0.1 (ephemeral port) around an engine on the tiny checkpoint.

`serve(server=ServerConfig(...), send_buffer=None, **engine_overrides)`. Without `server`, there is no per-client
limit: every client of a test shares 127.0.0.1, and only the tests about that limit want it (they pass their own
ServerConfig). `send_buffer` sets SO_SNDBUF on the listening socket (accepted connections inherit it): a small one
makes a client that stops reading fill the server's buffers after a few packets, as on a slow link."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tts_engine.engine import Engine
from tts_engine.server.app import start_server
from tts_engine.server.config import ServerConfig, listen_sockets


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

    async def start(server: ServerConfig | None = None, send_buffer: int | None = None, **overrides: Any) -> Served:
        engine = make_engine(**overrides)
        config = server if server is not None else ServerConfig(client_max_streams=0)
        sockets = listen_sockets("127.0.0.1", 0)
        if send_buffer is not None:
            sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        runner, port, tts_server = await start_server(engine, config=config, sockets=sockets)
        runners.append(runner)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        sessions.append(session)
        return Served(engine, f"http://127.0.0.1:{port}", tts_server, session)

    yield start
    for session in sessions:
        await session.close()
    for runner in runners:
        await runner.cleanup()
