"""QwenTTS with text_input="tokens": the LLM's text goes into ONE streaming-text engine stream per reply as it
arrives (codes equal to the engine's offline streaming-text reference), audio starts before the text is complete,
cancelling the producer stops the engine work, and the framework's streaming interface takes the same path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from agent.engine_client import LocalBackend, RemoteBackend
from agent.tts import QwenTTS, SynthesisHooks

REPLY = "Yes, I can hear you. How can I help?"


async def tokens(text: str, delay: float = 0.0, started: asyncio.Event | None = None) -> AsyncIterator[str]:
    words = text.split(" ")
    for i, word in enumerate(words):
        yield word + (" " if i < len(words) - 1 else "")
        if started is not None and i == 3:
            await started.wait()  # hold the rest of the reply until audio has come out
        await asyncio.sleep(delay)


async def test_one_engine_stream_per_reply_and_audio_before_the_text_ends(tiny_engine: Any) -> None:
    backend = LocalBackend(tiny_engine, max_frames_per_segment=3)  # 9 frames for the reply
    tts = QwenTTS(backend, text_input="tokens")
    seen: list[tuple[str, Any]] = []
    first_audio = asyncio.Event()
    hooks = SynthesisHooks(
        on_first_text=lambda t: seen.append(("text", t)),
        on_first_packet=lambda t: (seen.append(("packet", t)), first_audio.set()),
        on_segment=lambda s: seen.append(("segment", s)),
    )
    started = tiny_engine.stats()["streams_started"]
    frames = [f async for f in tts.frames(tokens(REPLY, started=first_audio), reply_id="r1", hooks=hooks)]
    assert tiny_engine.stats()["streams_started"] == started + 1, "one engine stream for the whole reply"
    assert len(frames) == 9 * 4 and {f.samples_per_channel for f in frames} == {480}
    assert [name for name, _ in seen] == ["text", "packet", "segment"]  # audio came while text was held back
    assert seen[-1][1] == REPLY
    pcm = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])
    direct = tiny_engine.open_text_stream("serena", layout="tokens", max_frames=9)
    direct.push(REPLY)
    direct.close()
    expected = np.concatenate([p.pcm async for p in direct])
    assert pcm.tobytes() == expected.tobytes()  # the same stream the engine makes from the whole text
    assert backend.active_streams == 0


async def test_cancelling_the_producer_stops_the_streaming_text_stream(tiny_engine: Any) -> None:
    backend = LocalBackend(tiny_engine, max_frames_per_segment=200)
    tts = QwenTTS(backend, text_input="tokens")
    tasks: list[asyncio.Task[None]] = []
    gen = tts.frames(tokens("A long answer that keeps the engine busy for a while.", delay=0.05), reply_id="r",
                     hooks=SynthesisHooks(on_task=tasks.append))
    await gen.__anext__()
    assert backend.active_streams == 1
    tasks[0].cancel()  # what the DuplexController's cascade does on barge-in
    for _ in range(200):
        if tiny_engine.active_streams() == 0:
            break
        await asyncio.sleep(0.01)
    assert backend.active_streams == 0 and tiny_engine.active_streams() == 0
    assert not tiny_engine.scheduler.waiting_count
    await gen.aclose()


async def test_framework_stream_interface_uses_the_same_path(tiny_engine: Any) -> None:
    tts = QwenTTS(LocalBackend(tiny_engine, max_frames_per_segment=3), text_input="tokens")
    started = tiny_engine.stats()["streams_started"]
    stream = tts.stream()
    for word in ("Hello ", "there. ", "How ", "are ", "you?"):
        stream.push_text(word)
    stream.end_input()
    frames = [ev.frame async for ev in stream]
    await stream.aclose()
    assert 9 * 1920 <= sum(f.samples_per_channel for f in frames) < 9 * 1920 + 1200
    assert tiny_engine.stats()["streams_started"] == started + 1


def test_bad_choice_and_remote_fallback() -> None:
    with pytest.raises(ValueError, match="segments, tokens"):
        QwenTTS(LocalBackend(object(), capacity=1), text_input="words")
    assert QwenTTS(RemoteBackend("http://127.0.0.1:9"), text_input="tokens").text_input == "segments"
