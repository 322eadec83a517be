"""The LLM: `livekit-plugins-openai` pointed at vLLM, plus the continuation policy.

- `llm_client(cfg)`: the call's OpenAI client for `LLM_BASE_URL` (agent/openai_client.py: shared TLS context),
  httpx2 read timeout `LLM_TIMEOUT_S` (the plugin's 5 s default is too tight for a long prefill). The caller
  owns it and closes it when the call ends; the plugin never closes a client it was handed.
- `build_llm(cfg, client)`: `openai.LLM(model=LLM_MODEL, client, temperature=LLM_TEMPERATURE,
  max_completion_tokens=LLM_MAX_TOKENS)`, thinking off through `extra_body.chat_template_kwargs`
  (vLLM's way to switch Qwen3 templates; a thinking model would hold its first spoken token back for
  seconds).
  Failure policy: the answer's `llm_node` recovers from every LLM failure (it speaks the apology and the call
  listens on), so the `error` events this LLM emits are marked recoverable. Otherwise LiveKit counts them,
  and more than `max_unrecoverable_errors` (3) failures with no agent speech between them (a caller who talks over
  every apology while the LLM is down) would close the whole call, silent for good. Same policy as the STT.
  Chat history across turns is the framework's `chat_ctx`, which keeps user and assistant messages.
- `stream_with_continuation(...)`: when an answer is cut by the token cap (usage.completion_tokens ==
  max tokens) and `ENABLE_CONTINUATION` is on, a second request resumes it. It sends the partial answer
  as the final assistant message with vLLM's `continue_final_message: true, add_generation_prompt:
  false`, so the model carries on mid-sentence. It is issued the moment the first stream ends, while the
  first part is still being synthesised and played, so the user hears no gap. At most `max_rounds`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2  # the fork livekit-plugins-openai and openai 3.x are built on
import openai
from livekit.agents import APIConnectOptions, llm
from livekit.plugins import openai as lk_openai

from agent.config import AgentConfig
from agent.openai_client import openai_client

logger = logging.getLogger("agent.llm")

THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
CONTINUE_FINAL: dict[str, Any] = {**THINKING_OFF, "continue_final_message": True, "add_generation_prompt": False}


def llm_client(cfg: AgentConfig) -> openai.AsyncOpenAI:
    timeout = httpx2.Timeout(connect=min(5.0, cfg.llm_timeout_s), read=cfg.llm_timeout_s, write=5.0, pool=5.0)
    return openai_client(base_url=cfg.llm_base_url, api_key=cfg.llm_api_key, timeout=timeout)


class CallLLM(lk_openai.LLM):
    """`livekit-plugins-openai`'s LLM whose failures never end the call (see the module docstring)."""

    def emit(self, event: Any, *args: Any) -> None:
        if event == "error" and args and isinstance(args[0], llm.LLMError) and not args[0].recoverable:
            args = (args[0].model_copy(update={"recoverable": True}), *args[1:])
        super().emit(event, *args)


def build_llm(cfg: AgentConfig, client: openai.AsyncOpenAI, *, continuation: bool = False) -> CallLLM:
    return CallLLM(
        model=cfg.llm_model,
        client=client,
        temperature=cfg.llm_temperature,
        max_completion_tokens=cfg.llm_max_tokens,
        extra_body=CONTINUE_FINAL if continuation else THINKING_OFF,
    )


async def stream_with_continuation(
    main: llm.LLM,
    continuation: llm.LLM | None,
    *,
    chat_ctx: llm.ChatContext,
    tools: list[Any],
    conn_options: APIConnectOptions,
    max_tokens: int,
    max_rounds: int = 2,
    on_stream: Callable[[llm.LLMStream], None] | None = None,
) -> AsyncIterator[llm.ChatChunk]:
    """Yield the reply's chunks, resuming a token-capped answer up to `max_rounds` times."""
    text = ""
    rounds = 1 + (max_rounds if continuation is not None else 0)
    for round_index in range(rounds):
        if round_index == 0:
            model, ctx = main, chat_ctx
        else:
            assert continuation is not None
            model, ctx = continuation, chat_ctx.copy()
            ctx.add_message(role="assistant", content=text)
            logger.debug("continuing a capped answer (round %d, %d chars so far)", round_index, len(text))
        completion_tokens: int | None = None
        used_tools = False
        async with model.chat(chat_ctx=ctx, tools=tools, conn_options=conn_options) as stream:
            if on_stream is not None:
                on_stream(stream)
            async for chunk in stream:
                if chunk.usage is not None:
                    completion_tokens = chunk.usage.completion_tokens
                if chunk.delta is not None:
                    if chunk.delta.tool_calls:
                        used_tools = True
                    if chunk.delta.content:
                        text += chunk.delta.content
                yield chunk
        capped = completion_tokens is not None and completion_tokens >= max_tokens
        if used_tools or not capped or not text:
            return


def history_for_request(chat_ctx: llm.ChatContext, max_items: int) -> llm.ChatContext:
    """The chat context one LLM request sends: the instructions plus the last `max_items` items.

    Without a cap every turn resends the whole call, so the prompt (and vLLM's prefill, and the
    framework's per-request conversion) grows with the call: the 1000-turn soak measured median LLM
    TTFT rising from 29 ms to 65 ms over 100 turns. The session's own history is left untouched.
    """
    trimmed = chat_ctx.copy()
    trimmed.truncate(max_items=max_items)
    return trimmed
