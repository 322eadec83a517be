"""Streaming text through the engine (layout "tokens"): the codes equal the offline streaming-text reference (which
the parity test ties to the official implementation) however the text arrives; a stream whose text runs dry waits
in its row (the steps leave it unchanged) while other streams go on; several such streams wait and go on
independently, and every slot can hold one."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from tts_engine.errors import TTSInputError
from tts_engine.runtime.codegen import SamplingParams
from tts_engine.runtime.text_feed import TextFeedFull, generate_codes_streaming

from .helpers import wait_until

TEXTS = [
    ("Hello there, my friend. How are you today?", "serena"),
    ("你好，我是你的语音助手。今天天气很好！", "vivian"),
    ("It costs 3.14 dollars, i.e. not much.", "ryan"),
]
FRAMES = 30


def reference(model, text: str, speaker: str, frames: int = FRAMES) -> torch.Tensor:
    return generate_codes_streaming(model, [text], speaker, "auto", SamplingParams.greedy(), max_frames=frames)


async def feed(stream, text: str, step: int, pause: float) -> None:
    for i in range(0, len(text), step):
        stream.push(text[i : i + step])
        await asyncio.sleep(pause)
    stream.close()


async def test_codes_equal_the_reference_and_a_dry_stream_waits(shared_engine, tiny_model) -> None:
    engine = shared_engine
    text, speaker = TEXTS[0]
    stream = engine.open_text_stream(speaker, layout="tokens", max_frames=FRAMES)
    packets: list = []

    async def consume() -> None:
        async for packet in stream:
            packets.append(packet)

    task = asyncio.create_task(consume())
    stream.push("Hello there, my")  # tokens: Hello, " there", ","; " my" may still grow
    await wait_until(lambda: engine.scheduler.waiting_count)  # it ran through its text and waits
    frames = engine.stats()["frames_generated"]
    assert 0 < frames < FRAMES and engine.stats()["waiting_streams"] == 1
    other = await engine.synthesize("A whole text meanwhile.", "ryan", max_frames=6)  # not held back
    assert len(other) == 6 * 1920
    await asyncio.sleep(0.2)
    assert engine.stats()["frames_generated"] == frames + 6, "the waiting stream advanced"
    assert engine.stats()["text_waits"] >= 1
    stream.push(text[len("Hello there, my") :])
    stream.close()
    await asyncio.wait_for(task, 60)
    assert [p.index for p in packets] == list(range(len(packets)))
    assert torch.equal(torch.as_tensor(stream.codes()), reference(tiny_model, text, speaker))
    assert engine.active_streams() == 0 and not engine.scheduler.waiting_count


async def test_concurrent_streams_wait_and_go_on_independently_in_every_slot(make_engine, tiny_model) -> None:
    engine = make_engine(max_streams=3)  # one slot per stream: none is kept spare
    rng = random.Random(3)
    streams = [engine.open_text_stream(speaker, layout="tokens", max_frames=FRAMES) for _, speaker in TEXTS]

    async def run(stream, text: str) -> None:
        feeder = asyncio.create_task(feed(stream, text, rng.randint(1, 4), rng.choice([0.03, 0.08, 0.15])))
        async for _ in stream:
            pass
        await feeder

    await asyncio.wait_for(asyncio.gather(*(run(s, t) for s, (t, _) in zip(streams, TEXTS, strict=True))), 120)
    for stream, (text, speaker) in zip(streams, TEXTS, strict=True):
        assert torch.equal(torch.as_tensor(stream.codes()), reference(tiny_model, text, speaker)), text
    stats = engine.stats()
    print(f"\n[streaming text] 3 streams: {stats['text_waits']} waits, {stats['steps']} steps")
    # waits depend on how fast this machine steps against the feeding; the first test waits deterministically
    assert engine.active_streams() == 0


async def test_cancelling_a_waiting_stream_frees_its_slot(make_engine) -> None:
    engine = make_engine(max_streams=2)
    stream = engine.open_text_stream("serena", layout="tokens", max_frames=400)
    stream.push("Hello there, my")
    first = await asyncio.wait_for(stream.__anext__(), 30)
    assert first.index == 0
    await wait_until(lambda: engine.scheduler.waiting_count)
    await stream.aclose()
    await wait_until(lambda: not engine.scheduler.waiting_count)
    assert engine.active_streams() == 0 and engine.stats()["streams_cancelled"] == 1
    assert len(await engine.synthesize("Hi.", "serena", max_frames=2)) == 2 * 1920


async def test_limits_and_bad_layout_name_the_field(make_engine) -> None:
    engine = make_engine(max_positions=128)  # (128 - 11) // 4 = 29 tokens per streaming-text stream
    stream = engine.open_text_stream("serena", layout="tokens", max_frames=2)
    stream.push("word " * 5)
    with pytest.raises(TextFeedFull, match="TTS_DEEP_STREAM_MAX_POSITIONS"):
        stream.push("word " * 40)  # refused whole; the stream goes on with the text it has
    stream.close()
    pcm = b"".join([p.pcm.tobytes() async for p in stream])
    assert len(pcm) == 2 * 1920 * 2 and stream.metrics.text_chars == 25
    with pytest.raises(TTSInputError, match="segments, tokens") as info:
        engine.open_text_stream("serena", layout="words")
    assert info.value.field == "layout"
    empty = engine.open_text_stream("serena", layout="tokens")
    empty.close()
    with pytest.raises(TTSInputError, match="empty"):
        await empty.__anext__()
    await wait_until(lambda: engine.active_streams() == 0)


@pytest.mark.parametrize("seed", [11, 12, 13])
async def test_many_streams_with_whole_text_ones_and_cancels_keep_their_codes(make_engine, tiny_model,
                                                                              seed: int) -> None:
    """Waits, admissions, compaction and cancels interleaved at random: every stream that finishes has the
    codes of its own text, and the engine ends healthy with every slot free."""
    engine = make_engine(max_streams=6)
    rng = random.Random(seed)
    jobs = [TEXTS[i % len(TEXTS)] for i in range(5)]
    cancel_at = {rng.randrange(5): rng.randint(2, 10)}
    results: dict[int, torch.Tensor] = {}

    async def run(i: int, text: str, speaker: str) -> None:
        await asyncio.sleep(rng.random() * 0.2)
        stream = engine.open_text_stream(speaker, layout="tokens", max_frames=FRAMES)
        feeder = asyncio.create_task(feed(stream, text, rng.randint(1, 6), rng.choice([0.0, 0.02, 0.06, 0.12])))
        async for packet in stream:
            if cancel_at.get(i) == packet.index:
                await stream.aclose()
                break
        await feeder if i not in cancel_at else feeder.cancel()
        if i not in cancel_at:
            results[i] = torch.as_tensor(stream.codes())

    async def whole(delay: float) -> None:
        await asyncio.sleep(delay)
        assert len(await engine.synthesize("Plain text in between.", "ryan", max_frames=5)) == 5 * 1920

    await asyncio.wait_for(asyncio.gather(*(run(i, t, s) for i, (t, s) in enumerate(jobs)),
                                          whole(0.05), whole(0.3)), 180)
    for i, codes in results.items():
        assert torch.equal(codes, reference(tiny_model, *jobs[i])), (seed, i)
    await wait_until(lambda: engine.active_streams() == 0 and not engine.scheduler.waiting_count)
    assert engine.healthy and engine.stats()["running_streams"] == 0


async def test_a_dropped_waiting_stream_frees_its_slot(make_engine) -> None:
    import gc

    engine = make_engine(max_streams=2)
    stream = engine.open_text_stream("serena", layout="tokens", max_frames=400)
    stream.push("Hello there, my")
    await asyncio.wait_for(stream.__anext__(), 30)
    await wait_until(lambda: engine.scheduler.waiting_count)
    del stream
    gc.collect()
    await wait_until(lambda: not engine.scheduler.waiting_count and engine.active_streams() == 0)
