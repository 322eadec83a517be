"""HTTP server around one `Engine` (aiohttp): `python -m tts_engine serve`.

Endpoints:
- `POST /tts/stream` JSON {text, speaker, language?, packet_frames?, first_packet_frames?, seed?, instruct?}
  -> 200 chunked raw PCM (s16le, 24 kHz, mono), headers `x-sample-rate`, `x-request-id`, `x-audio-format`.
  Each engine packet is written the moment it exists. The headers go out with the first packet, so any
  input problem the engine finds still becomes a 400. A summary (engine metrics + server TTFA = request
  received -> first byte written) is stored before the final chunk and served by `GET /v1/requests/{id}`.
- `POST /synthesize` same JSON -> `audio/wav`.
- `GET /v1/speakers`, `GET /healthz`, `GET /metrics` (Prometheus text, own registry).
Errors: client mistakes -> 400 {"error", "field"}; all slots busy -> 503 + Retry-After; an engine fault
-> 500 {"error"} (never for a client mistake). A client that disconnects mid-stream cancels its stream
(handler cancellation is on, and a failed write also cancels); the engine keeps serving.
Configuration: the env table of DESIGN.md §6 (and `.env`), CLI flags override; unknown TTS_* variables
are warned about at start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import time
import uuid
from collections import OrderedDict
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError
from tts_engine.runtime.wav import wav_bytes

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
RETRY_AFTER_S = 1


class ClientError(Exception):
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


def parse_json_body(raw: bytes) -> Any:
    """The decoded JSON body (None when empty), or ClientError(field "body"): bad UTF-8 or JSON, nesting too deep
    for the parser, a number with more digits than Python converts."""
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except RecursionError:
        raise ClientError("body is not valid JSON: nested too deeply", "body") from None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, int digit limit
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


@web.middleware
async def _errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
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
        return error_response("request body is larger than 1 MiB", "body", 413)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(" ".join((exc.text or exc.reason).split()), None, exc.status)
    except ClientError as exc:
        return error_response(str(exc), exc.field, exc.status)
    except Exception:  # a bug, not the client's mistake: still the one JSON shape, and the server keeps serving
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response("internal error (see the server log)", None, 500)


class _EngineCollector:
    """Exposes the engine's counters and gauges at scrape time."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def collect(self) -> Any:
        stats = self.engine.stats()
        for name in self.engine.counters.NAMES:
            family = CounterMetricFamily(f"tts_engine_{name}", f"engine counter {name}")
            family.add_metric([], stats[name])
            yield family
        for name, key in (
            ("open_streams", "open_streams"),
            ("running_streams", "running_streams"),
            ("capacity", "capacity"),
            ("worker_alive", "worker_alive"),
        ):
            gauge = GaugeMetricFamily(f"tts_engine_{name}", f"engine gauge {name}")
            gauge.add_metric([], float(stats[key]))
            yield gauge


class TTSServer:
    def __init__(self, engine: Any, *, summaries_max: int = 2048) -> None:
        self.engine = engine
        self.summaries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.summaries_max = summaries_max
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests_total = Counter(
            "tts_http_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=self.registry
        )
        self.ttfa = Histogram(
            "tts_stream_ttfa_seconds",
            "request received -> first PCM byte written",
            registry=self.registry,
            buckets=(0.02, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1.0, 2.0, 5.0),
        )
        self.rtf = Histogram(
            "tts_stream_rtf",
            "stream wall time / audio duration",
            registry=self.registry,
            buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 5.0),
        )
        self.disconnects = Counter(
            "tts_stream_client_disconnects", "streams ended by the client", registry=self.registry
        )
        self.in_flight = Gauge("tts_http_streams_in_flight", "HTTP streams being written", registry=self.registry)
        self.registry.register(_EngineCollector(engine))

    # ---- app ------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20, middlewares=[_errors_as_json])
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
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ClientError("request body is larger than 1 MiB", "body", 413) from None
        body = parse_json_body(raw)
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
            return self._count("stream", self._busy(exc))
        summary: dict[str, Any] = {"request_id": request_id, "endpoint": "/tts/stream", "bytes_sent": 0}
        response: web.StreamResponse | None = None
        self.in_flight.inc()
        try:
            try:
                first = await handle.__anext__()
            except StopAsyncIteration:
                first = None
            except TTSInputError as exc:
                summary["status"] = "rejected"
                return self._count("stream", input_error(exc))
            response = web.StreamResponse(
                status=200,
                headers={
                    "content-type": "application/octet-stream",
                    "x-sample-rate": str(SAMPLE_RATE),
                    "x-audio-format": "s16le",
                    "x-channels": "1",
                    "x-request-id": request_id,
                },
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
            packets = [first] if first is not None else []
            t_first_byte: float | None = None
            while True:
                for packet in packets:
                    await response.write(packet.pcm.tobytes())
                    summary["bytes_sent"] += packet.pcm.nbytes
                    if t_first_byte is None:
                        t_first_byte = time.perf_counter()
                        summary["ttfa_ms"] = round((t_first_byte - t_received) * 1000.0, 2)
                try:
                    packets = [await handle.__anext__()]
                except StopAsyncIteration:
                    break
            summary["status"] = "completed"
            self._finish_summary(summary, handle, t_received)
            await response.write_eof()
            self._count("stream", response)
            return response
        except (ConnectionResetError, asyncio.CancelledError) as exc:
            handle.cancel()
            summary["status"] = "client_disconnected"
            self.disconnects.inc()
            self.requests_total.labels("stream", "disconnected").inc()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return response if response is not None else web.Response(status=499)
        except Exception as exc:  # an engine fault mid-stream: the client sees a truncated chunked body
            handle.cancel()
            summary["status"] = "error"
            summary["error"] = str(exc)
            log.error("stream %s failed: %s", request_id, exc)
            if response is None:
                return self._count("stream", error_response(f"synthesis failed: {exc}", None, 500))
            self.requests_total.labels("stream", "error").inc()
            if request.transport is not None:
                request.transport.close()
            return response
        finally:
            self.in_flight.dec()
            handle.cancel()
            if "stream" not in summary:
                self._finish_summary(summary, handle, t_received)

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
            return self._count("synthesize", self._busy(exc))
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
        return web.json_response(document(
            speakers=engine.speakers, languages=engine.languages, max_text_chars=engine.config.max_text_chars,
            supports_instruct=engine.model.config.supports_instruct,
        ))

    async def metrics(self, request: web.Request) -> web.Response:
        payload = generate_latest(self.registry)
        return web.Response(body=payload, headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})

    def _busy(self, exc: Exception) -> web.Response:
        return error_response(str(exc), None, 503, headers={"Retry-After": str(RETRY_AFTER_S)})

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


