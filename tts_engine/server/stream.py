"""One HTTP answer over one engine stream: the response lifecycle that `POST /tts/stream`, `POST /synthesize`
(server.py) and `POST /v1/audio/speech` (routes/openai_speech.py) share. Each route parses its own body, opens the
engine stream and maps errors to its own shape; `stream_response` (chunked, packet by packet) or `file_response` (the
whole file at once, with Content-Length) does the rest.

Contract:
- The headers wait for the engine's first packet (a file: for the last one), so input the engine refuses at admission
  is still a 4xx (`refuse(exc)`, in the route's error shape; summary status `rejected`) and a fault before it a 500
  (`fail(msg)`).
- Streamed: 200, chunked; each packet is written the moment it exists, as `frame(encoder.push(pcm))` (`frame` wraps
  audio bytes for the wire, e.g. an SSE event; the encoder may hold bytes back and return b""), then
  `encoder.finish()` (encoder flush and trailer), then `trailer()` (wire bytes after the audio, e.g. SSE
  `speech.audio.done`). A file: 200 with the encoded whole (a WAV with its real sizes).
- Every write is bounded by the idle timeout (`TTS_STREAM_IDLE_TIMEOUT_S`): a write that cannot complete for that long
  means the client has taken nothing for that long (its socket buffers are full). Its stream is then cut: the engine
  stream is cancelled (its slot frees), the connection is dropped, status `client_stalled`, counted in
  `tts_stream_client_stalls`. Waiting for the engine is never counted against the client.
- Summary (served by `GET /v1/requests/{id}`, summaries.py): `bytes_sent` counts audio bytes before framing,
  `ttfa_ms` = request received -> first audio byte written, status completed | rejected | client_disconnected |
  client_stalled | error, plus the engine's stream metrics (final, also after a cancel); it is stored before the
  final chunk, so a client that reads to the end finds it.
- A client that leaves (a failed write, or aiohttp's handler cancellation) cancels the engine stream and counts as
  `disconnected` plus `tts_stream_client_disconnects`; an engine fault after the headers closes the connection, so
  the client sees a cut chunked body (counted as `error`), never a 200 that looks complete. The engine keeps serving.
- `tts_http_streams_in_flight` covers the whole call; the engine stream and the encoder are always released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from tts_engine.errors import TTSInputError

log = logging.getLogger("tts_engine.server")

T = TypeVar("T")
FILE_CHUNK = 1 << 16  # a whole file goes out in writes of this size, each bounded by the idle timeout


class ClientStalled(Exception):
    """The client took nothing for the idle timeout: its stream is cut. `waited_s`: how long the write waited."""

    def __init__(self, idle_s: float, waited_s: float) -> None:
        super().__init__(f"the client took nothing for {idle_s:g} s (TTS_STREAM_IDLE_TIMEOUT_S)")
        self.waited_s = waited_s


async def within(idle_s: float, step: Awaitable[T]) -> T:
    """`await step` (a write to the client), or ClientStalled when it cannot complete within `idle_s`."""
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(idle_s):
            return await step
    except TimeoutError:
        raise ClientStalled(idle_s, time.perf_counter() - t0) from None


def drop_connection(request: web.Request) -> None:
    """Cut the connection now, dropping unsent bytes (a stalled client would never take them)."""
    if request.transport is not None:
        request.transport.abort()


async def stream_response(
    server: Any,
    request: web.Request,
    handle: Any,
    *,
    label: str,
    summary: dict[str, Any],
    t_received: float,
    headers: dict[str, str],
    encoder: Any,
    refuse: Callable[[TTSInputError], web.Response],
    fail: Callable[[str], web.Response],
    frame: Callable[[bytes], bytes] | None = None,
    trailer: Callable[[], bytes] | None = None,
) -> web.StreamResponse:
    """Serve `handle` (an engine stream) as `request`'s chunked answer; `label` is the `endpoint` of the request
    counter; `summary` holds at least `request_id` and `endpoint`. `server` is the TTSServer (counters, summaries)."""
    summary.setdefault("bytes_sent", 0)
    idle_s = server.config.idle_timeout_s
    response: web.StreamResponse | None = None

    async def write(out: web.StreamResponse, audio: bytes) -> None:
        if not audio:
            return
        summary["bytes_sent"] += len(audio)
        await within(idle_s, out.write(frame(audio) if frame is not None else audio))
        if "ttfa_ms" not in summary:  # TTFA: request received -> first audio byte written
            summary["ttfa_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)

    async def serve() -> web.StreamResponse:
        nonlocal response
        packet = await _next_packet(handle)
        response = web.StreamResponse(status=200, headers=headers)
        response.enable_chunked_encoding()
        await within(idle_s, response.prepare(request))
        while packet is not None:
            await write(response, encoder.push(packet.pcm))
            packet = await _next_packet(handle)
        await write(response, encoder.finish())
        if trailer is not None:
            await within(idle_s, response.write(trailer()))
        summary["status"] = "completed"
        server.summaries.remember(summary, handle, t_received, final=True)
        await within(idle_s, response.write_eof())
        return response

    try:
        return await _lifecycle(server, request, handle, serve, label=label, summary=summary, t_received=t_received,
                                refuse=refuse, fail=fail, sent=lambda: response)
    finally:
        encoder.close()


async def file_response(
    server: Any,
    request: web.Request,
    handle: Any,
    *,
    label: str,
    summary: dict[str, Any],
    t_received: float,
    headers: dict[str, str],
    encode: Callable[[list[Any]], bytes],
    refuse: Callable[[TTSInputError], web.Response],
    fail: Callable[[str], web.Response],
) -> web.StreamResponse:
    """Serve `handle` as one file: every packet's PCM, then `encode(pcms)` sent with Content-Length."""
    idle_s = server.config.idle_timeout_s
    response: web.StreamResponse | None = None

    async def serve() -> web.StreamResponse:
        nonlocal response
        pcms = []
        packet = await _next_packet(handle)
        while packet is not None:
            pcms.append(packet.pcm)
            packet = await _next_packet(handle)
        body = encode(pcms)
        response = web.StreamResponse(status=200, headers=headers)
        response.content_length = len(body)
        summary["status"] = "completed"
        summary["bytes_sent"] = len(body)
        server.summaries.remember(summary, handle, t_received, final=True)
        await within(idle_s, response.prepare(request))
        for start in range(0, len(body), FILE_CHUNK):  # each write waits only for the client to take one chunk
            await within(idle_s, response.write(body[start:start + FILE_CHUNK]))
        summary["ttfa_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)
        await within(idle_s, response.write_eof())
        return response

    return await _lifecycle(server, request, handle, serve, label=label, summary=summary, t_received=t_received,
                            refuse=refuse, fail=fail, sent=lambda: response)


async def _next_packet(handle: Any) -> Any:
    try:
        return await handle.__anext__()
    except StopAsyncIteration:
        return None


async def _lifecycle(
    server: Any,
    request: web.Request,
    handle: Any,
    serve: Callable[[], Awaitable[web.StreamResponse]],
    *,
    label: str,
    summary: dict[str, Any],
    t_received: float,
    refuse: Callable[[TTSInputError], web.Response],
    fail: Callable[[str], web.Response],
    sent: Callable[[], web.StreamResponse | None],
) -> web.StreamResponse:
    """Run `serve()` and map every way it can end to a response, a summary and the counters."""
    server.in_flight.inc()
    try:
        return server.count(label, await serve())
    except TTSInputError as exc:
        if sent() is None:  # found at admission: still a 4xx in the route's shape
            summary["status"] = "rejected"
            return server.count(label, refuse(exc))
        return _fault(server, request, label, summary, handle, exc, sent(), fail)
    except ClientStalled as exc:
        handle.cancel()
        summary["status"], summary["error"] = "client_stalled", str(exc)
        summary["stalled_ms"] = round(exc.waited_s * 1000.0, 1)  # the write that waited for it: the idle timeout
        server.prometheus.stalls.inc()
        server.requests_total.labels(label, "stalled").inc()
        log.info("%s %s cut: %s", label, summary["request_id"], exc)
        drop_connection(request)
        return sent() or web.Response(status=408)
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        handle.cancel()
        summary["status"] = "client_disconnected"
        server.disconnects.inc()
        server.requests_total.labels(label, "disconnected").inc()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return sent() or web.Response(status=499)
    except Exception as exc:  # noqa: BLE001 - an engine fault: a 500 before the headers, a cut body after
        return _fault(server, request, label, summary, handle, exc, sent(), fail)
    finally:
        server.in_flight.dec()
        handle.cancel()
        if summary.get("status") != "completed":  # a completed one was remembered before its last write
            server.summaries.remember(summary, handle, t_received)  # its metrics once the engine lets it go


def _fault(server: Any, request: web.Request, label: str, summary: dict[str, Any], handle: Any, exc: Exception,
           response: web.StreamResponse | None, fail: Callable[[str], web.Response]) -> web.StreamResponse:
    handle.cancel()
    summary["status"], summary["error"] = "error", str(exc)
    log.error("%s %s failed: %s", label, summary["request_id"], exc)
    if response is None:
        return server.count(label, fail(f"synthesis failed: {exc}"))
    server.requests_total.labels(label, "error").inc()
    if request.transport is not None:
        request.transport.close()
    return response
