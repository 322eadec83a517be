"""HTTP server around one `Engine` (aiohttp): the app behind `python -m tts_engine serve` (cli.py).

Endpoints:
- `POST /tts/stream` JSON {text, speaker, language?, packet_frames?, first_packet_frames?, seed?, instruct?}
  -> 200 chunked raw PCM (s16le, 24 kHz, mono), headers `x-sample-rate`, `x-request-id`, `x-audio-format`.
  Each engine packet is written the moment it exists. The headers go out with the first packet, so any
  input problem the engine finds still becomes a 400. A summary (engine metrics + server TTFA = request
  received -> first byte written) is stored before the final chunk and served by `GET /v1/requests/{id}`.
- `POST /synthesize` same JSON -> `audio/wav` (the whole file, real sizes in its header).
- `GET /v1/speakers`, `GET /healthz` (with `loop_stalls`: the server loop's last stalls), `GET /metrics`
  (Prometheus text, own registry), `GET /openapi.json`.
- `POST /v1/audio/speech` (OpenAI-compatible, routes/openai_speech.py), `GET /v1/models` and `GET /v1/audio/voices`
  (routes/discovery.py), `GET /tts/ws` (text in, PCM out, routes/ws.py).
Errors (errors.py): client mistakes -> 400 {"error", "field"}; a missing or wrong API key -> 401; a client over
its share of the streams -> 429 + Retry-After; all slots busy -> 503 + Retry-After; an engine fault -> 500 {"error"}
(never for a client mistake). Text with no letter or digit (only punctuation, symbols or emoji) is a 400.
Bounds (config.py): the optional API key and per-client limits (clients.py); every stream is cut once
its client has taken nothing for the idle timeout (stream.py, routes/ws.py). A client that disconnects
mid-stream cancels its stream (handler cancellation is on, and a failed write also cancels); the engine keeps serving.

This module: `TTSServer` (route table, request -> engine stream) and `start_server`. The rest, by responsibility:
errors.py (error shapes, body checks, the error middleware), clients.py (API key, per-client limits),
stream.py (a stream's HTTP lifecycle, shared with /v1/audio/speech), summaries.py (GET /v1/requests/{id}),
metrics.py (what /metrics exposes), openapi.py (GET /openapi.json), config.py (configuration).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import socket
import time
import uuid
from collections import deque
from typing import Any

import numpy as np
from aiohttp import web

from common.audio_format import SAMPLE_RATE
from common.loop_watch import LoopProbe, Stall
from tts_engine.errors import EngineBusyError, TTSInputError
from tts_engine.runtime.wav import wav_bytes
from tts_engine.server.clients import CLIENT, Clients
from tts_engine.server.config import ServerConfig, listen_sockets
from tts_engine.server.errors import (
    ClientError,
    busy_response,
    check_encodable,
    check_speakable,
    error_response,
    errors_as_json,
    input_error,
    over_share_response,
    parse_json_body,
    read_body,
)
from tts_engine.server.metrics import CONTENT_TYPE, ServerMetrics
from tts_engine.server.openapi import document
from tts_engine.server.routes.discovery import Discovery
from tts_engine.server.routes.encode import AudioEncoder
from tts_engine.server.routes.openai_speech import OpenAISpeech
from tts_engine.server.routes.ws import TextWebSocket
from tts_engine.server.stream import file_response, stream_response
from tts_engine.server.summaries import Summaries

log = logging.getLogger("tts_engine.server")

REQUEST_FIELDS = (
    "text",
    "speaker",
    "language",
    "packet_frames",
    "first_packet_frames",
    "seed",
    "max_frames",
    "instruct",
)
_REQUEST_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # whole string only (fullmatch): `$` passes "id\n"


class TTSServer:
    def __init__(self, engine: Any, config: ServerConfig | None = None, *, summaries_max: int = 2048) -> None:
        self.engine = engine
        self.config = config or ServerConfig()
        self.started = int(time.time())
        self.prometheus = stats = ServerMetrics(engine)  # the routes write these instruments (metrics.py)
        self.registry = stats.registry
        self.requests_total = stats.requests_total
        self.disconnects = stats.disconnects
        self.in_flight = stats.in_flight
        self.summaries = Summaries(stats, summaries_max)
        self.clients = Clients(self.config.api_keys, self.config.client_limit(engine.capacity()))
        self.stalls: deque[Stall] = deque(maxlen=20)  # the loop's stalls, logged by its probe (common/loop_watch.py)
        self._probe: LoopProbe | None = None

    # ---- app ------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20, middlewares=[errors_as_json, self.clients.middleware])
        app.router.add_post("/tts/stream", self.tts_stream)
        app.router.add_post("/synthesize", self.synthesize)
        app.router.add_get("/v1/speakers", self.speakers)
        app.router.add_get("/v1/requests/{request_id}", self.request_summary)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/openapi.json", self.openapi)  # openapi.py: one dict per route
        OpenAISpeech(self).register(app)  # POST /v1/audio/speech (routes/openai_speech.py)
        Discovery(self).register(app)  # GET /v1/models, /v1/audio/voices (routes/discovery.py)
        TextWebSocket(self).register(app)  # GET /tts/ws: text in, PCM out (routes/ws.py)
        app.on_startup.append(self._watch_loop)
        app.on_cleanup.append(self._unwatch_loop)
        return app

    async def _watch_loop(self, app: web.Application) -> None:
        """A stall of the server's loop delays every stream's packets: it is logged with its cause, and /healthz
        counts the stalls seen."""
        self._probe = LoopProbe(asyncio.get_running_loop(), name="engine server", on_stall=self.stalls.append)
        self._probe.start()

    async def _unwatch_loop(self, app: web.Application) -> None:
        if self._probe is not None:
            self._probe.stop()

    # ---- shared by the routes -------------------------------------------------------------------
    def request_id(self, request: web.Request) -> str:
        given = request.headers.get("x-request-id", "")
        return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]

    def claim(self, request: web.Request) -> web.Response | None:
        """Count one stream against the request's client; the 429 to answer when it is over its share."""
        client = request[CLIENT]
        if self.clients.claim(client):
            return None
        return over_share_response(request.path, client, self.clients.limit)

    def release(self, request: web.Request) -> None:
        self.clients.release(request[CLIENT])

    def count(self, endpoint: str, response: web.StreamResponse) -> Any:
        self.requests_total.labels(endpoint, str(response.status)).inc()
        return response

    # ---- request parsing ------------------------------------------------------------------------
    async def _parse(self, request: web.Request) -> dict[str, Any]:
        body = parse_json_body(await read_body(request))
        if not isinstance(body, dict):
            raise ClientError(
                f"body must be a JSON object with fields {', '.join(REQUEST_FIELDS)}; got {type(body).__name__}",
                "body",
            )
        for key in body:
            if key not in REQUEST_FIELDS:
                raise ClientError(f"unknown field {key!r}; allowed fields: {', '.join(REQUEST_FIELDS)}", key)
        for key in ("text", "speaker"):
            if key not in body:
                raise ClientError(f"field {key!r} is required", key)
        if not isinstance(body["text"], str):  # the engine reads a null text as "-" (for open_text_stream)
            raise ClientError(f"text must be a string, got {type(body['text']).__name__}", "text")
        instruct = body.get("instruct")
        if instruct is not None and not isinstance(instruct, str):
            raise ClientError("instruct must be a string", "instruct")
        for key, value in body.items():
            check_encodable(key, value)
        check_speakable("text", body["text"])
        return body

    def _open_stream(self, body: dict[str, Any], request_id: str) -> Any:
        return self.engine.stream(
            body["text"],
            body["speaker"],
            body.get("language"),  # None -> auto; "" is refused like any unknown language
            instruct=body.get("instruct"),
            packet_frames=body.get("packet_frames"),
            first_packet_frames=body.get("first_packet_frames"),
            seed=body.get("seed"),
            max_frames=body.get("max_frames"),
            request_id=request_id,
        )

    async def _serve(self, request: web.Request, label: str, respond: Any) -> web.StreamResponse:
        """Parse, claim the client's share, open the engine stream, then `respond(handle, request_id, t_received)`."""
        t_received = time.perf_counter()
        request_id = self.request_id(request)
        try:
            body = await self._parse(request)
        except ClientError as exc:
            return self.count(label, error_response(str(exc), exc.field, exc.status))
        over_share = self.claim(request)
        if over_share is not None:
            return self.count(label, over_share)
        try:
            try:
                handle = self._open_stream(body, request_id)
            except TTSInputError as exc:
                return self.count(label, input_error(exc))
            except EngineBusyError as exc:
                return self.count(label, busy_response(exc))
            return await respond(handle, request_id, t_received)
        finally:
            self.release(request)

    # ---- handlers -------------------------------------------------------------------------------
    async def tts_stream(self, request: web.Request) -> web.StreamResponse:
        async def respond(handle: Any, request_id: str, t_received: float) -> web.StreamResponse:
            headers = {
                "content-type": "application/octet-stream",
                "x-sample-rate": str(SAMPLE_RATE),
                "x-audio-format": "s16le",
                "x-channels": "1",
                "x-request-id": request_id,
            }
            return await stream_response(
                self, request, handle, label="stream", t_received=t_received, headers=headers,
                summary={"request_id": request_id, "endpoint": "/tts/stream", "bytes_sent": 0},
                encoder=AudioEncoder("pcm"), refuse=input_error,
                fail=lambda message: error_response(message, None, 500),
            )

        return await self._serve(request, "stream", respond)

    async def synthesize(self, request: web.Request) -> web.StreamResponse:
        async def respond(handle: Any, request_id: str, t_received: float) -> web.StreamResponse:
            def encode(pcms: list[np.ndarray]) -> bytes:
                return wav_bytes(np.concatenate(pcms) if pcms else np.zeros(0, dtype=np.int16))

            headers = {"content-type": "audio/wav", "x-request-id": request_id, "x-sample-rate": str(SAMPLE_RATE)}
            return await file_response(
                self, request, handle, label="synthesize", t_received=t_received, headers=headers,
                summary={"request_id": request_id, "endpoint": "/synthesize"}, encode=encode,
                refuse=input_error, fail=lambda message: error_response(message, None, 500),
            )

        return await self._serve(request, "synthesize", respond)

    async def speakers(self, request: web.Request) -> web.Response:
        return web.json_response({"speakers": self.engine.speakers, "languages": self.engine.languages})

    async def request_summary(self, request: web.Request) -> web.Response:
        request_id = request.match_info["request_id"]
        summary = await self.summaries.get(request_id)
        if summary is None:
            return error_response(
                f"no finished request with id {request_id!r} (kept: last {self.summaries.max_kept})", "request_id",
                404,
            )
        return web.json_response(summary)

    async def healthz(self, request: web.Request) -> web.Response:
        healthy = self.engine.healthy
        body = {
            "status": "ok" if healthy else "unhealthy",
            "open_streams": self.engine.active_streams(),
            "capacity": self.engine.capacity(),
            "device": str(self.engine.device),
            "loop_stalls": [dataclasses.asdict(stall) for stall in self.stalls],  # the last 20, oldest first
        }
        return web.json_response(body, status=200 if healthy else 503)

    async def openapi(self, request: web.Request) -> web.Response:
        engine = self.engine
        return web.json_response(
            document(
                speakers=engine.speakers,
                languages=engine.languages,
                max_text_chars=engine.config.max_text_chars,
                supports_instruct=engine.model.config.supports_instruct,
                api_key=bool(self.config.api_keys),
            )
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.prometheus.render(), headers={"content-type": CONTENT_TYPE})


async def start_server(
    engine: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: ServerConfig | None = None,
    sockets: list[socket.socket] | None = None,
) -> tuple[web.AppRunner, int, TTSServer]:
    """Serve on `sockets` (already listening, e.g. bound before the model loaded) or on host:port (0 = a free port);
    returns (runner, bound port, server). `await runner.cleanup()` stops it."""
    server = TTSServer(engine, config)
    runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    for sock in sockets or listen_sockets(host, port):
        await web.SockSite(runner, sock).start()
    bound = runner.addresses[0][1]
    return runner, bound, server
