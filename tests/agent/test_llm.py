"""The vLLM LLM through livekit-plugins-openai against the fake server: thinking off, token cap,
temperature, history, and continuation of a capped answer with continue_final_message."""

from __future__ import annotations

import dataclasses

from livekit.agents import APIConnectOptions, llm

from agent.config import AgentConfig
from agent.llm import build_llm, llm_client, stream_with_continuation
from lab.fake_openai import FakeOpenAIServer, Script

REPLY = "one two three four five six seven eight nine ten."


def config(base_url: str, **kw: object) -> AgentConfig:
    return dataclasses.replace(AgentConfig.from_env({}), llm_base_url=base_url, llm_model="omni", **kw)


async def collect(cfg: AgentConfig, ctx: llm.ChatContext, *, continuation: bool) -> str:
    client = llm_client(cfg)
    main = build_llm(cfg, client)
    cont = build_llm(cfg, client, continuation=True) if continuation else None
    text = ""
    async for chunk in stream_with_continuation(
        main, cont, chat_ctx=ctx, tools=[], conn_options=APIConnectOptions(max_retry=0, timeout=5),
        max_tokens=cfg.llm_max_tokens,
    ):
        if chunk.delta and chunk.delta.content:
            text += chunk.delta.content
    await main.aclose()
    if cont is not None:
        await cont.aclose()
    await client.close()
    return text


def context(*turns: tuple[str, str]) -> llm.ChatContext:
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="system", content="be brief")
    for role, text in turns:
        ctx.add_message(role=role, content=text)
    return ctx


async def test_request_body_thinking_off_cap_and_history() -> None:
    script = Script(transcripts=["hi"], replies=[REPLY], llm_ttft_s=0, token_interval_s=0)
    async with FakeOpenAIServer(script) as server:
        cfg = config(server.base_url, llm_max_tokens=50, llm_temperature=0.3)
        text = await collect(cfg, context(("user", "earlier"), ("assistant", "before"), ("user", "hi")),
                             continuation=False)
    assert text == REPLY
    (body,) = server.requests
    assert body["stream"] is True and body["model"] == "omni"
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_completion_tokens"] == 50 and body["temperature"] == 0.3
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


async def test_capped_answer_is_continued() -> None:
    script = Script(transcripts=["hi"], replies=[REPLY], llm_ttft_s=0, token_interval_s=0)
    async with FakeOpenAIServer(script) as server:
        cfg = config(server.base_url, llm_max_tokens=4)
        text = await collect(cfg, context(("user", "hi")), continuation=True)
    assert text == REPLY  # 4 + 4 + 2 tokens over three requests (max_rounds=2 continuations)
    assert len(server.requests) == 3
    second = server.requests[1]
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False
    assert second["messages"][-1] == {"role": "assistant", "content": "one two three four "}


async def test_capped_answer_without_continuation_stops() -> None:
    script = Script(transcripts=["hi"], replies=[REPLY], llm_ttft_s=0, token_interval_s=0)
    async with FakeOpenAIServer(script) as server:
        text = await collect(config(server.base_url, llm_max_tokens=4), context(("user", "hi")), continuation=False)
    assert text == "one two three four "
    assert len(server.requests) == 1


def test_history_for_request_keeps_instructions_and_the_last_items() -> None:
    from livekit.agents import llm

    from agent.llm import history_for_request

    ctx = llm.ChatContext()
    ctx.add_message(role="system", content="be brief")
    for i in range(30):
        ctx.add_message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
    sent = history_for_request(ctx, max_items=4)
    texts = [item.text_content for item in sent.items]
    assert texts == ["be brief", "m26", "m27", "m28", "m29"]
    assert len(ctx.items) == 31  # the session's own history is untouched


async def test_a_failed_answer_is_a_recoverable_error_so_it_never_closes_the_call() -> None:
    """LiveKit closes the session after `max_unrecoverable_errors` unrecoverable LLM errors with no agent speech
    between them; the answer's node apologises for every failure, so ours are all recoverable. Five failed
    requests in a row (more than the limit of 3) reach the listener as recoverable errors."""
    async with FakeOpenAIServer(Script(llm_fault="500")) as server:
        cfg = config(server.base_url)
        client = llm_client(cfg)
        model = build_llm(cfg, client)
        seen: list[llm.LLMError] = []
        model.on("error", seen.append)
        for _ in range(5):
            try:
                await collect_from(model, context(("user", "hello")))
            except Exception as exc:  # noqa: BLE001 - whichever class the plugin raises, it names the 500
                assert "500" in str(exc) or "Internal" in str(exc), exc
            else:
                raise AssertionError("the stand-in answered 500; the stream must fail")
        await model.aclose()
        await client.close()
    assert len(seen) == 5 and all(e.recoverable for e in seen), seen


async def collect_from(model: llm.LLM, ctx: llm.ChatContext) -> str:
    text = ""
    async with model.chat(chat_ctx=ctx, conn_options=APIConnectOptions(max_retry=0, timeout=5)) as stream:
        async for chunk in stream:
            if chunk.delta and chunk.delta.content:
                text += chunk.delta.content
    return text
