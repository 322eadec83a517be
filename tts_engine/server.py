"""HTTP server around one `Engine` (aiohttp): `python -m tts_engine serve`.

Endpoints:
- `POST /tts/stream` JSON {text, speaker, language?, packet_frames?, first_packet_frames?, seed?, instruct?}
  -> 200 chunked raw PCM (s16le, 24 kHz, mono), headers `x-sample-rate`, `x-request-id`, `x-audio-format`.
  Each engine packet is written the moment it exists. The headers go out with the first packet, so any
  input problem the engine finds still becomes a 400. A summary (engine metrics + server TTFA = request
  received -> first byte written) is stored before the final chunk and served by `GET /v1/requests/{id}`.
- `POST /synthesize` same JSON -> `audio/wav`.
- `GET /v1/speakers`, `GET /healthz`, `GET /metrics` (Prometheus text, own registry), `GET /openapi.json`.
- `POST /v1/audio/speech` (OpenAI-compatible, routes/openai_speech.py), `GET /tts/ws` (text in, PCM out, routes/ws.py).
Errors: client mistakes -> 400 {"error", "field"}; all slots busy -> 503 + Retry-After; an engine fault
-> 500 {"error"} (never for a client mistake). A client that disconnects mid-stream cancels its stream
(handler cancellation is on, and a failed write also cancels); the engine keeps serving.
Configuration: the env table of DESIGN.md §6 (and `.env`), CLI flags override; unknown TTS_* variables
are warned about at start-up.

This module: `TTSServer` (route table, request -> engine stream, summaries) and `start_server`. The rest, by
responsibility: server_errors.py (the one JSON error shape, body parsing, the error middleware), server_stream.py
(the chunked streaming lifecycle shared with /v1/audio/speech), server_metrics.py (what /metrics exposes),
server_cli.py (`add_arguments`, `run`: the `serve` command), server_openapi.py (GET /openapi.json). Every name
that used to live here is still importable from here.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import OrderedDict
from typing import Any

from aiohttp import web

from tts_engine.errors import EngineBusyError, TTSInputError
from tts_engine.runtime.wav import wav_bytes
from tts_engine.server_cli import add_arguments, config_from_args, run, warn_unknown_variables
from tts_engine.server_errors import (
    RETRY_AFTER_S,
    ClientError,
    busy_response,
    check_encodable,
    error_response,
    errors_as_json,
    input_error,
    parse_json_body,
    read_body,
)
from tts_engine.server_metrics import CONTENT_TYPE, ServerMetrics
from tts_engine.server_stream import stream_response

__all__ = [
    "REQUEST_FIELDS",
    "RETRY_AFTER_S",
    "SAMPLE_RATE",
    "ClientError",
    "TTSServer",
    "add_arguments",
    "check_encodable",
    "config_from_args",
    "error_response",
    "input_error",
    "parse_json_body",
    "run",
    "start_server",
    "warn_unknown_variables",
]

log = logging.getLogger("tts_engine.server")

SAMPLE_RATE = 24_000
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
    def __init__(self, engine: Any, *, summaries_max: int = 2048) -> None:
        self.engine = engine
        self.summaries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.summaries_max = summaries_max
        self.prometheus = stats = ServerMetrics(engine)  # the routes write these instruments (server_metrics.py)
        self.registry = stats.registry
        self.requests_total = stats.requests_total
        self.ttfa = stats.ttfa
        self.rtf = stats.rtf
        self.disconnects = stats.disconnects
        self.in_flight = stats.in_flight

    # ---- app ------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20, middlewares=[errors_as_json])
        app.router.add_post("/tts/stream", self.tts_stream)
        app.router.add_post("/synthesize", self.synthesize)
        app.router.add_get("/v1/speakers", self.speakers)
        app.router.add_get("/v1/requests/{request_id}", self.request_summary)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/openapi.json", self.openapi)  # server_openapi.py: one dict per route
        from tts_engine.routes.openai_speech import OpenAISpeech
        from tts_engine.routes.ws import TextWebSocket

        OpenAISpeech(self).register(app)  # POST /v1/audio/speech (routes/openai_speech.py)
        TextWebSocket(self).register(app)  # GET /tts/ws: text in, PCM out (routes/ws.py)
        return app

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
        return body

    def _request_id(self, request: web.Request) -> str:
        given = request.headers.get("x-request-id", "")
        return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]

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

    def _remember(self, summary: dict[str, Any]) -> None:
        self.summaries[summary["request_id"]] = summary
        while len(self.summaries) > self.summaries_max:
            self.summaries.popitem(last=False)

    def _finish_summary(self, summary: dict[str, Any], handle: Any, t_received: float) -> None:
        metrics = handle.metrics
        summary["stream"] = metrics.to_dict()
        summary["server_wall_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)
        self._remember(summary)
        if summary.get("status") == "completed":
            if "ttfa_ms" in summary:
                self.ttfa.observe(summary["ttfa_ms"] / 1000.0)
            if metrics.rtf is not None:
                self.rtf.observe(metrics.rtf)

    # ---- handlers -------------------------------------------------------------------------------
    async def tts_stream(self, request: web.Request) -> web.StreamResponse:
        t_received = time.perf_counter()
        request_id = self._request_id(request)
        try:
            body = await self._parse(request)
            handle = self._open_stream(body, request_id)
        except ClientError as exc:
            return self._count("stream", error_response(str(exc), exc.field, exc.status))
        except TTSInputError as exc:
            return self._count("stream", input_error(exc))
        except EngineBusyError as exc:
            return self._count("stream", busy_response(exc))
        from tts_engine.routes.encode import AudioEncoder

        headers = {
            "content-type": "application/octet-stream",
            "x-sample-rate": str(SAMPLE_RATE),
            "x-audio-format": "s16le",
            "x-channels": "1",
            "x-request-id": request_id,
        }
        return await stream_response(
            self,
            request,
            handle,
            label="stream",
            t_received=t_received,
            headers=headers,
            summary={"request_id": request_id, "endpoint": "/tts/stream", "bytes_sent": 0},
            encoder=AudioEncoder("pcm"),
            refuse=input_error,
            fail=lambda message: error_response(message, None, 500),
        )

    async def synthesize(self, request: web.Request) -> web.Response:
        request_id = self._request_id(request)
        try:
            body = await self._parse(request)
            handle = self._open_stream(body, request_id)
        except ClientError as exc:
            return self._count("synthesize", error_response(str(exc), exc.field, exc.status))
        except TTSInputError as exc:
            return self._count("synthesize", input_error(exc))
        except EngineBusyError as exc:
            return self._count("synthesize", busy_response(exc))
        import numpy as np

        try:
            parts = [packet.pcm async for packet in handle]
        except TTSInputError as exc:
            return self._count("synthesize", input_error(exc))
        except Exception as exc:  # noqa: BLE001 - an engine fault, not the client's
            log.error("synthesize %s failed: %s", request_id, exc)
            return self._count("synthesize", error_response(f"synthesis failed: {exc}", None, 500))
        finally:
            handle.cancel()
        pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
        self._remember(
            {
                "request_id": request_id,
                "endpoint": "/synthesize",
                "status": "completed",
                "stream": handle.metrics.to_dict(),
            }
        )
        response = web.Response(
            body=wav_bytes(pcm),
            content_type="audio/wav",
            headers={"x-request-id": request_id, "x-sample-rate": str(SAMPLE_RATE)},
        )
        return self._count("synthesize", response)

    async def speakers(self, request: web.Request) -> web.Response:
        return web.json_response({"speakers": self.engine.speakers, "languages": self.engine.languages})

    async def request_summary(self, request: web.Request) -> web.Response:
        request_id = request.match_info["request_id"]
        summary = self.summaries.get(request_id)
        if summary is None:
            return error_response(
                f"no finished request with id {request_id!r} (kept: last {self.summaries_max})", "request_id", 404
            )
        return web.json_response(summary)

    async def healthz(self, request: web.Request) -> web.Response:
        healthy = self.engine.healthy
        body = {
            "status": "ok" if healthy else "unhealthy",
            "open_streams": self.engine.active_streams(),
            "capacity": self.engine.capacity(),
            "device": str(self.engine.device),
        }
        return web.json_response(body, status=200 if healthy else 503)

    async def openapi(self, request: web.Request) -> web.Response:
        from tts_engine.server_openapi import document

        engine = self.engine
        return web.json_response(
            document(
                speakers=engine.speakers,
                languages=engine.languages,
                max_text_chars=engine.config.max_text_chars,
                supports_instruct=engine.model.config.supports_instruct,
            )
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.prometheus.render(), headers={"content-type": CONTENT_TYPE})

    def _count(self, endpoint: str, response: web.StreamResponse) -> Any:
        self.requests_total.labels(endpoint, str(response.status)).inc()
        return response


async def start_server(engine: Any, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int, TTSServer]:
    """Start serving on host:port (0 = ephemeral); returns (runner, bound port, server). `await runner.cleanup()`."""
    server = TTSServer(engine)
    runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port
    for sock in getattr(site._server, "sockets", None) or []:  # noqa: SLF001 - aiohttp exposes no public getter
        bound = sock.getsockname()[1]
        break
    return runner, bound, server
