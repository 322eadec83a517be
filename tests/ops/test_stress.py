"""A short barge-in stress run (20 rounds) on the simulated call with the real engine on the tiny checkpoint.

Asserts correctness only (CPU tests never assert speed): every round's reply is cut by VAD-detected user
speech, no error, no stale frame after a cancel, no stuck state, no asyncio task left after the call, no
engine slot left open, and the JSON + plot are written. The latency target (cancel→silence P95 <= 20 ms)
is in the JSON's `targets`, checked by the full 200-round run, not here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="the simulated user speaks with espeak-ng")
def test_stress_20_rounds(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "stress"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.stress",
            "--rounds",
            "20",
            "--out",
            str(out),
            "--model-dir",
            str(tiny_checkpoint),
            "--max-delay-ms",
            "800",
            "--seed",
            "7",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    summary_path = out / "stress.json"
    assert summary_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    detail = json.dumps({k: summary[k] for k in ("error_lines", "stuck", "leaked")}, indent=1)
    assert summary["cut_rounds"] == 20
    assert summary["rounds_interrupted"] == 20, detail
    assert summary["user_turns"] == 21
    assert summary["errors"] == 0, detail
    assert summary["stale_frames_after_cancel"] == 0
    assert summary["stuck_states"] == 0, detail
    assert summary["leaked_tasks"] == 0, detail
    assert summary["engine_slots_in_use_at_end"] == 0
    assert summary["illegal_transitions"] == 0
    assert summary["cancel_to_silence_ms"]["count"] == 20
    assert summary["rss_mb"]["start"] > 0 and summary["rss_mb"]["end"] > 0
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 21 and all(t["delay_ms"] is not None for t in turns[:20])
    assert (out / "stress.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "traces.jsonl").read_text().splitlines()) == 21
    # exit status: 0 only when every target (the latency one included) passes
    assert proc.returncode == (0 if summary["pass"] else 1)


def test_bad_arguments_are_named() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lab.stress", "--rounds", "0", "--out", "/tmp/unused-stress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--rounds 0 is out of range" in proc.stderr


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="the simulated user speaks with espeak-ng")
def test_stress_precise_instants(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """One round per milestone (speech created, LLM request, LLM first token, first segment, first packet,
    frames 1/2/4/8), each cut by the public interrupt() inside the callback that reports it (0 ticks)."""
    out = tmp_path / "instants"
    proc = subprocess.run(
        [sys.executable, "-m", "lab.stress", "--rounds", "9", "--instants", "--out", str(out),
         "--model-dir", str(tiny_checkpoint)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    summary_path = out / "instants.json"
    assert summary_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    detail = json.dumps({k: summary[k] for k in ("stuck", "untruthful", "error_log")}, indent=1)
    assert summary["rounds"] == 9 and summary["rounds_interrupted"] == 9, detail
    assert all(cell["zero_ticks"] == 1 for cell in summary["coverage"].values()), summary["coverage"]
    for key in ("stuck_states", "stale_frames_after_cancel", "untruthful_outcomes", "turn_errors",
                "leaked_tasks", "engine_slots_in_use_at_end", "error_log_lines"):
        assert summary[key] == 0, (key, detail)
    assert summary["pass"] and proc.returncode == 0
    rounds = [json.loads(line) for line in (out / "instants.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rounds] == ["interrupted"] * 9
