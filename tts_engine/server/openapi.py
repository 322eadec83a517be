"""The TTS server's OpenAPI 3.0 document, written by hand as data: `GET /openapi.json` serves `document(engine)`.

Contract: `ROUTES` holds one dict per route (path -> {method -> operation}); a route added to server.py adds its dict
here, and tests/server/test_fuzz_http.py fails while the app and this document disagree. The document states
what the server enforces, no more and no less, so a fuzzer (schemathesis) can hold the server to it: schema-valid
requests are served, schema-invalid ones are answered 4xx with the route's error shape (`{"error", "field"}`, or
OpenAI's on the OpenAI routes). `document(...)` fills in what depends on the loaded checkpoint and config (speakers,
languages, text limit, and with an API key the bearer scheme and a 401 on every route but /healthz).
"""

from __future__ import annotations

import copy
from typing import Any

from tts_engine.server.errors import OPENAI_PATHS

ERROR = "#/components/schemas/Error"
OPENAI_ERROR = "#/components/schemas/OpenAIError"
#: text with at least one letter or digit (Python's str.isalnum, as server_errors.check_speakable): blank text, or
#: only punctuation, symbols or emoji, is a 400
SPEAKABLE = r"[^\W_]"
RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}}}


def _error(description: str, **headers: Any) -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": ERROR}}}
    response: dict[str, Any] = {"description": description, "content": content}
    if headers:
        response["headers"] = headers
    return response


def _openai_error(description: str, **headers: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": {"$ref": OPENAI_ERROR}}}}
    if headers:
        response["headers"] = headers
    return response


def _int(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi, "nullable": True}


REQUEST_ID_HEADER = {
    "name": "x-request-id", "in": "header", "required": False, "schema": {"type": "string"},
    "description": "kept when it is 1-64 characters of A-Z a-z 0-9 _ . : - (whole string), else replaced",
}
SPEECH_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["text", "speaker"],
    "properties": {
        # maxLength and the enums are filled in by document(); \S: at least one non-space character
        "text": {"type": "string", "minLength": 1, "pattern": SPEAKABLE},
        "speaker": {"type": "string", "description": "case-insensitive"},
        "language": {"type": "string", "nullable": True, "description": "case-insensitive; null = auto"},
        "packet_frames": _int(1, 64),
        "first_packet_frames": _int(1, 64),
        "seed": _int(0, 2**62 - 1),
        "max_frames": _int(1, 2048),
        "instruct": {"type": "string", "nullable": True},
    },
}
BAD_REQUEST = {
    "400": _error("a field the server refuses; `field` names it, `error` says the value and what is allowed"),
    "413": _error("body over 1 MiB, or text over TTS_DEEP_STREAM_MAX_TEXT_CHARS"),
    "429": _error("this client already holds its share of the streams (TTS_CLIENT_MAX_STREAMS)", **RETRY_AFTER),
    "503": _error("every stream slot is busy", **RETRY_AFTER),
    "500": _error("an engine fault (never a client mistake)"),
}


def _speech_operation(summary: str, ok: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": [REQUEST_ID_HEADER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": SPEECH_REQUEST}}},
        "responses": {"200": ok, **BAD_REQUEST},
    }


