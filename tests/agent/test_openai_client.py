"""The STT/LLM clients share one TLS context (building one loads the CA bundle, ~20 ms of CPU on the event
loop), and a call closes the connection pool it opened."""

from __future__ import annotations

from typing import Any

import pytest

from agent import openai_client
from agent.llm import build_llm, llm_client
from agent.stt import OmniSTT
from agent.voice import Call
from lab.fake_openai import FakeOpenAIServer
from tests.agent.duplex_harness import EnergyVAD, ScriptedBackend, fast_config


@pytest.fixture
def context_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts TLS contexts built by httpx's default path and by ours (the same function underneath)."""
    import httpcore2

    real = httpcore2.default_ssl_context
    built: list[int] = []

    def counting(**kw: Any) -> Any:
        built.append(1)
        return real(**kw)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counting)
    openai_client.tls_context.cache_clear()
    yield built
    openai_client.tls_context.cache_clear()


async def test_clients_of_many_calls_build_one_tls_context(context_builds: list[int]) -> None:
    cfg = fast_config("http://127.0.0.1:9/v1")
    closers = []
    for _ in range(3):  # three calls' worth: an LLM with its continuation, and an STT
        client = llm_client(cfg)
        build_llm(cfg, client)
        build_llm(cfg, client, continuation=True)
        stt = OmniSTT(base_url=cfg.llm_base_url, model="omni")
        closers += [client.close, stt.aclose]
    assert len(context_builds) == 1
    for close in closers:
        await close()


async def test_a_closed_call_closes_its_llm_pool() -> None:
    server = await FakeOpenAIServer().start()
    try:
        call = Call(fast_config(server.base_url), vad=EnergyVAD(), backend=ScriptedBackend(), traces_dir=None)
        await call.session.start(agent=call.agent, record=False)
        assert not call.llm_client.is_closed()
        await call.aclose()
        assert call.llm_client.is_closed()
    finally:
        await server.stop()
