"""CPU checks of the benchmark command: it refuses clearly without CUDA; its pure helpers are right.

No timing is asserted here (CPU CI never measures speed); the benchmarks themselves run on the GPU machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tts_engine.__main__ import main
from tts_engine.bench.cli import merge_results, render_results_md
from tts_engine.bench.stats import device_slug, percentile
from tts_engine.runtime.step_graphs import StepGraphs, buckets_for

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")


@pytest.mark.parametrize("mode", ["all", "ours", "peer", "codegen", "decoder", "stream"])
def test_bench_refuses_without_cuda(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", mode, "--model-dir", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "need a CUDA GPU" in err and "torch.cuda.is_available() is False" in err


def test_bench_rejects_bad_options_before_anything_else(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "ours", "--runs", "0"]) == 2
    assert "--runs=0 is out of range" in capsys.readouterr().err


def test_percentile_matches_numpy_linear() -> None:
    import numpy as np

    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_device_slug_and_buckets() -> None:
    assert device_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert device_slug("Some New GPU") == "some-new-gpu"
    assert buckets_for(1) == [1]
    assert buckets_for(16) == [1, 2, 4, 8, 16]
    assert buckets_for(12) == [1, 2, 4, 8, 12]
    assert buckets_for(256) == [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256]
    assert buckets_for(500)[-5:] == [256, 320, 384, 448, 500]
    for n in range(17, 513):  # no step runs far more rows than are active
        bucket = next(b for b in buckets_for(512) if b >= n)
        assert bucket <= n * 1.25 + 15, (n, bucket)


def test_step_graphs_on_cpu_run_eagerly_and_count_why() -> None:
    calls: list[int] = []

    class FakeGen:
        sampling = False

        def step(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
            calls.append(rows)
            return torch.zeros(rows, 16, dtype=torch.long), torch.zeros(rows, dtype=torch.bool)

    graphs = StepGraphs(FakeGen(), None, max_slots=8, device=torch.device("cpu"), talker=True, predictor=True,
                        decoder_graph=True)
    graphs.capture(lambda rows: None, lambda: None)
    assert graphs.rows_for(3) == 3  # no bucketing on the CPU
    codes, done = graphs.codegen_step(3)
    assert codes.shape == (3, 16) and calls == [3]
    stats = graphs.stats.as_dict()
    assert stats["graph_steps"] == 0 and stats["eager_steps"] == 1
    assert stats["fallback_reasons"] == {"codegen: device is not CUDA": 1}


def _part(rtf: float, ttfa: float) -> dict:
    summary = {"rtf_p50": rtf, "rtf_p95": rtf * 1.1, "ttfa_ms_p50": ttfa, "ttfa_ms_p95": ttfa * 1.2,
               "frame_ms_p50": 6.0, "decode_ms_per_frame": 0.8, "load_s": 9.0, "gpu_mem_gib": 3.5}
    return {"summary": summary}


def test_results_schema_and_markdown(tmp_path: Path) -> None:
    peer = {"name": "faster-qwen3-tts", "version": "0.5.4", "load_s": 5.0, "gpu_mem": {"max_reserved_gib": 2.5},
            "modes": {"chunk8": {"rtf": {"p50": 0.28, "p95": 0.3}, "ttfa_ms": {"p50": 240.0, "p95": 290.0}},
                      "chunk1": {"rtf": {"p50": 0.5, "p95": 0.55}, "ttfa_ms": {"p50": 90.0, "p95": 140.0}}}}
    result = merge_results(device="NVIDIA H100 80GB HBM3", torch_version="2.11.0", preset="0.6b", command="cmd",
                           ours=_part(0.07, 20.0), eager=_part(0.6, 80.0), peer=peer)
    for key in ("device", "date", "torch", "preset", "command", "ours", "ours_eager", "peer", "speedup_rtf",
                "speedup_ttfa"):
        assert key in result
    assert set(result["ours"]) == {"rtf_p50", "rtf_p95", "ttfa_ms_p50", "ttfa_ms_p95", "frame_ms_p50",
                                   "decode_ms_per_frame", "load_s", "gpu_mem_gib"}
    assert set(result["peer"]) >= {"name", "version", "rtf_p50", "ttfa_ms_p50", "ttfa_ms_p95"}
    assert result["speedup_rtf"] == pytest.approx(4.0)
    assert result["speedup_ttfa"] == pytest.approx(12.0)
    assert result["targets"]["rtf_p50 <= 0.10"] is True
    (tmp_path / "h100.json").write_text(json.dumps(result))
    md = render_results_md(tmp_path)
    assert "h100.json" in md and "faster-qwen3-tts chunk1" in md and "x4.0" in md


def test_results_markdown_tabulates_load_results_beside_batch_one(tmp_path: Path) -> None:
    """`bench load` writes <gpu>_load.json into the same folder: RESULTS.md gets one row per level for it (it has
    no `ours`/`peer` keys, which the batch-1 tables need), and a run's progress file is left out."""
    result = merge_results(device="NVIDIA H100 80GB HBM3", torch_version="2.11.0", preset="0.6b", command="cmd",
                           ours=_part(0.07, 20.0), eager=_part(0.6, 80.0), peer=None)
    (tmp_path / "h100.json").write_text(json.dumps(result))
    level = {"concurrency": 256, "client_buffer_ms": 100.0, "streams": 256, "ran": 256, "refused": 0,
             "first_audio_ms": {"p50": 60.7, "p95": 111.2, "p99": 124.6}, "rtf": {"p50": 0.65, "p95": 0.67},
             "buffer_0ms": {"viability": 1.0, "late_streams": 0, "worst_lateness_ms": 0.0},
             "buffer_100ms": {"viability": 1.0, "late_streams": 0, "worst_lateness_ms": 0.0}, "audio_s_per_s": 302.7}
    load = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24", "torch": "2.11.0", "preset": "0.6b",
            "command": "python -m tts_engine bench load", "frames": 100, "slots": 512, "capacity": 320,
            "levels": [level]}
    (tmp_path / "h100_load.json").write_text(json.dumps(load))
    (tmp_path / "h100_load.partial.json").write_text(json.dumps({**load, "levels": [{**level, "concurrency": 7}]}))
    md = render_results_md(tmp_path)
    assert "## h100_load.json: NVIDIA H100 80GB HBM3, preset 0.6b, 2026-11-24 (bench load)" in md
    assert "| 256 | whole | 100.0 | 60.7 | 111.2 | 124.6 | - | 0.65 | 0.67 | 1.0 | 1.0 | 0 | 0.0 | 302.7 | 0 |" in md
    assert "capacity 320" in md and "h100.json" in md
    assert "partial" not in md and "| 7 |" not in md


def test_stream_measurement_splits_ttfa_into_admission_and_first_step(make_engine: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The streaming measurement's code path on a tiny CPU engine (no timing asserted): TTFA = admission + first
    step, per run, and the fixed frame count holds with the bench's EOS mask."""
    from tts_engine.bench.ours import measure_stream
    from tts_engine.runtime import codegen

    frames = 5
    monkeypatch.setattr(codegen, "MIN_NEW_TOKENS", frames)  # what the bench's _force_fixed_frames does
    engine = make_engine()
    out = measure_stream(engine, "Hello there.", engine.speakers[0], "auto", frames=frames, runs=1, warmup=0)
    ttfa, admission, first = (out[k]["p50"] for k in ("ttfa_ms", "admission_ms", "first_step_ms"))
    assert admission > 0 and first > 0
    assert admission + first == pytest.approx(ttfa, abs=1e-3)  # summaries are rounded to 4 decimals
