"""Cancellation frees the slot within a frame step; busy engine refuses; slow consumers; faults and close."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

from tts_engine.engine import EngineClosedError, StreamOverflowError
from tts_engine.errors import EngineBusyError
from tts_engine.runtime.scheduler import EngineStepError

from .helpers import collect, wait_until

TEXT = "Hello world, this is a test."
LONG = 400  # frames a cancelled stream would run for if cancellation did not work


async def test_break_out_of_async_for_frees_the_slot_and_next_request_succeeds(make_engine) -> None:
    engine = make_engine(max_streams=1)
    async for packet in engine.stream(TEXT, "serena", max_frames=LONG, packet_frames=1):
        if packet.index == 2:
            break
    gc.collect()
    await wait_until(lambda: engine.stats()["running_streams"] == 0)
    stats = engine.stats()
    assert stats["streams_cancelled"] == 1
    assert stats["frames_generated"] < LONG // 4, "GPU work went on after the consumer left"
    await asyncio.sleep(0.2)
    assert engine.stats()["frames_generated"] == stats["frames_generated"]
    pcm = await engine.synthesize(TEXT, "serena", max_frames=4)
    assert len(pcm) == 4 * 1920


async def test_aclose_and_task_cancel_stop_the_stream(make_engine) -> None:
    engine = make_engine(max_streams=2)
    handle = engine.stream(TEXT, "ryan", max_frames=LONG)
    await handle.__anext__()
    await handle.aclose()

    started = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.stream(TEXT, "aiden", max_frames=LONG):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: engine.stats()["running_streams"] == 0)
    assert engine.stats()["streams_cancelled"] == 2
    assert engine.active_streams() == 0
    assert engine.stats()["frames_generated"] < LONG // 2


async def test_busy_engine_refuses_at_once_and_recovers(make_engine) -> None:
    engine = make_engine(max_streams=2, queue_limit=0)
    a = engine.stream(TEXT, "serena", max_frames=6)
    b = engine.stream(TEXT, "ryan", max_frames=6)
    assert engine.load_fraction() == 1.0
    with pytest.raises(EngineBusyError, match=r"2 streams run at once \(its capacity\) and 0 may wait"):
        engine.stream(TEXT, "sohee", max_frames=6)
    await collect(a)
    await collect(b)
    assert engine.active_streams() == 0
    pcm, _ = await collect(engine.stream(TEXT, "sohee", max_frames=2))
    assert len(pcm) == 2 * 1920
    assert engine.stats()["streams_rejected_busy"] == 1


async def test_running_rows_stay_packed_at_the_bottom(make_engine) -> None:
    """When a stream ends, the highest running one moves into its slot, so a step never runs a finished row."""
    engine = make_engine(max_streams=4)
    handles = [engine.stream(TEXT, "serena", max_frames=LONG) for _ in range(3)]
    for handle in handles:
        await handle.__anext__()
    assert sorted(h.metrics.slot for h in handles) == [0, 1, 2]
    top = next(h for h in handles if h.metrics.slot == 2)
    next(h for h in handles if h.metrics.slot == 0).cancel()
    await wait_until(lambda: engine.stats()["running_streams"] == 2 and top.metrics.slot == 0)
    assert sorted(h.metrics.slot for h in handles if h.metrics.status == "running") == [0, 1]
    assert engine.stats()["slot_moves"] >= 1
    newcomer = engine.stream(TEXT, "ryan", max_frames=LONG)
    await newcomer.__anext__()
    assert newcomer.metrics.slot == 2
    for handle in [*handles, newcomer]:
        handle.cancel()
    await wait_until(lambda: engine.stats()["running_streams"] == 0)


async def test_a_moved_stream_keeps_its_exact_audio(make_engine) -> None:
    """Compaction moves a stream's whole state (talker cache and counters, decoder context): it goes on with the
    codes and audio it has alone (batched fp32 math may move a sample by one LSB; a lost state would not)."""
    engine = make_engine(max_streams=3)
    solo = engine.stream(TEXT, "ryan", max_frames=12)
    alone, _ = await collect(solo)
    short = engine.stream(TEXT, "serena", max_frames=3)
    middle = engine.stream(TEXT, "vivian", max_frames=20)
    moved = engine.stream(TEXT, "ryan", max_frames=12)  # slot 2, moves to slot 0 when `short` ends
    (pcm, _), _, _ = await asyncio.gather(collect(moved), collect(short), collect(middle))
    assert engine.stats()["slot_moves"] >= 1
    assert np.array_equal(np.stack(moved._channel.request.codes), np.stack(solo._channel.request.codes))
    assert len(pcm) == len(alone) and np.abs(pcm.astype(np.int32) - alone.astype(np.int32)).max() <= 1


async def test_streams_past_capacity_wait_in_a_bounded_queue(make_engine) -> None:
    """At capacity a new stream waits (arrival order) instead of slowing the running ones; past the queue, busy."""
    engine = make_engine(max_streams=2, queue_limit=1)
    first = [engine.stream(TEXT, "serena", max_frames=8) for _ in range(2)]
    waiting = engine.stream(TEXT, "ryan", max_frames=4)
    with pytest.raises(EngineBusyError, match="TTS_DEEP_STREAM_QUEUE"):
        engine.stream(TEXT, "sohee", max_frames=4)
    assert engine.stats()["running_streams"] <= 2
    results = await asyncio.gather(*(collect(h) for h in [*first, waiting]))
    assert [len(pcm) for pcm, _ in results] == [8 * 1920, 8 * 1920, 4 * 1920]
    assert waiting.metrics.t_admitted >= min(h.metrics.t_done for h in first)
    assert engine.active_streams() == 0


async def test_slow_consumer_is_cut_off_without_stalling_others(make_engine) -> None:
    engine = make_engine(max_streams=4, max_buffered_seconds=1.0)  # 12 frames of unread audio
    slow = engine.stream(TEXT, "serena", max_frames=60, packet_frames=1)
    fast_pcm, _ = await collect(engine.stream(TEXT, "ryan", max_frames=30))
    assert len(fast_pcm) == 30 * 1920
    await wait_until(lambda: slow.metrics.status != "running" and slow.metrics.status != "pending")
    received = 0
    with pytest.raises(StreamOverflowError, match="unread"):
        async for packet in slow:
            received += packet.frames
    assert 0 < received <= 12
    assert slow.metrics.end_reason == "overflow"
    assert engine.stats()["streams_overflowed"] == 1


async def test_a_failing_step_fails_its_streams_and_the_engine_keeps_serving(make_engine) -> None:
    engine = make_engine()
    original = engine.codegen.step
    calls = {"n": 0}

    def flaky(n_rows: int):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected device fault")
        return original(n_rows)

    engine.codegen.step = flaky
    with pytest.raises(EngineStepError, match="injected device fault"):
        await collect(engine.stream(TEXT, "serena", max_frames=10))
    pcm, _ = await collect(engine.stream(TEXT, "serena", max_frames=5))
    assert len(pcm) == 5 * 1920 and engine.healthy
    assert engine.stats()["worker_errors"] == 1


async def test_close_ends_open_streams_and_refuses_new_ones(make_engine) -> None:
    engine = make_engine()
    handle = engine.stream(TEXT, "serena", max_frames=LONG)
    await handle.__anext__()
    await asyncio.get_running_loop().run_in_executor(None, engine.close)
    with pytest.raises(EngineClosedError):
        async for _ in handle:
            pass
    with pytest.raises(EngineClosedError):
        engine.stream(TEXT, "serena")
    assert not engine.healthy


async def test_metrics_of_a_finished_stream(shared_engine) -> None:
    handle = shared_engine.stream(TEXT, "serena", max_frames=6, packet_frames=2)
    pcm, packets = await collect(handle)
    m = handle.metrics.to_dict()
    assert m["status"] == "completed" and m["frames"] == 6 and m["packets"] == len(packets) == 4
    assert m["audio_ms"] == pytest.approx(480.0)
    assert m["ttfa_ms"] > 0 and m["rtf"] > 0 and m["wall_ms"] >= m["ttfa_ms"]
    assert m["codegen_wall_ms"] > 0 and m["decode_wall_ms"] > 0 and m["glue_wall_ms"] >= 0
    assert m["nonfinite_samples"] == 0
    assert np.abs(pcm).max() > 0
    stats = shared_engine.stats()
    assert stats["recent_streams"] >= 1 and stats["recent_ttfa_ms_p50"] > 0 and stats["recent_rtf_p95"] > 0


async def test_metrics_off_skips_step_timing(make_engine) -> None:
    engine = make_engine(metrics=False)
    handle = engine.stream(TEXT, "serena", max_frames=3)
    await collect(handle)
    assert handle.metrics.codegen_wall_ms == 0.0 and handle.metrics.decode_wall_ms == 0.0
    assert handle.metrics.ttfa_ms > 0 and handle.metrics.frames == 3


async def test_finished_and_cancelled_streams_leave_nothing_behind(make_engine) -> None:
    import weakref

    engine = make_engine(max_streams=4)
    refs = []
    for i in range(12):
        handle = engine.stream(TEXT, "serena", max_frames=LONG if i % 3 == 0 else 2)
        refs.append(weakref.ref(handle._channel))
        if i % 3 == 0:
            await handle.__anext__()
            await handle.aclose()
        else:
            await collect(handle)
        del handle
    await wait_until(lambda: engine.stats()["running_streams"] == 0)
    gc.collect()
    assert engine.active_streams() == 0 and engine.stats()["pending_streams"] == 0
    assert all(ref() is None for ref in refs), "the engine still holds finished streams"
