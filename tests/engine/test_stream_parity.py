"""Streaming == offline, byte for byte, whatever the packet sizes; determinism; exact incremental decode."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import numpy as np
import pytest
import torch

from tts_engine.replay import decode_codes
from tts_engine.runtime.packetizer import SAMPLES_PER_FRAME

from .helpers import collect

TEXT = "Hello world, this is a test."
FRAMES = 11


async def test_stream_equals_offline_for_several_packet_sizes(shared_engine) -> None:
    offline = await shared_engine.synthesize(TEXT, "serena", max_frames=FRAMES)
    assert offline.dtype == np.int16 and len(offline) == FRAMES * SAMPLES_PER_FRAME
    for first, size in [(1, 1), (1, 2), (2, 3), (3, 5), (4, 4), (1, 64)]:
        handle = shared_engine.stream(TEXT, "serena", max_frames=FRAMES, first_packet_frames=first, packet_frames=size)
        pcm, packets = await collect(handle)
        assert pcm.tobytes() == offline.tobytes(), f"packets ({first}, {size}) changed the audio"
        assert [p.index for p in packets] == list(range(len(packets)))
        assert packets[0].frames == min(first, FRAMES)
        assert all(p.frames == size for p in packets[1:-1])
        assert all(len(p.pcm) == p.frames * SAMPLES_PER_FRAME and p.pcm.dtype == np.int16 for p in packets)
        assert all(a.t_ready <= b.t_ready for a, b in zip(packets, packets[1:], strict=False))
        assert handle.metrics.status == "completed" and handle.metrics.end_reason == "cap"
        assert handle.metrics.frames == FRAMES and handle.metrics.packets == len(packets)


async def test_greedy_runs_repeat_byte_for_byte(shared_engine) -> None:
    hashes = set()
    for _ in range(3):
        pcm = await shared_engine.synthesize("Good morning, everyone.", "ryan", language="english", max_frames=8)
        hashes.add(hashlib.sha256(pcm.tobytes()).hexdigest())
    assert len(hashes) == 1


async def test_seeded_sampling_repeats_per_seed_and_differs_across_seeds(make_engine) -> None:
    engine = make_engine(deterministic_policy="seeded", seed=7)
    a = await engine.synthesize(TEXT, "vivian", max_frames=8)
    b = await engine.synthesize(TEXT, "vivian", max_frames=8)
    c = await engine.synthesize(TEXT, "vivian", max_frames=8, seed=8)
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


async def test_incremental_decode_matches_single_pass_of_the_same_codes(shared_engine) -> None:
    handle = shared_engine.stream(TEXT, "aiden", max_frames=FRAMES, packet_frames=3)
    pcm, _ = await collect(handle)
    codes = handle.codes()
    assert codes.shape == (FRAMES, 16)
    single = decode_codes(shared_engine.model.codec, codes, "single")
    diff = np.abs(single.astype(np.int32) - pcm.astype(np.int32))
    assert diff.max() <= 1, "the engine's one-frame decode drifted from a single pass over the same codes"
    signal = float(np.sum(single.astype(np.float64) ** 2))
    noise = float(np.sum(diff.astype(np.float64) ** 2))
    assert noise == 0 or 10 * np.log10(signal / noise) > 60


async def test_concurrent_streams_give_the_same_codes_as_alone(shared_engine) -> None:
    texts = [("Hello world.", "serena"), ("What time is it?", "ryan"), ("Thank you very much.", "sohee")]

    async def run(text: str, speaker: str) -> tuple[np.ndarray, np.ndarray]:
        handle = shared_engine.stream(text, speaker, max_frames=9)
        pcm, _ = await collect(handle)
        return pcm, handle.codes()

    alone = [await run(t, s) for t, s in texts]
    together = await asyncio.gather(*(run(t, s) for t, s in texts))
    for (pcm_a, codes_a), (pcm_b, codes_b) in zip(alone, together, strict=True):
        assert np.array_equal(codes_a, codes_b)
        # the fp32 decoder may round differently in a batch (different conv kernels): at most 1 LSB
        assert len(pcm_a) == len(pcm_b)
        assert np.abs(pcm_a.astype(np.int32) - pcm_b).max() <= 1


async def test_model_work_runs_off_the_event_loop_thread(make_engine) -> None:
    engine = make_engine()
    threads: set[str] = set()
    original_step = engine.codegen.step
    original_prepare = engine.codegen.prepare

    def step(n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        threads.add(threading.current_thread().name)
        return original_step(n_rows)

    def prepare(*args: object, **kwargs: object) -> object:
        threads.add(threading.current_thread().name)
        return original_prepare(*args, **kwargs)

    engine.codegen.step = step
    engine.codegen.prepare = prepare
    await engine.synthesize(TEXT, "serena", max_frames=3)
    assert threads == {"tts-engine-worker"} and threading.current_thread().name not in threads


@pytest.mark.parametrize("language", ["auto", "english", "chinese"])
async def test_languages_and_dialect_speakers_stream(shared_engine, language: str) -> None:
    for speaker in ("dylan", "serena"):
        pcm = await shared_engine.synthesize("Hi there.", speaker, language=language, max_frames=3)
        assert len(pcm) == 3 * SAMPLES_PER_FRAME
