"""CPU dry run of the load and step-profile benchmarks on the tiny engine: the code paths run and the figures are
computed as documented. Nothing about speed is asserted (CPU CI never measures speed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tts_engine.bench import load as load_bench
from tts_engine.bench.load import StreamTrace, arrival_offsets, summarize_level
from tts_engine.bench.stats import BenchError

SPF = load_bench.SAMPLES_PER_FRAME


def _trace(t_call: float, readies: list[float], frames_per_packet: list[int]) -> StreamTrace:
    trace = StreamTrace(t_call=t_call)
    trace.packets = [(t, n * SPF) for t, n in zip(readies, frames_per_packet, strict=True)]
    return trace


def test_lateness_follows_the_playout_deadline() -> None:
    # first packet (1 frame = 80 ms) at 0.1 s; the next is due when the first has played out (0.18 s)
    on_time = _trace(0.0, [0.10, 0.18, 0.34], [1, 2, 2])
    assert on_time.worst_lateness_ms(0) == pytest.approx(0.0, abs=1e-9)
    late = _trace(0.0, [0.10, 0.23, 0.34], [1, 2, 2])  # 50 ms after its deadline at B = 0
    assert late.worst_lateness_ms(0) == pytest.approx(50.0)
    assert late.worst_lateness_ms(100) < 0  # a 100 ms client buffer absorbs it
    assert late.first_audio_ms() == pytest.approx(100.0)
    assert late.rtf() == pytest.approx(0.34 / (5 * 0.08))


def test_summary_counts_refusals_as_not_viable() -> None:
    ok = _trace(0.0, [0.1, 0.18], [1, 2])
    refused = StreamTrace(t_call=0.0, refused=True)
    summary = summarize_level([ok, refused], frames=3, buffers_ms=[0.0, 100.0])
    assert summary["ran"] == 1 and summary["refused"] == 1
    assert summary["buffer_0ms"]["viability"] == 0.5


def test_summary_refuses_a_broken_fixed_frame_count() -> None:
    with pytest.raises(BenchError, match="fixed frame count"):
        summarize_level([_trace(0.0, [0.1], [1])], frames=3, buffers_ms=[0.0])


def test_arrivals() -> None:
    assert arrival_offsets(4, "window", 2.0, 0.0) == [0.0, 0.5, 1.0, 1.5]
    poisson = arrival_offsets(50, "poisson", 0.0, 10.0, seed=1)
    assert poisson == sorted(poisson) and poisson[0] == 0.0
    with pytest.raises(BenchError):
        arrival_offsets(3, "burst", 1.0, 0.0)


def test_load_levels_run_on_the_tiny_engine(make_engine: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    from tts_engine.bench.load_run import write_load_results
    from tts_engine.runtime import codegen

    monkeypatch.setattr(codegen, "MIN_NEW_TOKENS", 6)  # the bench's fixed frame count
    engine = make_engine(max_streams=4)
    levels = load_bench.run_load(engine, [1, 3], text="Hello there.", speaker=engine.speakers[0],
                                 language="auto", frames=6, arrivals="window", window_s=0.1, rate=0.0,
                                 buffers_ms=[0.0, 100.0], pause_s=0.0, progress=None)
    assert [s["concurrency"] for s in levels] == [1, 3]
    assert all(s["ran"] == s["concurrency"] and s["errors"] == 0 for s in levels)
    assert levels[1]["first_audio_ms"]["p50"] > 0 and 0 <= levels[1]["buffer_0ms"]["viability"] <= 1
    result = {"device": "cpu", "preset": "tiny", "date": "2026-11-24", "command": "test", "torch": "x",
              "frames": 6, "slots": 4, "arrivals": {"mode": "window", "window_s": 0.1}, "levels": levels}
    path = write_load_results(result, tmp_path)
    assert path.is_file() and path.with_suffix(".md").is_file() and path.with_suffix(".png").is_file()


def test_step_profile_and_kernel_table_run_on_the_tiny_engine(make_engine: Callable[..., Any]) -> None:
    from tts_engine.bench.step_profile import kernel_table, profile_rows

    engine = make_engine(max_streams=2)
    rows = profile_rows(engine, [1, 2], text="Hello there.", speaker=engine.speakers[0], language="auto", iters=2)
    assert [r["rows"] for r in rows] == [1, 2]
    for r in rows:
        assert r["predictor_ms"] > 0 and r["talker_ms"] > 0 and r["decoder_ms"] > 0 and r["step_wall_ms"] > 0
        assert r["talker_floor_ms"] >= r["talker_floor_live_kv_ms"] > 0
    table = kernel_table(engine, 2, text="Hello there.", speaker=engine.speakers[0], language="auto", steps=2)
    assert table["top"] and table["kernels_per_step"] > 0
    # the engine still serves afterwards
    assert not any(engine.codegen.active)


def test_attention_variants_run_on_the_tiny_engine(make_engine: Callable[..., Any]) -> None:
    from tts_engine.bench.step_profile import attention_variants

    engine = make_engine(max_streams=2)
    rows = attention_variants(engine, [1, 2], iters=2)
    assert [r["rows"] for r in rows] == [1, 2]
    assert all(r["max_abs_diff"] < 1e-4 for r in rows)  # the same function (fp32 on the CPU)


def test_token_mode_pushes_words_and_reports_the_text_wait(make_engine: Callable[..., Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tts_engine.runtime import codegen

    assert load_bench.stream_words("Hi there", 5) == ["Hi", " there", " Hi", " there", " Hi", " there"]
    monkeypatch.setattr(codegen, "MIN_NEW_TOKENS", 6)  # the bench's fixed frame count
    engine = make_engine(max_streams=4)
    levels = load_bench.run_load(engine, [2], text="Hello there, how are you?", speaker=engine.speakers[0],
                                 language="auto", frames=6, arrivals="window", window_s=0.05, rate=0.0,
                                 buffers_ms=[0.0], pause_s=0.0, progress=None, text_input="tokens",
                                 word_interval_ms=5.0)
    (level,) = levels
    assert level["ran"] == 2 and level["errors"] == 0
    assert 0 < level["text_wait_ms"]["p50"] <= level["first_audio_ms"]["p95"]
    assert level["after_text_ms"]["p50"] > 0 and level["engine"]["steps"] > 0
    assert "worker_step_ms" in level["engine"] and "text waits" in load_bench.format_level(level)


def test_the_gate_names_what_a_level_missed() -> None:
    ok = {"concurrency": 256, "client_buffer_ms": 0.0, "first_audio_ms": {"p95": 120.0}, "refused": 0, "errors": 0,
          "buffer_0ms": {"late_streams": 0}}
    late = {**ok, "concurrency": 128, "first_audio_ms": {"p95": 180.0}, "buffer_0ms": {"late_streams": 3}}
    refused = {"concurrency": 512, "client_buffer_ms": 100.0, "refused": 4, "errors": 0}
    assert load_bench.gate_failures([ok], 150.0) == []
    assert load_bench.gate_failures([late, refused], 150.0) == [
        "N=128 (whole text, told 0 ms): 3 stream(s) with a late packet at B = 0 ms",
        "N=128 (whole text, told 0 ms): first audio P95 180.0 ms > 150 ms",
        "N=512 (whole text, told 100 ms): 4 refused, 0 failed",
    ]
