"""`POST /v1/audio/speech`: the OpenAI speech API over the engine, for the `openai` SDK, LiveKit's OpenAI TTS plugin
(with `base_url`) and chat front ends.

Request (JSON): `model` (required string; any name is served by the one loaded checkpoint, as the OpenAI-compatible
servers of this ecosystem do), `input` (required; any length up to TTS_DEEP_STREAM_MAX_TEXT_CHARS, past it 413; the
engine cuts long text at sentence boundaries and speaks it as one stream; no letter or digit at all is a 400),
`voice` (required; one of the checkpoint's speakers, e.g. "serena"), `response_format` (mp3 default, opus, aac, flac,
wav, pcm = raw s16le 24 kHz mono), `speed` (only 1.0: the model has no speed control and no time-stretch is applied;
anything else is a 400 naming it), `instructions` (checkpoints that take an instruction, the 1.7B; a non-empty one on
others is a 400), `stream_format` (`audio`: the encoded audio as a chunked body; `sse`: `speech.audio.delta` events
with base64 audio, then `speech.audio.done`), and the extensions `language` (default auto; the engine's languages)
and `stream` (vLLM-Omni's name). Unknown fields are refused too, so a typo does not pass silently.

Streamed or whole (`delivery`): an explicit `stream_format` streams in that wire format; else `stream: true` streams
SSE and `stream: false` answers the whole file (vLLM-Omni's rules); with neither, every format streams as audio except
`wav`, which answers the whole file: a WAV header holds the total length, which a stream cannot know when it starts
(a streamed WAV carries the open-ended sizes 0xFFFFFFFF that players accept, but `wave` and most tools read as 24 h).
A whole file has Content-Length and exact header sizes.

Audio is written as the engine produces it (the first packet one frame after admission), so streaming has the same
first-audio time as `/tts/stream`; the headers go out with the first packet, so input the engine refuses at admission
is still a 4xx. Errors use OpenAI's shape: {"error": {"message", "type", "param", "code"}}; `param` names the field,
the message the value and the allowed values. 429 + Retry-After past the client's share, 503 + Retry-After when the
engine is busy. A client that leaves mid-stream cancels its engine stream; one that takes nothing for the idle
timeout is cut. Requests are counted and summarised like the native routes (`GET /v1/requests/{id}`,
`x-request-id`).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

from aiohttp import web

from common.audio_format import SAMPLE_RATE
from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError
from tts_engine.server.errors import (
    RETRY_AFTER_S,
    ClientError,
    check_encodable,
    check_speakable,
    openai_error,
    parse_json_body,
    read_body,
)
from tts_engine.server.routes.encode import FORMATS, AudioEncoder
from tts_engine.server.stream import file_response, stream_response

log = logging.getLogger("tts_engine.server.routes.openai_speech")

PATH = "/v1/audio/speech"
LABEL = "openai_speech"  # the endpoint label of tts_http_requests
FIELDS = ("model", "input", "voice", "response_format", "speed", "instructions", "stream_format", "stream",
          "language")
STREAM_FORMATS = ("audio", "sse")
#: engine field -> OpenAI field, for errors the engine raises
_ENGINE_FIELDS = {"text": "input", "speaker": "voice", "instruct": "instructions"}


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


def _audio_delta(audio: bytes) -> bytes:
    """`stream_format` sse: one chunk of encoded audio as a `speech.audio.delta` event (base64)."""
    return _sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode("ascii")})


def _or_default(value: Any, default: str | None) -> Any:
    """null and "" mean the default; any other value is checked as given (0 or false is not a format)."""
    return default if value is None or value == "" else value


class SpeechError(Exception):
    def __init__(self, message: str, param: str | None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def delivery(response_format: str, stream_format: str | None, stream: bool | None) -> str:
    """How the audio goes out: "audio" (chunked bytes), "sse" (events) or "file" (the whole file at once)."""
    if stream_format is not None:
        return stream_format
    if stream is not None:
        return "sse" if stream else "file"
    return "file" if response_format == "wav" else "audio"


class OpenAISpeech:
    def __init__(self, server: Any) -> None:
        self.server = server  # tts_engine.server.TTSServer: engine, summaries, counters
        self.engine = server.engine

    def register(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.speech)

    # ---- parsing ------------------------------------------------------------------------------
    async def parse(self, request: web.Request) -> dict[str, Any]:
        try:  # the native routes' body helpers (errors.py), answered in OpenAI's shape
            body = parse_json_body(await read_body(request))
        except ClientError as exc:
            raise SpeechError(str(exc), exc.field, exc.status) from None
        if not isinstance(body, dict):
            raise SpeechError(f"body must be a JSON object with fields {', '.join(FIELDS)}", "body")
        for key in body:
            if key not in FIELDS:
                raise SpeechError(f"unknown field {key!r}; allowed fields: {', '.join(FIELDS)}", key)
        for key in ("model", "input", "voice"):
            if key not in body:
                raise SpeechError(f"field {key!r} is required", key)
        for key, value in body.items():  # a lone surrogate ("\ud800") that no encoder accepts
            try:
                check_encodable(key, value)
            except ClientError as exc:
                raise SpeechError(str(exc), exc.field) from None
        model = body["model"]
        if not isinstance(model, str) or not model.strip():
            raise SpeechError(f"model={model!r} is not allowed; give a model name (a non-empty string)", "model")
        if not isinstance(body["input"], str):
            raise SpeechError(f"input must be a string, got {type(body['input']).__name__}", "input")
        try:
            check_speakable("input", body["input"])
        except ClientError as exc:
            raise SpeechError(str(exc), exc.field) from None
        voice = body["voice"]
        voices = self.engine.speakers
        if not isinstance(voice, str) or voice.strip().lower() not in voices:
            raise SpeechError(f"voice={voice!r} is not allowed; allowed values: {', '.join(sorted(voices))}", "voice")
        fmt = _or_default(body.get("response_format"), "mp3")
        if not isinstance(fmt, str) or fmt not in FORMATS:  # a list or object is not a format (nor hashable)
            raise SpeechError(
                f"response_format={fmt!r} is not allowed; allowed values: {', '.join(FORMATS)}", "response_format"
            )
        stream_format = _or_default(body.get("stream_format"), None)  # null and "" mean: not given
        if stream_format is not None and (not isinstance(stream_format, str) or stream_format not in STREAM_FORMATS):
            raise SpeechError(
                f"stream_format={stream_format!r} is not allowed; allowed values: {', '.join(STREAM_FORMATS)}",
                "stream_format",
            )
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise SpeechError(f"stream={stream!r} is not allowed; allowed values: true, false", "stream")
        speed = body.get("speed", 1.0)
        if speed is None:
            speed = 1.0
        if isinstance(speed, bool) or not isinstance(speed, int | float) or float(speed) != 1.0:
            raise SpeechError(f"speed={speed!r} is not supported by this server; allowed values: 1.0", "speed")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise SpeechError(f"instructions must be a string, got {type(instructions).__name__}", "instructions")
        if instructions and instructions.strip() and not self.engine.model.config.supports_instruct:
            raise SpeechError(
                "instructions are not supported by the loaded checkpoint (only the 1.7B CustomVoice "
                "takes them); leave instructions out",
                "instructions",
            )
        language = _or_default(body.get("language"), "auto")  # the engine refuses a non-string
        return {
            "input": body["input"],
            "voice": voice.strip().lower(),
            "format": fmt,
            "delivery": delivery(fmt, stream_format, stream),
            "instructions": instructions.strip() if instructions and instructions.strip() else None,
            "language": language,
            "model": model,
        }

    # ---- handler ------------------------------------------------------------------------------
    async def speech(self, request: web.Request) -> web.StreamResponse:
        t_received = time.perf_counter()
        server = self.server
        request_id = server.request_id(request)
        try:
            params = await self.parse(request)
        except SpeechError as exc:
            return self._count(openai_error(str(exc), exc.param, exc.status))
        over_share = server.claim(request)
        if over_share is not None:
            return self._count(over_share)
        try:
            try:
                handle = self.engine.stream(params["input"], params["voice"], params["language"],
                                            instruct=params["instructions"], request_id=request_id)
            except TTSInputError as exc:
                return self._count(self._input_error(exc))
            except EngineBusyError as exc:
                return self._count(openai_error(str(exc), None, 503, "busy", {"Retry-After": str(RETRY_AFTER_S)}))
            return await self._respond(request, handle, params, request_id, t_received)
        finally:
            server.release(request)

    async def _respond(self, request: web.Request, handle: Any, params: dict[str, Any], request_id: str,
                       t_received: float) -> web.StreamResponse:
        how = params["delivery"]
        headers = {
            "content-type": "text/event-stream" if how == "sse" else FORMATS[params["format"]][2],
            "x-request-id": request_id,
            "x-sample-rate": str(SAMPLE_RATE),
            "cache-control": "no-cache",
        }
        summary = {"request_id": request_id, "endpoint": PATH, "bytes_sent": 0, "response_format": params["format"],
                   "delivery": how}
        common: dict[str, Any] = dict(label=LABEL, t_received=t_received, headers=headers, summary=summary,
                                      refuse=self._input_error, fail=lambda message: openai_error(message, None, 500))
        if how == "file":
            def encode(pcms: list[Any]) -> bytes:
                encoder = AudioEncoder(params["format"], whole=True)
                try:
                    return b"".join([*(encoder.push(pcm) for pcm in pcms), encoder.finish()])
                finally:
                    encoder.close()

            return await file_response(self.server, request, handle, encode=encode, **common)

        def done_event() -> bytes:
            usage = {"input_tokens": len(params["input"]), "output_tokens": handle.metrics.frames}
            usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
            return _sse({"type": "speech.audio.done", "usage": usage})

        try:
            encoder = AudioEncoder(params["format"])
        except BaseException:
            handle.cancel()
            raise
        sse = how == "sse"
        return await stream_response(self.server, request, handle, encoder=encoder,
                                     frame=_audio_delta if sse else None, trailer=done_event if sse else None,
                                     **common)

    def _input_error(self, exc: TTSInputError) -> web.Response:
        param = _ENGINE_FIELDS.get(exc.field, exc.field)
        message = str(exc).replace("text ", "input ", 1) if exc.field == "text" else str(exc)
        if isinstance(exc, TextTooLongError):
            return openai_error(message, param, 413, "input_too_long")
        return openai_error(message, param, 400)

    def _count(self, response: web.StreamResponse) -> Any:
        return self.server.count(LABEL, response)
