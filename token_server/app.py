"""The token server's aiohttp application: token API, page config, health check, static page, CORS.

Routes:
- `POST /api/token`: LiveKit's standard token request {"room_name"?, "participant_identity"?,
  "participant_name"?, "participant_metadata"?, "participant_attributes"?, "room_config"?} -> 201, or this
  server's first names {"room"?, "identity"?, "name"?} (or an empty body) -> 200; either answer carries both
  name sets: {"server_url", "participant_token", "token", "url", "room", "identity", "expires_at"} (unix
  seconds). The agent dispatched is always AGENT_NAME (token_server/tokens.py). Client mistakes ->
  400/403/413/415 {"error", "field"}; over the per-client limit -> 429 with Retry-After; any other method -> 405.
- `GET /api/config` -> what the page needs before joining: LiveKit URL, agent name, the agent's VAD hangover.
- `GET /healthz` -> {"status": "ok", "livekit_client": bool}.
- `POST /api/livekit/webhook` -> LiveKit's webhooks for the agent guard (agent_guard.py: a room whose agent
  left or never came gets one dispatched again); 401 unless signed with this server's key pair.
- `GET /openapi.json` -> the OpenAPI document of all of this (openapi.py, one dict per route).
- `GET /vendor/<file>` -> the pinned livekit-client build; `GET /<path>` -> files of web/ (see static.py).

CORS: a request whose Origin is neither this server nor listed in ALLOWED_ORIGINS gets 403 on /api/*; listed
origins get Access-Control-Allow-Origin. The API secret is only ever handed to `livekit-api` for signing:
it is in no response, no log line and no page. A failing handler answers 500 JSON and the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from common import jsonbody
from token_server import agent_guard
from token_server.config import ServerConfig
from token_server.ratelimit import RateLimiter
from token_server.static import (
    PAGE_CACHE,
    VENDOR_CACHE,
    file_response,
    resolve_page_file,
    resolve_vendor_file,
    vendor_installed,
)
from token_server.tokens import RequestError, mint_token, parse_token_request

log = logging.getLogger("token_server")

MAX_BODY_BYTES = 16 * 1024
CONFIG_KEY = web.AppKey("config", ServerConfig)
LIMITER_KEY = web.AppKey("limiter", RateLimiter)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    config: ServerConfig, *, limiter: RateLimiter | None = None, guard: agent_guard.GuardConfig | None = None
) -> web.Application:
    app = web.Application(middlewares=[_errors_as_json, _cors_guard], client_max_size=MAX_BODY_BYTES)
    app[CONFIG_KEY] = config
    app[LIMITER_KEY] = limiter or RateLimiter(config.rate_limit_per_min, 60.0)
    app.router.add_post("/api/token", handle_token)
    app.router.add_get("/api/config", handle_config)
    app.router.add_route("OPTIONS", "/api/{name:token|config}", handle_preflight)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/openapi.json", handle_openapi)
    app.router.add_get("/vendor/{name}", handle_vendor)
    agent_guard.install(app, config, guard)  # before the page route, which would take any path
    # the page route leaves /api/ alone, so a wrong method there is a 405 and an unknown endpoint a 404
    app.router.add_get(r"/{path:(?!api/).*}", handle_page)
    app.on_response_prepare.append(_add_headers)
    return app


def json_error(status: int, message: str, field: str, **extra: object) -> web.Response:
    return web.json_response({"error": message, "field": field, **extra}, status=status)


async def handle_token(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    client = request.remote or "unknown"
    retry_after = request.app[LIMITER_KEY].check(client)
    if retry_after:
        seconds = max(1, math.ceil(retry_after))
        log.warning("rate limit: client %s over %d token requests/min", client, config.rate_limit_per_min)
        response = json_error(
            429,
            f"too many token requests: the limit is {config.rate_limit_per_min} per minute; retry in {seconds} s",
            "rate_limit",
            retry_after_s=seconds,
        )
        response.headers["Retry-After"] = str(seconds)
        return response
    if request.content_type != "application/json":
        return json_error(
            415,
            f"Content-Type {request.content_type!r} is not supported; send application/json",
            "Content-Type",
        )
    raw = await request.read()
    try:
        body = jsonbody.loads(raw.decode("utf-8")) if raw else {}  # an empty body means {}; whitespace is not JSON
    except UnicodeDecodeError:
        return json_error(400, "body is not UTF-8 text", "body")
    except json.JSONDecodeError as exc:
        return json_error(400, f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "body")
    except ValueError as exc:  # nested past jsonbody.MAX_DEPTH, a number with more digits than Python converts
        return json_error(400, f"body is not valid JSON: {exc}", "body")
    try:
        token_request = parse_token_request(body, agent_name=config.agent_name)
        minted = mint_token(config, token_request)
    except RequestError as exc:
        return json_error(exc.status, str(exc), exc.field)
    log.info(
        "token issued: room=%s identity=%s client=%s ttl=%ds agent=%s",
        minted.room,
        minted.identity,
        client,
        config.token_ttl_s,
        config.agent_name,
    )
    response = web.json_response(
        {
            "server_url": config.livekit_url,  # LiveKit's standard names
            "participant_token": minted.token,
            "token": minted.token,  # this server's first names
            "url": config.livekit_url,
            "room": minted.room,
            "identity": minted.identity,
            "expires_at": minted.expires_at,
        },
        status=201 if token_request.standard else 200,
    )
    response.headers["Cache-Control"] = "no-store"
    return response


async def handle_config(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    response = web.json_response(
        {
            "url": config.livekit_url,
            "agent_name": config.agent_name,
            "vad_silence_ms": config.vad_silence_ms,
            "token_ttl_s": config.token_ttl_s,
            "dev": config.dev,
        }
    )
    response.headers["Cache-Control"] = "no-store"
    return response


async def handle_preflight(request: web.Request) -> web.Response:
    # _cors_guard has already refused unknown origins; here only the allowed ones remain
    methods = {"token": "POST, OPTIONS", "config": "GET, OPTIONS"}[request.match_info["name"]]
    response = web.Response(status=204)
    response.headers["Access-Control-Allow-Methods"] = methods
    response.headers["Access-Control-Allow-Headers"] = "Content-Type"
    response.headers["Access-Control-Max-Age"] = "600"
    return response


async def handle_health(request: web.Request) -> web.Response:
    installed = vendor_installed(request.app[CONFIG_KEY].web_dir)
    return web.json_response({"status": "ok", "livekit_client": installed})


async def handle_openapi(request: web.Request) -> web.Response:
    from token_server.openapi import document

    return web.json_response(document())


async def handle_vendor(request: web.Request) -> web.StreamResponse:
    path = resolve_vendor_file(request.app[CONFIG_KEY].web_dir, request.match_info["name"])
    if path is None:
        raise web.HTTPNotFound(text="not found (is livekit-client installed? run scripts/setup.sh)\n")
    return file_response(path, VENDOR_CACHE)


async def handle_page(request: web.Request) -> web.StreamResponse:
    path = resolve_page_file(request.app[CONFIG_KEY].web_dir, request.match_info["path"])
    if path is None:
        raise web.HTTPNotFound(text="not found\n")
    return file_response(path, PAGE_CACHE)


def _origin_allowed(request: web.Request, origin: str) -> bool:
    if urlsplit(origin).netloc == request.host:  # same origin (scheme may differ behind a TLS proxy)
        return True
    return origin.lower() in request.app[CONFIG_KEY].allowed_origins


@web.middleware
async def _cors_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    origin = request.headers.get("Origin")
    if origin and request.path.startswith("/api/") and not _origin_allowed(request, origin):
        log.warning("refused %s %s from origin %s (not in ALLOWED_ORIGINS)", request.method, request.path, origin)
        return json_error(403, f"origin {origin!r} is not allowed (ALLOWED_ORIGINS)", "Origin")
    return await handler(request)


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        response = json_error(
            405, f"method {request.method} is not allowed on {request.path}; allowed: {allowed}", "method"
        )
        response.headers["Allow"] = allowed
        return response
    except web.HTTPRequestEntityTooLarge:
        return json_error(413, f"body is larger than {MAX_BODY_BYTES} bytes", "body")
    except web.HTTPNotFound:
        if request.path.startswith("/api/"):
            return json_error(404, f"no API endpoint {request.path}", "path")
        return json_error(404, f"not found: {request.path}", "path")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return json_error(exc.status, exc.text or exc.reason, "request")
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal error (see the server log)", "server")


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    origin = request.headers.get("Origin")
    if origin and request.path.startswith("/api/") and _origin_allowed(request, origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    if response.content_type == "text/html":
        response.headers.setdefault("Content-Security-Policy", _page_csp(request.app[CONFIG_KEY]))


def _page_csp(config: ServerConfig) -> str:
    # the page talks to this server and to LiveKit (WebSocket, plus HTTP for its connection check)
    netloc = urlsplit(config.livekit_url).netloc
    livekit = f"ws://{netloc} wss://{netloc} http://{netloc} https://{netloc}"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"media-src 'self' blob: mediastream:; connect-src 'self' {livekit}; object-src 'none'; base-uri 'none'"
    )
