"""Trace review on a fixture file: segment statistics, slowest turns, malformed lines, --since, plot, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.tracing import TURN_COMMITTED, Outcome, TraceCollector
from lab import trace_review

FIXTURE = Path(__file__).parent / "fixtures" / "traces_sample.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def test_percentile_matches_linear_interpolation() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert trace_review.percentile(values, 50) == pytest.approx(2.5)
    assert trace_review.percentile(values, 95) == pytest.approx(3.85)
    assert trace_review.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        trace_review.percentile([], 50)


def test_fixture_summary_numbers_and_problems() -> None:
    turns, problems = trace_review.read_traces([FIXTURE])
    summary = trace_review.summarize(turns, problems)
    assert summary["turns"] == 5
    assert summary["sessions"] == 2
    assert summary["complete_turns"] == 4
    assert summary["outcomes"] == {"answered": 2, "interrupted": 2, "error": 1}
    assert summary["turns_with_errors"] == 1
    seg = summary["segments"]
    # e2e = first_frame_published of the four complete turns: 433, 514, 762, 349 ms
    assert seg["e2e"]["count"] == 4
    assert seg["e2e"]["p50"] == pytest.approx(473.5)
    assert seg["e2e"]["max"] == pytest.approx(762.0)
    assert seg["e2e"]["slowest"][0]["turn_id"] == "sim-b-t1"
    # the turn whose frame precedes its packet is left out of that one segment only
    assert seg["tts_first_to_publish"]["count"] == 3
    assert seg["vad_to_stt"]["count"] == 5
    assert seg["cancel_to_silence"]["count"] == 2
    assert seg["cancel_to_silence"]["p50"] == pytest.approx(9.5)
    assert seg["cancel_to_silence"]["max"] == pytest.approx(12.0)
    assert summary["stale_frames_after_cancel"] == 0
    where = [p["where"].rsplit(":", 1)[1] for p in summary["problems"]]
    assert where == ["3", "4", "5", "8", "10"]
    reasons = " | ".join(p["reason"] for p in summary["problems"])
    assert "not JSON" in reasons and "expected a JSON object" in reasons and "'stt_done' is 'soon'" in reasons
    assert "first_frame_published is 1.0 ms before tts_first_packet" in reasons


def test_records_from_the_real_collector_are_read(tmp_path: Path) -> None:
    collector = TraceCollector("sess", tmp_path, clock=lambda: 10.0)
    collector.speech_started(9.0)
    turn = collector.open_turn(10.0)
    for i, point in enumerate(trace_review.POINTS[2:], 1):
        collector.mark(point, 10.0 + i * 0.01)
    collector.mark(TURN_COMMITTED, 10.025)
    turn.outcome = Outcome.ANSWERED
    collector.finish(turn)
    files = list(tmp_path.glob("*.jsonl"))
    turns, problems = trace_review.read_traces(files)
    summary = trace_review.summarize(turns, problems)
    assert problems == []
    assert summary["complete_turns"] == 1
    assert summary["segments"]["e2e"]["p50"] == pytest.approx(70.0, abs=0.01)
    assert summary["segments"]["e2e"]["slowest"][0]["turn_id"] == "sess-t1"


def test_since_filters_by_timestamp() -> None:
    turns, _ = trace_review.read_traces([FIXTURE])
    since = trace_review.parse_since("2026-01-01T00:30:00Z")
    assert {t.session_id for t in turns if t.wall is not None and t.wall >= since} == {"sim-b"}
    now = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    assert trace_review.parse_since("90m", now) == pytest.approx(datetime(2026, 1, 1, 0, 30, tzinfo=UTC).timestamp())
    with pytest.raises(ValueError, match="--since 'yesterday'"):
        trace_review.parse_since("yesterday")


def test_cli_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.trace_review",
            str(FIXTURE),
            "--json",
            "--plot",
            str(png),
            "--since",
            "2026-01-01",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["turns"] == 5 and summary["segments"]["e2e"]["count"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table_and_empty_input(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "trace-review", str(FIXTURE)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cancel→silence" in proc.stdout and "problem " in proc.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n{}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "trace-review", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 1
    assert "bad.jsonl:1: not JSON" in proc.stdout and "bad.jsonl:2: no trace points" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "trace-review", str(FIXTURE), "--since", "soon"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "--since 'soon'" in proc.stderr
