"""The vLLM stand-in treats a client that drops its stream mid-reply (what a barge-in cancel does) as normal:
no ERROR record anywhere (the stress run counts ERROR lines), the drop is counted, and the server keeps serving."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from lab.fake_openai import FakeOpenAIServer, Script


async def test_client_disconnect_mid_stream_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    script = Script(replies=["one two three four five six seven eight nine ten"] * 4,
                    llm_ttft_s=0.0, token_interval_s=0.02)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with caplog.at_level(logging.DEBUG):
        async with FakeOpenAIServer(script) as server:
            async with aiohttp.ClientSession() as client:
                for _ in range(3):
                    resp = await client.post(f"{server.base_url}/chat/completions", json=body)
                    assert resp.status == 200
                    await resp.content.readline()  # the first SSE line arrived: the reply is streaming
                    resp.close()  # the agent's cancel: drop the connection mid-reply
                    await asyncio.sleep(0.1)  # the server's next write meets the closed socket
                async with client.post(f"{server.base_url}/chat/completions", json=body) as resp:
                    text = await resp.text()
            assert "data: [DONE]" in text  # still serving
            assert server.streams_dropped == 3
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


async def test_client_gone_before_the_first_byte_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """A barge-in during the LLM's time to first token: the client leaves before the response starts."""
    script = Script(llm_ttft_s=0.2)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with caplog.at_level(logging.DEBUG):
        async with FakeOpenAIServer(script) as server:
            async with aiohttp.ClientSession() as client:
                request = asyncio.ensure_future(client.post(f"{server.base_url}/chat/completions", json=body))
                await asyncio.sleep(0.05)
                request.cancel()  # the agent's cancel closes the connection mid-TTFT
                await asyncio.sleep(0.3)  # the server wakes up and starts a response nobody reads
                async with client.post(f"{server.base_url}/chat/completions", json=body) as resp:
                    assert "data: [DONE]" in await resp.text()
            assert server.streams_dropped == 1
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


async def test_client_gone_while_its_body_is_read_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """A cut at the LLM request itself: the connection closes before the server has the whole body."""
    with caplog.at_level(logging.DEBUG):
        async with FakeOpenAIServer() as server:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"model\": \"m\", ")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()  # gone with 985 bytes of the body still owed
            await asyncio.sleep(0.2)
            assert server.streams_dropped == 1
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
