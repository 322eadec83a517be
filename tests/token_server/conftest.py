"""Fixtures for the token server tests: a config with a recognisable secret and a live server on an ephemeral port."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from token_server.app import create_app
from token_server.config import ServerConfig

API_KEY = "APItestkey"
# long and unique, so a scan for it cannot match by accident and finds any leak
API_SECRET = "sEcReT-" + secrets.token_hex(16)


@pytest.fixture
def config() -> ServerConfig:
    return ServerConfig.from_env(
        {
            "LIVEKIT_URL": "wss://lk.example.test",
            "LIVEKIT_API_KEY": API_KEY,
            "LIVEKIT_API_SECRET": API_SECRET,
            "AGENT_NAME": "voice-agent-test",
            "TOKEN_TTL_S": "600",
            "ALLOWED_ORIGINS": "https://app.example.test, http://localhost:5173",
            "TOKEN_RATE_LIMIT_PER_MIN": "1000",
        }
    )


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., object]]:
    """make_client(config, **overrides) -> a TestClient on a real aiohttp server at 127.0.0.1:<ephemeral>."""
    clients: list[TestClient] = []

    async def factory(cfg: ServerConfig, **overrides: object) -> TestClient:
        client = TestClient(TestServer(create_app(replace(cfg, **overrides)), host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def client(make_client, config: ServerConfig) -> TestClient:
    return await make_client(config)


@pytest.fixture
def api_secret() -> str:
    return API_SECRET


@pytest.fixture
def raw_get() -> Callable[..., object]:
    return _raw_get


async def _raw_get(port: int, path: str, headers: str = "") -> tuple[int, bytes]:
    """Send the request line byte for byte (no client-side path normalisation) and return (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Connection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body
