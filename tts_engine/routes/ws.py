"""`GET /tts/ws`: text in, audio out over one WebSocket, for clients that produce text as they go (an LLM's tokens).

Protocol (JSON text messages from the client, JSON events and binary audio from the server):
- `{"type": "start", "speaker", "language"?, "instruct"?, "packet_frames"?, "first_packet_frames"?, "seed"?,
  "max_frames"?, "layout"?}` opens an utterance (fields and checks as `POST /tts/stream`, without `text`; layout
  `segments` (default) or `tokens`, see below). The server answers
  `{"type": "started", "request_id", "sample_rate": 24000, "format": "s16le", "channels": 1}`.
- `{"type": "text", "text": "..."}` adds a piece of text, cut anywhere. The engine cuts the text into segments as it
  arrives (tts_engine/text/segment.py, the agent's policy: a short starter first, then sentences and clauses) and
  speaks each as soon as it is complete, as one stream (runtime/chained.py); with layout `tokens` the text goes into
  one engine stream in the model's streaming-text layout instead (one text token per frame step: audio after the
  first couple of tokens; about 189 tokens per utterance at the default KV size, past that an error). Either way,
  while the text runs dry the stream waits and takes no GPU step.
- `{"type": "end"}` says the text is complete: the rest is spoken, then `{"type": "done", "request_id", "status",
  "frames", "packets", "samples", "ttfa_ms"}` follows the last audio (status completed | cancelled | error).
  `{"type": "cancel"}` stops the utterance at once (`done` with status cancelled). Every `started` gets one `done`;
  after it the connection takes the next `start`.
- Audio: one binary message per engine packet, raw PCM s16le 24 kHz mono, sent the moment the packet exists.
- Errors: `{"type": "error", "error", "field", "status"}` naming the field, the value and the allowed values (400;
  413 past TTS_DEEP_STREAM_MAX_TEXT_CHARS of text in one utterance; 503 when the engine is busy). A bad message
  ends only the utterance it concerns (if any); the connection stays open and the server keeps serving.
  Closing the socket cancels the utterance's engine work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from aiohttp import WSMsgType, web

from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError

log = logging.getLogger("tts_engine.routes.ws")

PATH = "/tts/ws"
TYPES = ("start", "text", "end", "cancel")
START_FIELDS = ("type", "speaker", "language", "instruct", "packet_frames", "first_packet_frames", "seed",
                "max_frames", "layout")


class _Utterance:
    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.ended = False  # the client sent "end"
        self.task: asyncio.Task[None] | None = None


class TextWebSocket:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.engine = server.engine

    def register(self, app: web.Application) -> None:
        app.router.add_get(PATH, self.handle)

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=1 << 20)
        await ws.prepare(request)
        self.server.requests_total.labels("ws", "101").inc()
        current: _Utterance | None = None
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    if msg.type == WSMsgType.BINARY:
                        await self._error(ws, "binary messages are not accepted; send JSON text messages", "body")
                    continue
                current = await self._on_message(ws, request, msg.data, current)
        finally:
            if current is not None:
                current.stream.cancel()
                if current.task is not None:
                    current.task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await current.task
        return ws

    async def _on_message(self, ws: web.WebSocketResponse, request: web.Request, raw: str,
                          current: _Utterance | None) -> _Utterance | None:
        try:
            msg = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # bad JSON, too deeply nested, too many digits
            await self._error(ws, f"message is not valid JSON: {exc}", "body")
            return current
        for key, value in msg.items() if isinstance(msg, dict) else ():
            if isinstance(value, str) and any("\ud800" <= ch <= "\udfff" for ch in value):
                await self._error(ws, f"{key} holds a lone UTF-16 surrogate; send valid Unicode", key)
                return current
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind not in TYPES:
            await self._error(ws, f"type={kind!r} is not allowed; allowed values: {', '.join(TYPES)}", "type")
            return current
        if current is not None and current.task is not None and current.task.done():
            current = None  # the previous utterance finished
        if kind == "start":
            if current is not None:
                await self._error(ws, "an utterance is already open; send end (or cancel) and wait for done", "type")
                return current
            return await self._start(ws, request, msg)
        if current is None:
            await self._error(ws, f"{kind!r} needs an open utterance; send start first", "type")
            return None
        if kind == "cancel":
            current.stream.cancel()
            return current
        if current.ended:
            await self._error(ws, f"{kind!r} after end: this utterance's text is complete", "type")
            return current
        if kind == "end":
            current.ended = True
            current.stream.close()
            return current
        text = msg.get("text")
        try:
            if not isinstance(text, str):
                raise TTSInputError(f"text must be a string, got {type(text).__name__}", field="text")
            current.stream.push(text)
        except TTSInputError as exc:
            current.stream.cancel()  # the utterance cannot go on as asked: stop it, keep the connection
            await self._error(ws, str(exc), exc.field, 413 if isinstance(exc, TextTooLongError) else 400)
        return current

    async def _start(self, ws: web.WebSocketResponse, request: web.Request, msg: dict[str, Any]) -> _Utterance | None:
        for key in msg:
            if key not in START_FIELDS:
                await self._error(ws, f"unknown field {key!r}; allowed fields: {', '.join(START_FIELDS)}", key)
                return None
        if "speaker" not in msg:
            await self._error(ws, "field 'speaker' is required", "speaker")
            return None
        instruct = msg.get("instruct")
        if instruct is not None and not isinstance(instruct, str):
            await self._error(ws, "instruct must be a string", "instruct")
            return None
        request_id = self.server._request_id(request)  # noqa: SLF001 - same package
        try:
            stream = self.engine.open_text_stream(
                msg["speaker"], msg.get("language"), instruct=instruct, request_id=request_id,
                packet_frames=msg.get("packet_frames"), first_packet_frames=msg.get("first_packet_frames"),
                seed=msg.get("seed"), max_frames=msg.get("max_frames"), layout=msg.get("layout") or "segments",
            )
        except TTSInputError as exc:
            await self._error(ws, str(exc), exc.field)
            return None
        except EngineBusyError as exc:
            await self._error(ws, str(exc), None, 503)
            return None
        await ws.send_json({"type": "started", "request_id": request_id, "sample_rate": 24000, "format": "s16le",
                            "channels": 1})
        utterance = _Utterance(stream)
        utterance.task = asyncio.create_task(self._pump(ws, utterance))
        return utterance

    async def _pump(self, ws: web.WebSocketResponse, utterance: _Utterance) -> None:
        """Send each packet as it lands, then `done` (after an `error` event when the utterance failed)."""
        stream = utterance.stream
        self.server.in_flight.inc()
        try:
            async for packet in stream:
                await ws.send_bytes(packet.pcm.tobytes())
        except TTSInputError as exc:
            await self._error(ws, str(exc), exc.field, 413 if isinstance(exc, TextTooLongError) else 400)
        except (ConnectionResetError, asyncio.CancelledError):
            stream.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - an engine fault ends this utterance, not the server
            log.error("ws stream %s failed: %s", stream.request_id, exc)
            stream.cancel()
            await self._error(ws, f"synthesis failed: {exc}", None, 500)
        finally:
            self.server.in_flight.dec()
        m = stream.metrics
        with contextlib.suppress(ConnectionResetError):
            await ws.send_json({"type": "done", "request_id": stream.request_id, "status": m.status, "frames": m.frames,
                                "packets": m.packets, "samples": m.samples,
                                "ttfa_ms": None if m.ttfa_ms is None else round(m.ttfa_ms, 2)})
        self.server._remember({"request_id": stream.request_id, "endpoint": PATH,  # noqa: SLF001
                               "status": m.status, "stream": m.to_dict()})

    async def _error(self, ws: web.WebSocketResponse, message: str, field: str | None, status: int = 400) -> None:
        self.server.requests_total.labels("ws", str(status)).inc()
        if not ws.closed:
            with contextlib.suppress(ConnectionResetError):
                await ws.send_json({"type": "error", "error": message, "field": field, "status": status})
