"""A scripted OpenAI-compatible server (aiohttp) standing in for vLLM/Qwen3-Omni in tests and simulations.

It speaks the real protocol: `GET /v1/models`, `POST /v1/chat/completions` non-streaming JSON and
streaming SSE (`data: {chunk}` lines, a `finish_reason` chunk, a usage chunk when
`stream_options.include_usage`, then `data: [DONE]`). A request whose user message carries an
`audio_url` part is an STT request: the data URL must hold a base64 WAV (checked; 400 naming the field
otherwise) and the answer is the next scripted transcript. Any other request is an LLM request: the
reply scripted for the matching transcript streams word by word (`max_tokens` / `max_completion_tokens`
caps it with `finish_reason: "length"`; `continue_final_message` resumes a capped reply after the
partial assistant message, as vLLM does).

Latencies and faults are scripted: `stt_latency_s`, `llm_ttft_s`, `token_interval_s` (or per-token
`token_delays_s`), and per-endpoint
faults `slow` (sleeps `slow_s` first), `500`, `malformed` (broken JSON / SSE). `POST /_admin/script`
changes them at run time. The last `KEEP_REQUESTS` request bodies are kept in `requests` for tests (bounded:
each STT body carries its audio, and a soak or a long property run would otherwise hold every one of them).
A client closing an SSE stream mid-reply (the agent's barge-in cancel) is normal: counted in `streams_dropped`,
logged at DEBUG.

Tokens stream on an absolute schedule (token i at first token + i intervals), so writing them does not slow the
rate. CLI: `python -m lab.fake_openai --port N [--host H] [--preset production] [--stt-latency-ms MS]
[--llm-ttft-ms MS] [--token-ms MS]` (`production`: STT 150 ms, first token 150 ms, then 40 tokens/s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

logger = logging.getLogger("lab.fake_openai")

FAULTS = (None, "slow", "500", "malformed")

DEFAULT_TRANSCRIPTS = [
    "Hello, can you hear me?",
    "What is the weather like today?",
    "Tell me a short story about a cat.",
    "How far away is the moon?",
]
DEFAULT_REPLIES = [
    "Yes, I can hear you clearly. How can I help you today?",
    "It is sunny and mild today, about twenty degrees, with a light breeze in the afternoon.",
    "Once upon a time, a small grey cat found a warm spot by the window. She slept there all day, "
    "dreaming of fish and sunshine, and woke up only when the evening came.",
    "The moon is about three hundred and eighty four thousand kilometres away from the earth.",
]


@dataclass
class Script:
    transcripts: list[str] = field(default_factory=lambda: list(DEFAULT_TRANSCRIPTS))
    replies: list[str] = field(default_factory=lambda: list(DEFAULT_REPLIES))
    stt_latency_s: float = 0.05
    llm_ttft_s: float = 0.05
    token_interval_s: float = 0.01
    token_delays_s: list[float] = field(default_factory=list)  # per-token gaps (cycled); empty: token_interval_s
    stt_fault: str | None = None
    llm_fault: str | None = None
    slow_s: float = 30.0
    model: str = "qwen3-omni"

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if not hasattr(self, key):
                raise ValueError(f"unknown script field {key!r}; allowed: {', '.join(self.__dataclass_fields__)}")
            if key in ("stt_fault", "llm_fault") and value not in FAULTS:
                raise ValueError(f"{key}={value!r} is not allowed; allowed: {', '.join(map(str, FAULTS))}")
            setattr(self, key, value)


def _tokens(text: str) -> list[str]:
    """Stream deltas as a real tokenizer gives them: a word and its trailing space, and CJK one character at a
    time (with a punctuation mark after it), since that text has no spaces to split at."""
    return re.findall(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff][\u3000-\u303f\uff00-\uffef]?\s*"
                      r"|[^\s\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]+\s*", text)


class BadRequest(Exception):
    pass


KEEP_REQUESTS = 1000


class FakeOpenAIServer:
    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.requests: deque[dict[str, Any]] = deque(maxlen=KEEP_REQUESTS)
        self.stt_calls = 0
        self.llm_calls = 0
        self.streams_dropped = 0  # requests/streams the client closed mid-way (a cancel; logged at DEBUG)
        # called with "stt_request" / "llm_request" / "llm_token" (each token written) on the server's loop
        self.observer: Callable[[str], None] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_post("/_admin/script", self._admin)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeOpenAIServer:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.host = host
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers ----------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.script.model, "object": "model"}]})

    async def _admin(self, request: web.Request) -> web.Response:
        try:
            self.script.update(await request.json())
        except (ValueError, json.JSONDecodeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return web.json_response({"ok": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._chat_impl(request)
        except ConnectionError:
            # the client left while we read its body or answered (the agent's cancel): normal, not an ERROR
            self.streams_dropped += 1
            logger.debug("client closed the request mid-way")
            return web.Response(status=499)

    async def _chat_impl(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(400, f"request body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error(400, "field 'messages' must be a non-empty list")
        if not isinstance(body.get("model"), str):
            return _error(400, "field 'model' must be a string")
        body["_received_at"] = time.perf_counter()
        self.requests.append(body)
        try:
            audio = _find_audio(body["messages"])
        except BadRequest as exc:
            return _error(400, str(exc))
        if audio is not None:
            return await self._stt(body)
        return await self._llm(request, body)

    async def _stt(self, body: dict[str, Any]) -> web.StreamResponse:
        script = self.script
        index = self.stt_calls
        self.stt_calls += 1
        if self.observer is not None:
            self.observer("stt_request")
        if script.stt_fault == "slow":
            await asyncio.sleep(script.slow_s)
        if script.stt_fault == "500":
            return _error(500, "scripted STT failure")
        await asyncio.sleep(script.stt_latency_s)
        if script.stt_fault == "malformed":
            return web.Response(status=200, text='{"choices": [{"message": ', content_type="application/json")
        text = script.transcripts[index % len(script.transcripts)]
        return web.json_response(_completion(body["model"], text))

    def _reply_for(self, messages: list[dict[str, Any]]) -> str:
        script = self.script
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        user_text = _text_of(last_user) if last_user else ""
        for i, transcript in enumerate(script.transcripts):
            if transcript.strip() and transcript.strip() == user_text.strip():
                return script.replies[i % len(script.replies)]
        return script.replies[(self.llm_calls - 1) % len(script.replies)]

    async def _llm(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        script = self.script
        self.llm_calls += 1
        if self.observer is not None:
            self.observer("llm_request")
        if script.llm_fault == "slow":
            await asyncio.sleep(script.slow_s)
        if script.llm_fault == "500":
            return _error(500, "scripted LLM failure")
        messages = body["messages"]
        reply = self._reply_for(messages)
        tokens = _tokens(reply)
        if body.get("continue_final_message") and messages[-1].get("role") == "assistant":
            done = _text_of(messages[-1])
            tokens = _tokens(reply[len(done) :]) if reply.startswith(done) else []
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "stop"
        if isinstance(cap, int) and cap < len(tokens):
            tokens, finish = tokens[:cap], "length"
        await asyncio.sleep(script.llm_ttft_s)
        rid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        if not body.get("stream"):
            return web.json_response(_completion(body["model"], "".join(tokens), finish=finish, rid=rid))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            if script.llm_fault == "malformed":
                await resp.write(b'data: {"id": "x", "choices": [{"delta": {"content": "Hel\n\n')
                await resp.write(b"data: [DONE]\n\n")
                return resp
            await self._stream_tokens(resp, rid, body, tokens, finish)
        except ConnectionError:
            # the client dropped the stream mid-reply: what the agent's barge-in cancel does, so it is normal
            # (not an ERROR: runs count ERROR lines). aiohttp's ClientConnectionResetError is a ConnectionError.
            self.streams_dropped += 1
            logger.debug("client closed the stream %s mid-reply", rid)
        return resp

    async def _stream_tokens(
        self, resp: web.StreamResponse, rid: str, body: dict[str, Any], tokens: list[str], finish: str
    ) -> None:
        script = self.script
        await resp.write(_sse(_chunk(rid, body["model"], {"role": "assistant", "content": ""})))
        loop = asyncio.get_running_loop()
        due = loop.time()  # tokens keep an absolute schedule: the time spent writing does not slow the rate down
        for i, token in enumerate(tokens):
            if i:
                delays = script.token_delays_s
                due += delays[(i - 1) % len(delays)] if delays else script.token_interval_s
                await asyncio.sleep(max(0.0, due - loop.time()))
            await resp.write(_sse(_chunk(rid, body["model"], {"content": token})))
            if self.observer is not None:
                self.observer("llm_token")
        await resp.write(_sse(_chunk(rid, body["model"], {}, finish=finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 10, "completion_tokens": len(tokens), "total_tokens": 10 + len(tokens)}
            await resp.write(_sse({"id": rid, "object": "chat.completion.chunk", "created": int(time.time()),
                                   "model": body["model"], "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")


def _find_audio(messages: list[Any]) -> bytes | None:
    """The WAV bytes of the first audio_url part, None if the request has no audio."""
    for mi, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for pi, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "audio_url":
                continue
            where = f"messages[{mi}].content[{pi}].audio_url.url"
            url = (part.get("audio_url") or {}).get("url")
            prefix = "data:audio/wav;base64,"
            if not isinstance(url, str) or not url.startswith(prefix):
                raise BadRequest(f"{where} must be a data URL starting with {prefix!r}")
            try:
                wav = base64.b64decode(url[len(prefix) :], validate=True)
            except ValueError as exc:
                raise BadRequest(f"{where} is not valid base64: {exc}") from None
            if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
                raise BadRequest(f"{where} does not hold a RIFF/WAVE file")
            return wav
    return None


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _completion(model: str, text: str, *, finish: str = "stop", rid: str | None = None) -> dict[str, Any]:
    n = len(_tokens(text))
    return {
        "id": rid or f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
    }


def _chunk(rid: str, model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def _error(status: int, message: str) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


#: CLI timings (ms): the test default, and what production's vLLM / Qwen3-Omni roughly gives (issue 32's GPU-host runs)
PRESETS = {
    "default": {"stt_latency_ms": 50.0, "llm_ttft_ms": 50.0, "token_ms": 10.0},
    "production": {"stt_latency_ms": 150.0, "llm_ttft_ms": 150.0, "token_ms": 25.0},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.fake_openai", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="production: STT 150 ms, LLM first token 150 ms then 40 tokens/s (flags below override)")
    parser.add_argument("--stt-latency-ms", type=float)
    parser.add_argument("--llm-ttft-ms", type=float)
    parser.add_argument("--token-ms", type=float)
    parser.add_argument("--model", default="qwen3-omni")
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.preset or "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port} is out of range (allowed: 0..65535)")
    script = Script(
        stt_latency_s=args.stt_latency_ms / 1000,
        llm_ttft_s=args.llm_ttft_ms / 1000,
        token_interval_s=args.token_ms / 1000,
        model=args.model,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def serve() -> None:
        server = await FakeOpenAIServer(script).start(args.host, args.port)
        logger.info("fake OpenAI server on %s", server.base_url)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
