"""`POST /v1/audio/speech`: the OpenAI speech API over the engine, for the `openai` SDK, LiveKit's OpenAI TTS plugin
(with `base_url`) and chat front ends.

Request (JSON): `model` (required string; any name is served by the one loaded checkpoint, as the OpenAI-compatible
servers of this ecosystem do), `input` (required; any length up to TTS_DEEP_STREAM_MAX_TEXT_CHARS, past it 413; the
engine cuts long text at sentence boundaries and speaks it as one stream), `voice` (required; one of the
checkpoint's speakers, e.g. "serena"), `response_format` (mp3 default, opus, aac, flac, wav, pcm = raw s16le 24 kHz
mono), `speed` (only 1.0: the model has no speed control and no time-stretch is applied; anything else is a 400
naming it), `instructions` (checkpoints that take an instruction, the 1.7B; a non-empty one on others is a 400),
`stream_format` (`audio` default: the encoded audio as a chunked body; `sse`: `speech.audio.delta` events with
base64 audio, then `speech.audio.done`), and the extension `language` (default auto; the engine's languages).
Unknown fields are refused too, so a typo does not pass silently.

Audio is written as the engine produces it (the first packet one frame after admission), so this route streams with
the same first-audio time as `/tts/stream`; the headers go out with the first packet, so input the engine refuses
at admission is still a 4xx. Errors use OpenAI's shape: {"error": {"message", "type", "param", "code"}}; `param`
names the field, the message the value and the allowed values. 503 + Retry-After when the engine is busy. A client
that leaves mid-stream cancels its engine stream. Requests are counted and summarised like the native routes
(`GET /v1/requests/{id}`, `x-request-id`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

from aiohttp import web

from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError
from tts_engine.routes.encode import FORMATS, AudioEncoder

log = logging.getLogger("tts_engine.routes.openai_speech")

PATH = "/v1/audio/speech"
FIELDS = ("model", "input", "voice", "response_format", "speed", "instructions", "stream_format", "language")
STREAM_FORMATS = ("audio", "sse")
#: engine field -> OpenAI field, for errors the engine raises
_ENGINE_FIELDS = {"text": "input", "speaker": "voice", "instruct": "instructions"}


def _or_default(value: Any, default: str) -> Any:
    """null and "" mean the default; any other value is checked as given (0 or false is not a format)."""
    return default if value is None or value == "" else value


class SpeechError(Exception):
    def __init__(self, message: str, param: str | None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def openai_error(message: str, param: str | None, status: int = 400, code: str | None = None,
                 headers: dict[str, str] | None = None) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


class OpenAISpeech:
    def __init__(self, server: Any) -> None:
        self.server = server  # tts_engine.server.TTSServer: engine, summaries, counters
        self.engine = server.engine

    def register(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.speech)

    # ---- parsing ------------------------------------------------------------------------------
    async def parse(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise SpeechError("request body is larger than 1 MiB", "body", 413) from None
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (ValueError, RecursionError) as exc:  # bad UTF-8/JSON, too deeply nested, too many digits
            raise SpeechError(f"body is not valid JSON: {exc}", "body") from None
        if not isinstance(body, dict):
            raise SpeechError(f"body must be a JSON object with fields {', '.join(FIELDS)}", "body")
        for key in body:
            if key not in FIELDS:
                raise SpeechError(f"unknown field {key!r}; allowed fields: {', '.join(FIELDS)}", key)
        for key in ("model", "input", "voice"):
            if key not in body:
                raise SpeechError(f"field {key!r} is required", key)
        for key, value in body.items():  # JSON can carry a lone surrogate ("\ud800") that no encoder accepts
            if isinstance(value, str) and any("\ud800" <= ch <= "\udfff" for ch in value):
                raise SpeechError(f"{key} holds a lone UTF-16 surrogate; send valid Unicode", key)
        model = body["model"]
        if not isinstance(model, str) or not model.strip():
            raise SpeechError(f"model={model!r} is not allowed; give a model name (a non-empty string)", "model")
        if not isinstance(body["input"], str):
            raise SpeechError(f"input must be a string, got {type(body['input']).__name__}", "input")
        voice = body["voice"]
        voices = self.engine.speakers
        if not isinstance(voice, str) or voice.strip().lower() not in voices:
            raise SpeechError(f"voice={voice!r} is not allowed; allowed values: {', '.join(sorted(voices))}", "voice")
        fmt = _or_default(body.get("response_format"), "mp3")
        if not isinstance(fmt, str) or fmt not in FORMATS:  # a list or object is not a format (nor hashable)
            raise SpeechError(f"response_format={fmt!r} is not allowed; allowed values: {', '.join(FORMATS)}",
                              "response_format")
        stream_format = _or_default(body.get("stream_format"), "audio")
        if not isinstance(stream_format, str) or stream_format not in STREAM_FORMATS:
            raise SpeechError(f"stream_format={stream_format!r} is not allowed; allowed values: "
                              f"{', '.join(STREAM_FORMATS)}", "stream_format")
        speed = body.get("speed", 1.0)
        if speed is None:
            speed = 1.0
        if isinstance(speed, bool) or not isinstance(speed, int | float) or float(speed) != 1.0:
            raise SpeechError(f"speed={speed!r} is not supported by this server; allowed values: 1.0", "speed")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise SpeechError(f"instructions must be a string, got {type(instructions).__name__}", "instructions")
        if instructions and instructions.strip() and not self.engine.model.config.supports_instruct:
            raise SpeechError("instructions are not supported by the loaded checkpoint (only the 1.7B CustomVoice "
                              "takes them); leave instructions out", "instructions")
        language = _or_default(body.get("language"), "auto")  # the engine refuses a non-string
        return {"input": body["input"], "voice": voice.strip().lower(), "format": fmt, "stream_format": stream_format,
                "instructions": instructions.strip() if instructions and instructions.strip() else None,
                "language": language, "model": model}

    # ---- handler ------------------------------------------------------------------------------
    async def speech(self, request: web.Request) -> web.StreamResponse:
        t_received = time.perf_counter()
        server = self.server
        request_id = server._request_id(request)  # noqa: SLF001 - same package
        try:
            params = await self.parse(request)
            handle = self.engine.stream(params["input"], params["voice"], params["language"],
                                        instruct=params["instructions"], request_id=request_id)
        except SpeechError as exc:
            return self._count(openai_error(str(exc), exc.param, exc.status))
        except TTSInputError as exc:
            return self._count(self._input_error(exc))
        except EngineBusyError as exc:
            return self._count(openai_error(str(exc), None, 503, "busy", {"Retry-After": "1"}))
        summary: dict[str, Any] = {"request_id": request_id, "endpoint": PATH, "bytes_sent": 0,
                                   "response_format": params["format"], "stream_format": params["stream_format"]}
        encoder = AudioEncoder(params["format"])
        response: web.StreamResponse | None = None
        server.in_flight.inc()
        try:
            try:
                first = await handle.__anext__()
            except StopAsyncIteration:
                first = None
            except TTSInputError as exc:
                summary["status"] = "rejected"
                return self._count(self._input_error(exc))
            sse = params["stream_format"] == "sse"
            response = web.StreamResponse(status=200, headers={
                "content-type": "text/event-stream" if sse else encoder.content_type,
                "x-request-id": request_id, "x-sample-rate": "24000", "cache-control": "no-cache",
            })
            response.enable_chunked_encoding()
            await response.prepare(request)
            packet = first
            while packet is not None:
                await self._write(response, encoder.push(packet.pcm), sse, summary, t_received)
                try:
                    packet = await handle.__anext__()
                except StopAsyncIteration:
                    packet = None
            await self._write(response, encoder.finish(), sse, summary, t_received)
            if sse:
                usage = {"input_tokens": len(params["input"]), "output_tokens": handle.metrics.frames}
                usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
                done = {"type": "speech.audio.done", "usage": usage}
                await response.write(f"data: {json.dumps(done)}\n\n".encode())
            summary["status"] = "completed"
            server._finish_summary(summary, handle, t_received)  # noqa: SLF001
            await response.write_eof()
            return self._count(response)
        except (ConnectionResetError, asyncio.CancelledError) as exc:
            handle.cancel()
            summary["status"] = "client_disconnected"
            server.disconnects.inc()
            server.requests_total.labels("openai_speech", "disconnected").inc()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return response if response is not None else web.Response(status=499)
        except Exception as exc:  # an engine fault: a 500 before the headers, a cut body after them
            handle.cancel()
            summary["status"], summary["error"] = "error", str(exc)
            log.error("speech %s failed: %s", request_id, exc)
            if response is None:
                return self._count(openai_error(f"synthesis failed: {exc}", None, 500))
            server.requests_total.labels("openai_speech", "error").inc()
            if request.transport is not None:
                request.transport.close()
            return response
        finally:
            server.in_flight.dec()
            handle.cancel()
            encoder.close()
            if "stream" not in summary:
                server._finish_summary(summary, handle, t_received)  # noqa: SLF001

    async def _write(self, response: web.StreamResponse, data: bytes, sse: bool, summary: dict[str, Any],
                     t_received: float) -> None:
        if not data:
            return
        summary["bytes_sent"] += len(data)
        if sse:
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            data = f"data: {json.dumps(event)}\n\n".encode()
        await response.write(data)
        if "ttfa_ms" not in summary:  # TTFA: request received -> first audio byte written
            summary["ttfa_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)

    def _input_error(self, exc: TTSInputError) -> web.Response:
        param = _ENGINE_FIELDS.get(exc.field, exc.field)
        message = str(exc).replace("text ", "input ", 1) if exc.field == "text" else str(exc)
        if isinstance(exc, TextTooLongError):
            return openai_error(message, param, 413, "input_too_long")
        return openai_error(message, param, 400)

    def _count(self, response: web.StreamResponse) -> Any:
        self.server.requests_total.labels("openai_speech", str(response.status)).inc()
        return response