# ---- CLI ----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (TTS_DEEP_STREAM_MODEL_DIR)")
    parser.add_argument("--host", help="bind address (TTS_HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="TCP port (TTS_PORT, default 9000)")
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N (TTS_DEEP_STREAM_DEVICE)")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float16", "float32"))
    parser.add_argument("--packet-frames", type=int, help="frames per packet (TTS_DEEP_STREAM_PACKET_TOKENS)")
    parser.add_argument("--first-packet-frames", type=int, help="TTS_DEEP_STREAM_FIRST_PACKET_TOKENS")
    parser.add_argument("--max-streams", type=int, help="concurrent stream slots (TTS_DEEP_STREAM_MAX_STREAMS)")
    parser.add_argument("--max-text-chars", type=int, help="TTS_DEEP_STREAM_MAX_TEXT_CHARS")
    parser.add_argument("--seed", type=int, help="TTS_DEEP_STREAM_SEED")
    parser.add_argument("--policy", choices=("greedy", "seeded"), help="TTS_DEEP_STREAM_DETERMINISTIC_POLICY")
    parser.add_argument("--deterministic", choices=("0", "1"), help="TTS_DEEP_STREAM_DETERMINISTIC")
    parser.add_argument("--code-dump-dir", help="enable code dumps into this folder (TTS_CODE_DUMP_*)")
    parser.add_argument(
        "--env-file", default=os.environ.get("ENV_FILE") or ".env", help="KEY=VALUE file read first ($ENV_FILE or .env)"
    )
    parser.add_argument("--log-level", default="INFO")


def config_from_args(args: argparse.Namespace) -> Any:
    """EngineConfig from the environment, with every given CLI flag winning."""
    from tts_engine.config import EngineConfig

    overrides: dict[str, Any] = {
        "model_dir": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "packet_frames": args.packet_frames,
        "first_packet_frames": args.first_packet_frames,
        "max_streams": args.max_streams,
        "max_text_chars": args.max_text_chars,
        "seed": args.seed,
        "deterministic_policy": args.policy,
        "deterministic": None if args.deterministic is None else args.deterministic == "1",
    }
    if getattr(args, "code_dump_dir", None):
        overrides.update(code_dump_enable=True, code_dump_dir=args.code_dump_dir)
    return EngineConfig.from_env(**overrides)


def warn_unknown_variables() -> list[str]:
    from tts_engine.config import unknown_tts_variables

    unknown = unknown_tts_variables()
    for name in unknown:
        log.warning("unknown environment variable %s is ignored (typo? see DESIGN.md §6 / docs/server.md)", name)
    return unknown


def run(args: argparse.Namespace) -> int:
    from tts_engine.engine import Engine
    from tts_engine.env import Env, load_dotenv
    from tts_engine.errors import CheckpointError, ConfigError

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        load_dotenv(args.env_file)
        warn_unknown_variables()
        config = config_from_args(args)
        env = Env()
        host = args.host or env.str("TTS_HOST", "0.0.0.0")
        port = args.port if args.port is not None else env.int("TTS_PORT", 9000, lo=0, hi=65535)
        log.info("loading %s on %s", config.model_dir, config.device)
        engine = Engine.load(config.model_dir or None, config)
    except (ConfigError, CheckpointError) as exc:
        log.error("%s", exc)
        return 2
    log.info("engine ready on %s (warm-up %.2f s)", engine.device, engine.warmup_s or 0.0)
    from tts_engine.runtime.process import tune_process

    tune_process()  # GIL switch interval + gc.freeze after the load (runtime/process.py says why)

    async def serve() -> None:
        runner, bound, _ = await start_server(engine, host, port)
        log.info("listening on http://%s:%d (POST /tts/stream, /synthesize; GET /healthz, /metrics)", host, bound)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
            log.info("shutting down")
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # port taken / address not available: a restart would not help
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        return 2
    finally:
        engine.close()
    return 0
