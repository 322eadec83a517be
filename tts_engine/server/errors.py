"""The error shapes of `python -m tts_engine serve`, and the request checks that produce them.

- The server's shape: `{"error": message, "field": name or null}` with the HTTP status; the message names the value
  and what is allowed. Client mistakes are 400 (413 past the body cap of 1 MiB or the per-request text cap, 404/405
  for an unknown path or method, naming the allowed methods in `Allow`); a missing or wrong API key is 401 +
  `WWW-Authenticate: Bearer`; a client over its share of the streams is 429 + `Retry-After`; all slots busy is 503 +
  `Retry-After`; an engine fault or a bug is 500 and never stands for a client mistake.
- OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, on the OpenAI-compatible routes (`OPENAI_PATHS`:
  routes/openai_speech.py, routes/discovery.py), for the same cases; those routes parse bodies with the same helpers.
- `errors_as_json` is the app's middleware: it turns `ClientError` and aiohttp's own HTTP errors into the server's
  shape, so no route answers with HTML or a bare status.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from common import jsonbody
from tts_engine.errors import TextTooLongError, TTSInputError

log = logging.getLogger("tts_engine.server")

RETRY_AFTER_S = 1
BODY_TOO_LARGE = "request body is larger than 1 MiB"
#: routes that answer in OpenAI's error shape (for the openai SDK and OpenAI-compatible clients)
OPENAI_PATHS = ("/v1/audio/speech", "/v1/models", "/v1/audio/voices")


class ClientError(Exception):
    """A client mistake: becomes `error_response(message, field, status)`."""

    def __init__(self, message: str, field: str | None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def error_response(
    message: str, field: str | None, status: int = 400, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response({"error": message, "field": field}, status=status, headers=headers)


def input_error(exc: TTSInputError) -> web.Response:
    """An input the engine refused: 413 past the per-request text cap, else 400."""
    return error_response(str(exc), exc.field, 413 if isinstance(exc, TextTooLongError) else 400)


def openai_error(
    message: str, param: str | None, status: int = 400, code: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    """OpenAI's error shape; `type` is invalid_request_error for a client's mistake, server_error for ours."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def busy_response(exc: Exception) -> web.Response:
    """All stream slots taken: 503, and `Retry-After` for the client's next try."""
    return error_response(str(exc), None, 503, headers={"Retry-After": str(RETRY_AFTER_S)})


def over_share_message(client: str, limit: int) -> str:
    return (f"client {client} already holds {limit} streams, its share of this server (TTS_CLIENT_MAX_STREAMS); "
            "retry when one of them has ended")


def over_share_response(path: str, client: str, limit: int) -> web.Response:
    """A client past its share of the streams: 429 + `Retry-After`, in the route's shape."""
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if path in OPENAI_PATHS:
        return openai_error(over_share_message(client, limit), None, 429, "rate_limit_exceeded", headers)
    return error_response(over_share_message(client, limit), None, 429, headers)


def unauthorized_response(path: str, message: str) -> web.Response:
    """No or a wrong API key: 401 + `WWW-Authenticate: Bearer`, in the route's shape."""
    headers = {"WWW-Authenticate": "Bearer"}
    if path in OPENAI_PATHS:
        return openai_error(message, None, 401, "invalid_api_key", headers)
    return error_response(message, "authorization", 401, headers)


async def read_body(request: web.Request) -> bytes:
    """The raw body, or ClientError(field "body", 413) past the app's 1 MiB cap."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ClientError(BODY_TOO_LARGE, "body", 413) from None


def parse_json_body(raw: bytes) -> Any:
    """The decoded JSON body (None when empty), or ClientError(field "body"): bad UTF-8 or JSON, nesting past
    jsonbody.MAX_DEPTH, a number with more digits than Python converts."""
    try:
        return jsonbody.loads(raw.decode("utf-8")) if raw else None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, jsonbody.TooDeep, int digit limit
        raise ClientError(f"body is not valid JSON: {exc}", "body") from None


def check_encodable(field: str, value: Any) -> None:
    """A string field must be valid Unicode: JSON can carry a lone UTF-16 surrogate ("\\ud800") that no encoder
    (the tokenizer included) accepts."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ClientError(
                f"{field} holds a lone UTF-16 surrogate {value[exc.start]!r} at index {exc.start}; send valid Unicode",
                field,
            ) from None


def check_speakable(field: str, text: object) -> None:
    """Text with something in it but no letter or digit (only punctuation, symbols or emoji) gives the model nothing
    to say: it would run to its frame cap. Refused with a 400 naming the field (blank text is the engine's 400)."""
    if isinstance(text, str) and text.strip() and not any(ch.isalnum() for ch in text):
        raise ClientError(
            f"{field} has nothing to speak: no letter or digit, only punctuation, symbols or emoji "
            f"({text[:40]!r}); send words or numbers", field)


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """One error shape for the whole server: aiohttp's own 404/405/413/400 become {"error", "field"} too."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        message = f"method {request.method} is not allowed on {request.path}; allowed: {allowed}"
        return error_response(message, "method", 405, headers={"Allow": allowed})
    except web.HTTPNotFound:
        return error_response(f"no endpoint {request.path!r}; the routes are in GET /openapi.json", "path", 404)
    except web.HTTPRequestEntityTooLarge:
        return error_response(BODY_TOO_LARGE, "body", 413)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(" ".join((exc.text or exc.reason).split()), None, exc.status)
    except ClientError as exc:
        return error_response(str(exc), exc.field, exc.status)
    except Exception:  # a bug, not the client's mistake: still the one JSON shape, and the server keeps serving
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response("internal error (see the server log)", None, 500)
