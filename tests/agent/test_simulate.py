"""The simulated call, end to end on the real engine (tiny checkpoint): VAD on espeak-ng speech, OmniSTT and
the LLM plugin against the fake server, QwenTTS, RtcAudioOutput, traces. No wall-clock targets here (CPU
tests never assert speed); the structure of the result is what must hold."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from lab.simulate import SimOptions, load_vad, run_call, summarize

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "espeak-ng"], capture_output=True).returncode != 0, reason="needs espeak-ng"
)


def sim_config() -> AgentConfig:
    return dataclasses.replace(AgentConfig.from_env({}), aec_warmup_s=0.0)


async def test_three_turn_call(sim_backend: Any, tmp_path: Path) -> None:
    cfg = sim_config()
    opts = SimOptions(turns=3, config=cfg, speech_cache=tmp_path / "speech", turn_timeout_s=40)
    result = await run_call(opts, backend=sim_backend, vad=load_vad(cfg))
    summary = summarize(result, expected_turns=3)
    assert summary["errors"] == 0, summary["error_lines"]
    assert summary["trace_complete"] == 1.0
    assert summary["frame_ms"] == {"min": 20.0, "max": 20.0}
    assert summary["interruptions"] == 0 and summary["illegal_transitions"] == 0
    assert summary["e2e_ms"]["p50"] is not None and summary["tts_first_to_publish_ms"]["p95"] is not None
    assert [t["outcome"] for t in result.traces] == ["answered"] * 3
    for trace in result.traces:
        points = dict(trace["points"])
        sent, committed = points.pop("stt_request"), points.pop("turn_committed")
        assert list(points.values()) == sorted(points.values())
        # the early transcriber sent the words at the pause, inside the hangover (agent/turn/early_stt.py)
        assert points["vad_speech_start"] < sent < 0.0 <= points["stt_done"]
        # the answer may be prepared before the commit (TURN_HANDLING=ours), never heard before it
        assert points["stt_done"] <= committed <= points["first_frame_published"]
        assert trace["complete"] and trace["turn_decision"]["wait"] in ("short", "medium", "long")
        assert trace["tts_segments"] >= 1 and trace["user_text_chars"] > 0
    assert all(t.frames > 0 for t in result.turns)


def test_simulate_command_with_barge_in(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """Under TURN_HANDLING=vad: half a second of speech over the agent cuts it (under `ours` the barge-in is judged
    by its words first; tests/agent/test_duplex.py and the conversation benchmark cover that)."""
    out = tmp_path / "sim"
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "simulate", "--turns", "3", "--barge-in", "--out", str(out),
         "--model-dir", str(tiny_checkpoint), "--max-frames-per-segment", "6"],
        capture_output=True, text=True, timeout=180,
        env={**__import__("os").environ, "TTS_DEEP_STREAM_DEVICE": "cpu", "TURN_HANDLING": "vad"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("turns", "errors", "trace_complete", "frame_ms", "tts_first_to_publish_ms",
                "cancel_to_silence_ms", "stale_frames_after_cancel", "e2e_ms"):
        assert key in summary
    assert summary["turns"] == 3 and summary["errors"] == 0
    assert summary["trace_complete"] == 1.0
    assert summary["frame_ms"] == {"min": 20.0, "max": 20.0}
    assert summary["interruptions"] == 1 and summary["stale_frames_after_cancel"] == 0
    assert summary["cancel_to_silence_ms"]["p95"] is not None
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert [t["outcome"] for t in traces] == ["interrupted", "answered", "answered"]
    (irq,) = traces[0]["interruptions"]
    assert irq["source"] == "vad" and irq["stale_frames_after_cancel"] == 0
    assert irq["interrupt_detected"] > traces[0]["points"]["first_frame_published"]


async def test_a_harness_timeout_says_where_the_call_stands(sim_backend: Any, tmp_path: Path) -> None:
    """A wait that runs out (here: far too short for any reply) is reported with the controller's and LiveKit's
    states, the pending apology, the queued audio and the open turn's points, so a flaky timeout in CI can be
    told apart from a stuck call without rerunning it."""
    cfg = sim_config()
    opts = SimOptions(turns=1, config=cfg, speech_cache=tmp_path / "speech", turn_timeout_s=0.05)
    result = await run_call(opts, backend=sim_backend, vad=load_vad(cfg))
    assert result.errors, "a 50 ms wait for a whole turn cannot succeed"
    line = result.errors[0]
    for part in ("controller ", "livekit ", "apology pending ", "queued "):
        assert part in line, line
