"""`GET /tts/ws`: text in, audio out over one WebSocket, for clients that produce text as they go (an LLM's tokens).

Protocol (JSON text messages from the client, JSON events and binary audio from the server):
- `{"type": "start", "speaker", "language"?, "instruct"?, "packet_frames"?, "first_packet_frames"?, "seed"?,
  "max_frames"?, "layout"?}` opens an utterance (fields and checks as `POST /tts/stream`, without `text`; layout
  `segments` (default) or `tokens`, see below). The server answers
  `{"type": "started", "request_id", "sample_rate": SAMPLE_RATE, "format": "s16le", "channels": 1}`.
- `{"type": "text", "text": "..."}` adds a piece of text, cut anywhere. The engine cuts the text into segments as it
  arrives (tts_engine/text/segment.py, the agent's policy: a short starter first, then sentences and clauses) and
  speaks each as soon as it is complete, as one stream (runtime/chained.py); with layout `tokens` the text goes into
  one engine stream in the model's streaming-text layout instead (one text token per frame step: audio after the
  first couple of tokens; about 189 tokens per utterance at the default KV size, past that an error). Either way,
  while the text runs dry the stream waits and takes no GPU step. Text reaches the engine from the first letter or
  digit on (leading punctuation or emoji wait for it).
- `{"type": "end"}` says the text is complete: the rest is spoken, then `{"type": "done", "request_id", "status",
  "frames", "packets", "samples", "ttfa_ms"}` follows the last audio (status completed | cancelled | error; `frames`:
  codec frames the engine made for the utterance, final also after a cancel; `packets`, `samples`: the audio this
  connection sent). An utterance whose text had no letter or digit at all ends with an error (400, field text).
  `{"type": "cancel"}` stops the utterance at once (`done` with status cancelled). Every `started` gets one `done`;
  after it the connection takes the next `start`.
- Audio: one binary message per engine packet, raw PCM s16le 24 kHz mono, sent the moment the packet exists.
- Errors: `{"type": "error", "error", "field", "status"}` naming the field, the value and the allowed values (400;
  413 past TTS_DEEP_STREAM_MAX_TEXT_CHARS of text in one utterance; 429 past the client's share of the streams; 503
  when the engine is busy). A bad message ends only the utterance it concerns (if any); the connection stays open.
- Bounded in time (TTS_STREAM_IDLE_TIMEOUT_S): an open utterance whose client sends nothing for that long before its
  `end` is ended (error 408, field text, then `done`), and a client that takes no audio for that long is cut (the
  connection is dropped). Either way the utterance's slot is freed. Closing the socket cancels the utterance's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiohttp import WSMsgType, web

from common import jsonbody
from common.audio_format import SAMPLE_RATE
from tts_engine.errors import EngineBusyError, TextTooLongError, TTSInputError
from tts_engine.server.clients import CLIENT
from tts_engine.server.errors import over_share_message
from tts_engine.server.stream import ClientStalled, drop_connection, within
from tts_engine.server.summaries import settle

log = logging.getLogger("tts_engine.server.routes.ws")

PATH = "/tts/ws"
TYPES = ("start", "text", "end", "cancel")
START_FIELDS = ("type", "speaker", "language", "instruct", "packet_frames", "first_packet_frames", "seed",
                "max_frames", "layout")


class _Utterance:
    def __init__(self, stream: Any, client: str) -> None:
        self.stream = stream
        self.client: str | None = client  # holds one of the client's shares until it ends (None once given back)
        self.ended = False  # the client sent "end"
        self.held_text = ""  # text before its first letter or digit: the engine gets it with that character
        self.speakable = False
        self.packets = self.samples = 0  # sent on this connection
        self.last_activity = time.monotonic()  # a message from the client or audio to it
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
        idle_s = self.server.config.idle_timeout_s
        try:
            while not ws.closed:
                left = _quiet_left(current, idle_s)
                if current is not None and left == 0.0:  # an open utterance holds a slot for nothing: end it
                    current.stream.cancel()
                    current.ended = True
                    await self._error(ws, f"no text and no audio for {idle_s:g} s (TTS_STREAM_IDLE_TIMEOUT_S): the "
                                          "utterance was ended; send end once its text is complete", "text", 408)
                    continue
                try:
                    msg = await ws.receive(timeout=left)
                except TimeoutError:
                    continue
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
                if current is not None:
                    current.last_activity = time.monotonic()
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
                self._give_back(current)  # also when its pump was cancelled before it ran
        return ws

    async def _on_message(self, ws: web.WebSocketResponse, request: web.Request, raw: str,
                          current: _Utterance | None) -> _Utterance | None:
        try:
            msg = jsonbody.loads(raw)
        except ValueError as exc:  # bad JSON, nested past jsonbody.MAX_DEPTH, too many digits
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
        if current is not None and _done(current):
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
            if not current.speakable:  # nothing to say: the model would run to its frame cap
                current.stream.cancel()
                await self._error(ws, "the utterance's text has no letter or digit (only punctuation, symbols or "
                                      "emoji): nothing to speak", "text")
            else:
                current.stream.close()
            return current
        text = msg.get("text")
        try:
            if not isinstance(text, str):
                raise TTSInputError(f"text must be a string, got {type(text).__name__}", field="text")
            self._push(current, text)
        except TTSInputError as exc:
            current.stream.cancel()  # the utterance cannot go on as asked: stop it, keep the connection
            await self._error(ws, str(exc), exc.field, 413 if isinstance(exc, TextTooLongError) else 400)
        return current

    @staticmethod
    def _push(utterance: _Utterance, text: str) -> None:
        if not utterance.speakable:
            if not any(ch.isalnum() for ch in text):
                utterance.held_text += text
                return
            utterance.speakable = True
            text, utterance.held_text = utterance.held_text + text, ""
        utterance.stream.push(text)

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
        client = request[CLIENT]
        if not self.server.clients.claim(client):
            await self._error(ws, over_share_message(client, self.server.clients.limit), None, 429)
            return None
        request_id = self.server.request_id(request)
        try:
            stream = self.engine.open_text_stream(
                msg["speaker"], msg.get("language"), instruct=instruct, request_id=request_id,
                packet_frames=msg.get("packet_frames"), first_packet_frames=msg.get("first_packet_frames"),
                seed=msg.get("seed"), max_frames=msg.get("max_frames"), layout=msg.get("layout") or "segments",
            )
        except (TTSInputError, EngineBusyError) as exc:
            self.server.clients.release(client)
            status, field = (400, exc.field) if isinstance(exc, TTSInputError) else (503, None)
            await self._error(ws, str(exc), field, status)
            return None
        await ws.send_json({"type": "started", "request_id": request_id, "sample_rate": SAMPLE_RATE, "format": "s16le",
                            "channels": 1})
        utterance = _Utterance(stream, client)
        utterance.task = asyncio.create_task(self._pump(ws, request, utterance))
        return utterance

    async def _pump(self, ws: web.WebSocketResponse, request: web.Request, utterance: _Utterance) -> None:
        """Send each packet as it lands, then `done` (after an `error` event when the utterance failed)."""
        stream = utterance.stream
        idle_s = self.server.config.idle_timeout_s
        cut: dict[str, Any] = {}  # why the server ended it, when it did
        self.server.in_flight.inc()
        try:
            async for packet in stream:
                await within(idle_s, ws.send_bytes(packet.pcm.tobytes()))
                utterance.packets += 1
                utterance.samples += packet.pcm.shape[0]
                utterance.last_activity = time.monotonic()
        except TTSInputError as exc:
            await self._error(ws, str(exc), exc.field, 413 if isinstance(exc, TextTooLongError) else 400)
        except ClientStalled as exc:  # the client takes no audio: its slot goes back, the connection is cut
            stream.cancel()
            cut.update(status="client_stalled", stalled_ms=round(exc.waited_s * 1000.0, 1))
            self.server.prometheus.stalls.inc()
            log.info("ws %s cut: %s", stream.request_id, exc)
            drop_connection(request)
        except (ConnectionResetError, asyncio.CancelledError):
            stream.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - an engine fault ends this utterance, not the server
            log.error("ws stream %s failed: %s", stream.request_id, exc)
            stream.cancel()
            await self._error(ws, f"synthesis failed: {exc}", None, 500)
        finally:
            self.server.in_flight.dec()
            self._give_back(utterance)
        summary: dict[str, Any] = {"request_id": stream.request_id, "endpoint": PATH, "status": "",
                                   "packets_sent": utterance.packets, "samples_sent": utterance.samples, **cut}
        if cut:  # the connection is gone: no `done`; the summary settles on its own
            self.server.summaries.remember(summary, stream)
            return
        final = await settle(stream)  # after a cancel the engine lets go within one frame step: exact counts
        m = stream.metrics
        summary["status"] = m.status
        with contextlib.suppress(ConnectionResetError, ClientStalled):
            if not ws.closed:
                await within(idle_s, ws.send_json({
                    "type": "done", "request_id": stream.request_id, "status": m.status, "frames": m.frames,
                    "packets": utterance.packets, "samples": utterance.samples,
                    "ttfa_ms": None if m.ttfa_ms is None else round(m.ttfa_ms, 2)}))
        self.server.summaries.remember(summary, stream, final=final)

    def _give_back(self, utterance: _Utterance) -> None:
        if utterance.client is not None:
            self.server.clients.release(utterance.client)
            utterance.client = None

    async def _error(self, ws: web.WebSocketResponse, message: str, field: str | None, status: int = 400) -> None:
        self.server.requests_total.labels("ws", str(status)).inc()
        if not ws.closed:
            with contextlib.suppress(ConnectionResetError, ClientStalled):
                await within(self.server.config.idle_timeout_s,
                             ws.send_json({"type": "error", "error": message, "field": field, "status": status}))


def _done(utterance: _Utterance) -> bool:
    return utterance.task is not None and utterance.task.done()


def _quiet_left(utterance: _Utterance | None, idle_s: float) -> float | None:
    """Seconds until an utterance still waiting for text has been quiet (no text in, no audio out) for `idle_s`;
    0.0 once it has; None when no utterance waits for text."""
    if utterance is None or utterance.ended or _done(utterance):
        return None
    return max(0.0, idle_s - (time.monotonic() - utterance.last_activity))
