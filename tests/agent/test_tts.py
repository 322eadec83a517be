"""QwenTTS over the real engine: the exact-frame path (20 ms frames tagged with the reply, hooks in order,
cancelling the producer closes the engine stream) and the framework plugin interface (stream/synthesize)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from agent.engine_client import LocalBackend
from agent.tts import FrameCutter, QwenTTS, SynthesisHooks


async def words(text: str) -> AsyncIterator[str]:
    for token in text.split(" "):
        yield token + " "
        await asyncio.sleep(0)


def test_frame_cutter_carries_and_pads() -> None:
    cutter = FrameCutter(480, "r")
    assert len(cutter.push(np.ones(700, dtype=np.int16), 1.0)) == 1
    frames = cutter.push(np.ones(300, dtype=np.int16), 2.0)
    assert len(frames) == 1 and frames[0].userdata == {"reply_id": "r", "t_ready": 2.0}
    (last,) = cutter.flush(3.0)
    data = np.frombuffer(last.data, dtype=np.int16)
    assert last.samples_per_channel == 480 and data[:40].tolist() == [1] * 40 and not data[40:].any()


async def test_frames_path(sim_backend: Any) -> None:
    tts = QwenTTS(sim_backend, frame_ms=20)
    seen: list[tuple[str, float]] = []
    tasks: list[asyncio.Task[None]] = []
    hooks = SynthesisHooks(
        on_first_text=lambda t: seen.append(("text", t)),
        on_first_packet=lambda t: seen.append(("packet", t)),
        on_segment=lambda s: seen.append(("segment:" + s, 0.0)),
        on_task=tasks.append,
    )
    frames = [f async for f in tts.frames(words("Hello there, how are you today?"), reply_id="r1", hooks=hooks)]
    assert {f.samples_per_channel for f in frames} == {480}
    assert {f.userdata["reply_id"] for f in frames} == {"r1"}
    segments = [name for name, _ in seen if name.startswith("segment:")]
    assert segments == ["segment:Hello there,", "segment:how are you today?"]
    assert len(frames) == 2 * 3 * 4  # 2 segments x 3 codec frames x 4 frames of 20 ms
    (t_text,) = [t for name, t in seen if name == "text"]
    (t_packet,) = [t for name, t in seen if name == "packet"]
    assert t_text <= t_packet <= frames[0].userdata["t_ready"]
    assert len(tasks) == 1 and tasks[0].done()


async def test_cancelling_the_producer_stops_the_engine_stream(tiny_engine: Any) -> None:
    backend = LocalBackend(tiny_engine, max_frames_per_segment=200)
    tts = QwenTTS(backend)
    tasks: list[asyncio.Task[None]] = []
    gen = tts.frames(words("A long answer that keeps the engine busy for a while."), reply_id="r",
                     hooks=SynthesisHooks(on_task=tasks.append))
    await gen.__anext__()
    assert backend.active_streams == 1
    tasks[0].cancel()  # what the DuplexController's cascade does
    await asyncio.sleep(0.05)
    assert backend.active_streams == 0 and tiny_engine.active_streams() == 0
    await gen.aclose()


async def test_plugin_interface(sim_backend: Any) -> None:
    tts = QwenTTS(sim_backend)
    chunked = [ev.frame async for ev in tts.synthesize("Hello there.")]
    # the framework's AudioEmitter may pad its last frame; all of the engine's 3 codec frames come through
    assert 3 * 1920 <= sum(f.samples_per_channel for f in chunked) < 3 * 1920 + 1200
    stream = tts.stream()
    stream.push_text("Hello there. ")
    stream.push_text("How are you?")
    stream.end_input()
    streamed = [ev.frame async for ev in stream]
    await stream.aclose()
    assert 2 * 3 * 1920 <= sum(f.samples_per_channel for f in streamed) < 2 * 3 * 1920 + 1200
    assert all(f.sample_rate == 24_000 for f in streamed)