ROUTES: dict[str, dict[str, Any]] = {
    "/tts/stream": {"post": _speech_operation(
        "stream raw PCM (s16le, 24 kHz, mono) packet by packet",
        {"description": "chunked PCM", "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                          "format": "binary"}}}},
    )},
    "/synthesize": {"post": _speech_operation(
        "the whole utterance as a WAV file",
        {"description": "24 kHz mono 16-bit WAV", "content": {"audio/wav": {"schema": {"type": "string",
                                                                                      "format": "binary"}}}},
    )},
    "/v1/speakers": {"get": {
        "summary": "speakers and languages of the loaded checkpoint",
        "responses": {"200": {"description": "lists", "content": {"application/json": {"schema": {
            "type": "object", "required": ["speakers", "languages"],
            "properties": {"speakers": {"type": "array", "items": {"type": "string"}},
                           "languages": {"type": "array", "items": {"type": "string"}}},
        }}}}},
    }},
    "/v1/requests/{request_id}": {"get": {
        "summary": "the summary of a finished request (the last 2,048 are kept)",
        "parameters": [{"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {
            "200": {"description": "summary", "content": {"application/json": {"schema": {
                "type": "object", "required": ["request_id", "endpoint", "status"]}}}},
            "404": _error("no finished request with this id"),
        },
    }},
    "/healthz": {"get": {
        "summary": "liveness and load",
        "responses": {code: {"description": text, "content": {"application/json": {"schema": {
            "type": "object", "required": ["status", "open_streams", "capacity", "device", "loop_stalls"],
            "properties": {"status": {"type": "string", "enum": ["ok", "unhealthy"]},
                           "open_streams": {"type": "integer", "minimum": 0},
                           "capacity": {"type": "integer", "minimum": 0}, "device": {"type": "string"},
                           "loop_stalls": {"type": "array", "maxItems": 20, "items": {
                               "type": "object", "required": ["loop", "seconds", "ended", "cause"],
                               "properties": {"loop": {"type": "string"}, "seconds": {"type": "number"},
                                              "ended": {"type": "number"},
                                              "cause": {"type": "string",
                                                        "enum": ["busy", "waiting", "process_stopped"]}}}}},
        }}}} for code, text in (("200", "healthy"), ("503", "the engine worker is not running"))},
    }},
    "/metrics": {"get": {
        "summary": "Prometheus text format",
        "responses": {"200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}},
    }},
    "/v1/audio/speech": {"post": {
        "summary": "OpenAI-compatible speech (routes/openai_speech.py); errors in OpenAI's shape",
        "parameters": [REQUEST_ID_HEADER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False, "required": ["model", "input", "voice"],
            "properties": {
                "model": {"type": "string", "minLength": 1, "pattern": r"\S"},
                "input": {"type": "string", "minLength": 1, "pattern": SPEAKABLE},  # maxLength filled in
                "voice": {"type": "string", "description": "a speaker, case-insensitive"},  # enum filled in
                # "" and null mean the default, as the route reads them
                "response_format": {"type": "string", "nullable": True,
                                    "enum": ["mp3", "opus", "aac", "flac", "wav", "pcm", "", None]},
                "stream_format": {"type": "string", "nullable": True, "enum": ["audio", "sse", "", None]},
                "stream": {"type": "boolean", "nullable": True,
                           "description": "vLLM-Omni's switch: false = the whole file; absent = stream (wav: file)"},
                "speed": {"type": "number", "minimum": 1.0, "maximum": 1.0, "nullable": True},
                "instructions": {"type": "string", "nullable": True},  # whitespace only on a 0.6B: filled in
                "language": {"type": "string", "nullable": True},  # enum filled in
            },
        }}}},
        "responses": {
            "200": {"description": "audio as it is made", "content": {
                **{kind: {"schema": {"type": "string", "format": "binary"}}
                   for kind in ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm")},
                # stream_format "sse": each event's data is a JSON speech.audio.delta / speech.audio.done
                "text/event-stream": {"schema": {"type": "object", "required": ["data"],
                                                 "properties": {"data": {"type": "string"}}}},
            }},
            **{code: _openai_error(text) for code, text in (
                ("400", "a refused field (`param`)"), ("413", "body over 1 MiB or input too long"),
                ("500", "an engine fault"))},
            "429": _openai_error("this client already holds its share of the streams", **RETRY_AFTER),
            "503": _openai_error("every stream slot is busy", **RETRY_AFTER),
        },
    }},
    "/v1/models": {"get": {
        "summary": "OpenAI's model list: the loaded checkpoint (routes/discovery.py)",
        "responses": {"200": {"description": "list", "content": {"application/json": {"schema": {
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": {
                "type": "object", "required": ["id", "object", "created", "owned_by"],
                "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["model"]},
                               "created": {"type": "integer"}, "owned_by": {"type": "string"}}}}},
        }}}}},
    }},
    "/v1/audio/voices": {"get": {
        "summary": "vLLM-Omni's voice list: the checkpoint's speakers (routes/discovery.py)",
        "responses": {"200": {"description": "lists", "content": {"application/json": {"schema": {
            "type": "object", "required": ["voices", "uploaded_voices"],
            "properties": {"voices": {"type": "array", "items": {"type": "string"}},
                           "uploaded_voices": {"type": "array", "maxItems": 0}},
        }}}}},
    }},
    "/tts/ws": {"get": {
        "summary": "WebSocket: text in as it is produced, PCM out as it is made (routes/ws.py)",
        "responses": {"101": {"description": "switched to the WebSocket protocol of routes/ws.py"},
                      "400": _error("not a WebSocket upgrade request")},  # 429 and 503 come as `error` events
    }},
    "/openapi.json": {"get": {
        "summary": "this document",
        "responses": {"200": {"description": "OpenAPI 3.0", "content": {"application/json": {"schema": {
            "type": "object"}}}}},
    }},
}


def _properties(paths: dict[str, Any], path: str) -> dict[str, Any]:
    return paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]


def document(*, speakers: list[str], languages: list[str], max_text_chars: int,
             supports_instruct: bool = True, api_key: bool = False) -> dict[str, Any]:
    paths = copy.deepcopy(ROUTES)
    for path in ("/tts/stream", "/synthesize"):
        props = _properties(paths, path)
        props["text"]["maxLength"] = max_text_chars
        props["speaker"]["enum"] = list(speakers)
        props["language"]["enum"] = [*languages, None]
    if "/v1/audio/speech" in paths:
        props = _properties(paths, "/v1/audio/speech")
        props["input"]["maxLength"] = max_text_chars
        props["voice"]["enum"] = list(speakers)
        props["language"]["enum"] = [*languages, "", None]
        if not supports_instruct:
            props["instructions"]["pattern"] = r"^\s*$"
    extra: dict[str, Any] = {}
    if api_key:  # every route but /healthz needs the key (clients.py)
        extra["security"] = [{"bearer": []}]
        paths["/healthz"]["get"]["security"] = []
        for path, operations in paths.items():
            for operation in operations.values():
                if path != "/healthz":
                    shape = _openai_error if path in OPENAI_PATHS else _error
                    operation["responses"]["401"] = shape("no API key, or a wrong one", **{"WWW-Authenticate": {
                        "schema": {"type": "string"}}})
    schemas = {
        "OpenAIError": {
            "type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["message", "type", "param"],
                "properties": {"message": {"type": "string", "minLength": 1}, "type": {"type": "string"},
                               "param": {"type": "string", "nullable": True},
                               "code": {"type": "string", "nullable": True}}}},
        },
        "Error": {
            "type": "object", "required": ["error", "field"], "additionalProperties": False,
            "properties": {"error": {"type": "string", "minLength": 1},
                           "field": {"type": "string", "nullable": True}},
        },
    }
    components: dict[str, Any] = {"schemas": schemas}
    if api_key:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {
        "openapi": "3.0.3",
        **extra,
        "info": {"title": "tts_engine HTTP server", "version": "1",
                 "description": "Every client mistake is a 4xx with {\"error\", \"field\"} (OpenAI's shape on the "
                                "OpenAI routes); see docs/server.md."},
        "paths": paths,
        "components": components,
    }
