"""One streamed HTTP answer over one engine stream: the response lifecycle that `POST /tts/stream` (server.py) and
`POST /v1/audio/speech` (routes/openai_speech.py) share. Each route parses its own body, opens the engine stream and
maps errors to its own shape; `stream_response` does the rest.

Contract:
- The headers wait for the engine's first packet, so input the engine refuses at admission is still a 4xx
  (`refuse(exc)`, in the route's error shape; summary status `rejected`) and a fault before it a 500 (`fail(msg)`).
- Then 200, chunked: each packet is written the moment it exists, as `frame(encoder.push(pcm))` (`frame` wraps audio
  bytes for the wire, e.g. an SSE event; the encoder may hold bytes back and return b""), then `encoder.finish()`
  (encoder flush and trailer), then `trailer()` (wire bytes after the audio, e.g. SSE `speech.audio.done`).
- Summary (served by `GET /v1/requests/{id}`): `bytes_sent` counts audio bytes before framing, `ttfa_ms` = request
  received -> first audio byte written, status completed | rejected | client_disconnected | error, plus the engine's
  stream metrics; it is stored before the final chunk, so a client that reads to the end finds it.
- A client that leaves (a failed write, or aiohttp's handler cancellation) cancels the engine stream and counts as
  `disconnected` plus `tts_stream_client_disconnects`; an engine fault after the headers closes the connection, so
  the client sees a cut chunked body (counted as `error`), never a 200 that looks complete. The engine keeps serving.
- `tts_http_streams_in_flight` covers the whole call; the engine stream and the encoder are always released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tts_engine.errors import TTSInputError

log = logging.getLogger("tts_engine.server")


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
    response: web.StreamResponse | None = None

    async def write(audio: bytes) -> None:
        if not audio:
            return
        summary["bytes_sent"] += len(audio)
        await response.write(frame(audio) if frame is not None else audio)  # type: ignore[union-attr]
        if "ttfa_ms" not in summary:  # TTFA: request received -> first audio byte written
            summary["ttfa_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)

    server.in_flight.inc()
    try:
        try:
            packet = await handle.__anext__()
        except StopAsyncIteration:
            packet = None
        except TTSInputError as exc:
            summary["status"] = "rejected"
            return server._count(label, refuse(exc))  # noqa: SLF001 - same package
        response = web.StreamResponse(status=200, headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        while packet is not None:
            await write(encoder.push(packet.pcm))
            try:
                packet = await handle.__anext__()
            except StopAsyncIteration:
                packet = None
        await write(encoder.finish())
        if trailer is not None:
            await response.write(trailer())
        summary["status"] = "completed"
        server._finish_summary(summary, handle, t_received)  # noqa: SLF001
        await response.write_eof()
        return server._count(label, response)  # noqa: SLF001
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        handle.cancel()
        summary["status"] = "client_disconnected"
        server.disconnects.inc()
        server.requests_total.labels(label, "disconnected").inc()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return response if response is not None else web.Response(status=499)
    except Exception as exc:  # an engine fault: a 500 before the headers, a cut chunked body after them
        handle.cancel()
        summary["status"], summary["error"] = "error", str(exc)
        log.error("%s %s failed: %s", label, summary["request_id"], exc)
        if response is None:
            return server._count(label, fail(f"synthesis failed: {exc}"))  # noqa: SLF001
        server.requests_total.labels(label, "error").inc()
        if request.transport is not None:
            request.transport.close()
        return response
    finally:
        server.in_flight.dec()
        handle.cancel()
        encoder.close()
        if "stream" not in summary:
            server._finish_summary(summary, handle, t_received)  # noqa: SLF001
