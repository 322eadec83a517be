"""GET /tts/ws: text pushed in pieces, PCM back as it is made, over a real WebSocket; several utterances on one
connection, cancel, and bad messages answered with error events while the connection and the server keep going."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from tts_engine.text.segment import StreamSegmenter

TEXT = "你好，我是你的语音助手。今天天气很好！We can talk about 3.14 later. Bye."


async def receive_utterance(ws: Any) -> tuple[bytes, dict[str, Any], list[dict[str, Any]]]:
    audio, events = b"", []
    while True:
        msg = await asyncio.wait_for(ws.receive(), 30)
        if msg.type.name == "BINARY":
            audio += msg.data
            continue
        event = msg.json()
        events.append(event)
        if event["type"] == "done":
            return audio, event, events


async def test_pushed_text_comes_back_as_the_segments_audio(serve) -> None:
    srv = await serve()
    segmenter = StreamSegmenter()
    segments = [s for i in range(0, len(TEXT), 3) for s in segmenter.push(TEXT[i : i + 3])] + segmenter.flush()
    expected = b"".join([(await srv.engine.synthesize(s, "vivian", max_frames=2)).tobytes() for s in segments])
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        for round_ in range(2):  # two utterances on one connection
            await ws.send_json({"type": "start", "speaker": "vivian", "max_frames": 2})
            started = await ws.receive_json()
            assert started["type"] == "started" and started["sample_rate"] == 24000 and started["format"] == "s16le"
            for i in range(0, len(TEXT), 3):
                await ws.send_json({"type": "text", "text": TEXT[i : i + 3]})
            first = await asyncio.wait_for(ws.receive(), 30)  # audio flows before the text is closed
            assert first.type.name == "BINARY", first
            await ws.send_json({"type": "end"})
            audio, done, events = await receive_utterance(ws)
            assert first.data + audio == expected, round_
            assert done["status"] == "completed" and done["frames"] == 2 * len(segments)
            assert done["packets"] == 2 * len(segments) and done["ttfa_ms"] > 0
            assert [e["type"] for e in events] == ["done"]
    assert srv.engine.active_streams() == 0


async def test_cancel_and_bad_messages_keep_the_connection(serve) -> None:
    srv = await serve(max_text_chars=40)
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        bad = [
            ("not json", "body", 400),
            ('{"type": "sing"}', "type", 400),
            ('{"type": "text", "text": "hi"}', "type", 400),
            ('{"type": "start"}', "speaker", 400),
            ('{"type": "start", "speaker": "nobody"}', "speaker", 400),
            ('{"type": "start", "speaker": "serena", "language": "klingon"}', "language", 400),
            ('{"type": "start", "speaker": "serena", "packet_frames": 0}', "packet_frames", 400),
            ('{"type": "start", "speaker": "serena", "volume": 1}', "volume", 400),
        ]
        for raw, field, status in bad:
            await ws.send_str(raw)
            event = await ws.receive_json()
            assert event["type"] == "error" and event["field"] == field and event["status"] == status, (raw, event)
        await ws.send_json({"type": "start", "speaker": "nobody"})
        assert "serena" in (await ws.receive_json())["error"]  # the error lists the valid speakers
        await ws.send_bytes(b"\x00\x01")
        assert (await ws.receive_json())["field"] == "body"

        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 400})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": 5})
        error = await ws.receive_json()
        assert error["field"] == "text" and error["status"] == 400
        _, done, _ = await receive_utterance(ws)
        assert done["status"] == "cancelled"

        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 400})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "Hello there, my friend. "})
        assert (await asyncio.wait_for(ws.receive(), 30)).type.name == "BINARY"
        await ws.send_json({"type": "cancel"})
        _, done, _ = await receive_utterance(ws)
        assert done["status"] == "cancelled" and done["frames"] < 400

        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "a" * 41})
        error = await ws.receive_json()
        assert error["status"] == 413 and "TTS_DEEP_STREAM_MAX_TEXT_CHARS" in error["error"]
        _, done, _ = await receive_utterance(ws)
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "Fine."})
        await ws.send_json({"type": "end"})
        await ws.send_json({"type": "text", "text": "late"})
        audio, done, events = await receive_utterance(ws)
        assert len(audio) == 2 * 1920 * 2 and done["status"] == "completed"
        assert [e["field"] for e in events if e["type"] == "error"] == ["type"]  # text after end
    assert srv.engine.active_streams() == 0


async def test_closing_the_socket_stops_the_engine_work(serve) -> None:
    srv = await serve()
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 400})
        await ws.receive_json()
        await ws.send_json({"type": "text", "text": "Hello there, my friend. "})
        assert (await asyncio.wait_for(ws.receive(), 30)).type.name == "BINARY"
    for _ in range(200):
        if srv.engine.active_streams() == 0 and srv.engine.stats()["running_streams"] == 0:
            break
        await asyncio.sleep(0.02)
    assert srv.engine.active_streams() == 0 and srv.engine.stats()["running_streams"] == 0
    assert srv.engine.stats()["frames_generated"] < 200
    resp = await srv.session.post(f"{srv.base}/tts/stream", json={"text": "Hi.", "speaker": "serena", "max_frames": 2})
    assert len(np.frombuffer(await resp.read(), dtype="<i2")) == 2 * 1920


async def test_token_layout_streams_text_into_one_engine_stream(serve) -> None:
    srv = await serve()
    text = "Hello there, my friend. How are you today?"
    direct = srv.engine.open_text_stream("serena", layout="tokens", max_frames=6)
    direct.push(text)
    direct.close()
    expected = b"".join([p.pcm.tobytes() async for p in direct])
    started = srv.engine.stats()["streams_started"]
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        await ws.send_json({"type": "start", "speaker": "serena", "layout": "words"})
        error = await ws.receive_json()
        assert error["type"] == "error" and error["field"] == "layout" and "segments, tokens" in error["error"]
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 6, "layout": "tokens"})
        assert (await ws.receive_json())["type"] == "started"
        for i in range(0, 16, 2):  # "Hello there, my " in pieces: enough tokens for the first frames
            await ws.send_json({"type": "text", "text": text[i : i + 2]})
        first = await asyncio.wait_for(ws.receive(), 30)
        assert first.type.name == "BINARY"  # audio before the rest of the text
        await ws.send_json({"type": "text", "text": text[16:]})
        await ws.send_json({"type": "end"})
        audio, done, _ = await receive_utterance(ws)
    assert first.data + audio == expected and done["status"] == "completed" and done["frames"] == 6
    assert srv.engine.stats()["streams_started"] == started + 1


async def test_a_cancel_reports_every_frame_the_engine_made(serve) -> None:
    # the done after a cancel used to say frames 0 (the running segment was never counted)
    srv = await serve()
    for layout in ("segments", "tokens"):
        before = srv.engine.stats()["frames_generated"]
        async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
            await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 400, "layout": layout})
            request_id = (await ws.receive_json())["request_id"]
            await ws.send_json({"type": "text", "text": "Hello there, my friend, how are you today? "})
            received = [await asyncio.wait_for(ws.receive(), 30) for _ in range(3)]
            assert all(msg.type.name == "BINARY" for msg in received)
            await ws.send_json({"type": "cancel"})
            audio, done, _ = await receive_utterance(ws)
        generated = srv.engine.stats()["frames_generated"] - before
        assert done["status"] == "cancelled" and done["frames"] == generated > 0, (layout, done, generated)
        sent = b"".join(msg.data for msg in received) + audio
        assert done["samples"] * 2 == len(sent) and done["packets"] >= 3, (layout, done)
        summary = await (await srv.session.get(f"{srv.base}/v1/requests/{request_id}")).json()
        assert summary["stream"]["frames"] == generated and summary["stream_final"], layout
    assert srv.engine.active_streams() == 0


async def test_text_with_nothing_to_speak_is_refused_and_leading_punctuation_waits(serve) -> None:
    srv = await serve()
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "\U0001f642\U0001f642 ... "})
        await ws.send_json({"type": "text", "text": "!?"})
        await ws.send_json({"type": "end"})
        audio, done, events = await receive_utterance(ws)
        error = events[0]
        assert error["type"] == "error" and error["field"] == "text" and "nothing to speak" in error["error"]
        assert audio == b"" and done["status"] == "cancelled" and done["frames"] == 0
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json())["type"] == "started"
        await ws.send_json({"type": "text", "text": "... "})  # held until a word comes
        await ws.send_json({"type": "text", "text": "Fine."})
        await ws.send_json({"type": "end"})
        audio, done, _ = await receive_utterance(ws)
        assert done["status"] == "completed" and len(audio) == 2 * 1920 * 2
    assert srv.engine.stats()["streams_started"] == 1
