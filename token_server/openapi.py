"""The token server's OpenAPI 3.0 document, written by hand as data: `GET /openapi.json` serves `document()`.

Contract: `ROUTES` holds one dict per route (path -> {method -> operation}); tests/token_server/test_openapi.py
fails while the app's routes and this document disagree. The document states what the server enforces, so a fuzzer
(schemathesis, scripts/fuzz_http.py) can hold the server to it: every answer is a documented status, and every
error is the one JSON shape `{"error", "field"}` (429 adds `retry_after_s`). Patterns are ECMA-262 (anchored,
`$` = end of string); the server applies the same rules to the whole string (`config.is_valid_name`).
"""

from __future__ import annotations

import copy
from typing import Any

ERROR = "#/components/schemas/Error"
NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$", "nullable": True,
        "description": "1-64 characters of A-Z a-z 0-9 _ - (the whole string); generated when omitted or null"}
ORIGIN = {"name": "Origin", "in": "header", "required": False, "schema": {"type": "string"},
          "description": "a cross-origin caller must be this server or listed in ALLOWED_ORIGINS, else 403"}
FILES = ["text/html", "text/javascript", "text/css", "image/svg+xml", "image/png", "image/x-icon", "application/json"]


def _error(description: str, **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": {"$ref": ERROR}}}}
    response.update(extra)
    return response


def _file(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {kind: {"schema": {"type": "string", "format": "binary"}} for kind in FILES}}


FORBIDDEN = _error("Origin is neither this server nor in ALLOWED_ORIGINS")
NOT_FOUND = _error("no such file or endpoint")
PREFLIGHT = {
    "summary": "CORS preflight", "parameters": [ORIGIN],
    "responses": {"204": {"description": "allowed (Access-Control-Allow-* headers)"}, "403": FORBIDDEN},
}

DISPLAY_NAME = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": r"\S", "nullable": True,
                "description": "display name: 1-128 printable characters; defaults to the identity"}
#: a RoomConfiguration / RoomAgentDispatch field a caller may not set: only its proto3 default (= unset) passes
UNSET = {"nullable": True, "enum": ["", 0, False, [], {}, None],
         "description": "refused (400 naming it) unless at its proto3 default, which means unset"}
ROOM_CONFIG = {
    "type": "object", "nullable": True, "additionalProperties": False,
    "description": "LiveKit RoomConfiguration; only `agents` naming this server's AGENT_NAME is accepted: the "
                   "token always dispatches that agent and nothing else",
    "properties": {
        "agents": {"type": "array", "maxItems": 1, "nullable": True, "items": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "agent_name": {"type": "string", "nullable": True,
                               "description": "AGENT_NAME (see GET /api/config) or empty; any other name is a 400"},
                **{key: UNSET for key in ("metadata", "restart_policy", "deployment", "attributes")},
            },
        }},
        **{key: UNSET for key in ("name", "empty_timeout", "departure_timeout", "max_participants", "metadata",
                                  "egress", "min_playout_delay", "max_playout_delay", "sync_streams", "tags")},
    },
}
TOKEN = {"type": "object", "additionalProperties": False,
         "required": ["server_url", "participant_token", "token", "url", "room", "identity", "expires_at"],
         "properties": {"server_url": {"type": "string"}, "participant_token": {"type": "string"},
                        "token": {"type": "string"}, "url": {"type": "string"},
                        "room": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                        "identity": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                        "expires_at": {"type": "integer"}}}

ROUTES: dict[str, dict[str, Any]] = {
    "/api/token": {
        "post": {
            "summary": "mint a LiveKit access token that dispatches the agent into the room",
            "description": "LiveKit's standard token endpoint (room_name, participant_* and room_config; answered "
                           "201) or this server's first names (room, identity, name; answered 200), never both in "
                           "one body. Either answer carries both name sets.",
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "room_name": NAME, "participant_identity": NAME, "participant_name": DISPLAY_NAME,
                    "participant_metadata": {"type": "string", "maxLength": 1024, "nullable": True,
                                             "description": "at most 1024 characters of UTF-8 text, no NUL"},
                    "participant_attributes": {
                        "type": "object", "nullable": True, "maxProperties": 16,
                        "additionalProperties": {"type": "string", "maxLength": 256},
                        "description": "at most 16; keys 1-64 printable characters, not starting with `lk.` "
                                       "(LiveKit's own); values at most 256 characters"},
                    "room_config": ROOM_CONFIG,
                    "room": NAME, "identity": NAME, "name": DISPLAY_NAME,
                },
            }}}},
            "responses": {
                "200": {"description": "token (first names)", "content": {"application/json": {"schema": TOKEN}}},
                "201": {"description": "token (LiveKit's standard request)",
                        "content": {"application/json": {"schema": TOKEN}}},
                "400": _error("a field the server refuses; `field` names it, `error` the value and what is allowed"),
                "403": FORBIDDEN,
                "413": _error("body over 16 KiB"),
                "415": _error("Content-Type is not application/json"),
                "429": _error("over TOKEN_RATE_LIMIT_PER_MIN for this client",
                              headers={"Retry-After": {"schema": {"type": "string"}}}),
                "500": _error("a server fault (never a client mistake)"),
            },
        },
        "options": PREFLIGHT,
    },
    "/api/config": {
        "get": {
            "summary": "what the page needs before joining",
            "parameters": [ORIGIN],
            "responses": {
                "200": {"description": "config", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["url", "agent_name", "vad_silence_ms", "token_ttl_s", "dev"],
                }}}},
                "403": FORBIDDEN,
            },
        },
        "options": PREFLIGHT,
    },
    "/api/livekit/webhook": {
        "post": {
            "summary": "LiveKit's webhooks for the agent guard (a room whose agent left or never came gets one again)",
            "parameters": [{"name": "Authorization", "in": "header", "required": False, "schema": {"type": "string"},
                            "description": "a JWT signed with the API key pair; its sha256 claim hashes the body"}],
            "requestBody": {"required": False, "content": {"application/webhook+json": {"schema": {"type": "object"}}}},
            "responses": {
                "200": {"description": "taken", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["status"]}}}},
                "401": _error("not signed with this server's LiveKit key pair, or the body does not match its hash"),
                "403": FORBIDDEN,
                "413": _error("body over 16 KiB"),
            },
        },
    },
    "/healthz": {"get": {"summary": "liveness", "responses": {"200": {"description": "ok", "content": {
        "application/json": {"schema": {"type": "object", "required": ["status", "livekit_client"]}}}}}}},
    "/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI 3.0",
                                                                                "content": {"application/json": {
                                                                                    "schema": {"type": "object"}}}}}}},
    "/vendor/{name}": {"get": {
        "summary": "the pinned livekit-client build",
        "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _file("a vendor file"), "404": NOT_FOUND},
    }},
    "/": {"get": {"summary": "the call page", "responses": {"200": _file("index.html"), "404": NOT_FOUND}}},
    "/{path}": {"get": {
        "summary": "files of web/ (nothing hidden, no node_modules, tests or manifests, known types only)",
        "parameters": [{"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _file("a page file"), "404": NOT_FOUND},
    }},
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "token_server", "version": "1",
                 "description": "Every client mistake is a 4xx with {\"error\", \"field\"}; see docs/token_server.md."},
        "paths": copy.deepcopy(ROUTES),
        "components": {"schemas": {"Error": {
            "type": "object", "required": ["error", "field"],
            "properties": {"error": {"type": "string", "minLength": 1}, "field": {"type": "string"},
                           "retry_after_s": {"type": "integer", "minimum": 1}},
        }}},
    }
