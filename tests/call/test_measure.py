"""callbench's arithmetic: the receiver's jitter buffer between snapshots, the STT time a response holds, and what
the local stack takes from the caller's environment."""

from __future__ import annotations

import pytest

from lab.callbench.bench import receiver_series


def test_receiver_series_is_per_interval_not_cumulative() -> None:
    def stats(delay: float, target: float, emitted: int) -> list[dict]:
        return [{"isAgent": True, "jitterBufferDelay": delay, "jitterBufferTargetDelay": target,
                 "jitterBufferMinimumDelay": target, "jitterBufferEmittedCount": emitted}]  # fmt: skip

    samples = [(2.0, stats(0.0, 0.0, 0)), (4.0, stats(2.0, 2.0, 100)), (6.0, stats(14.0, 4.0, 200)),
               (8.0, stats(14.0, 4.0, 200))]  # fmt: skip
    assert receiver_series(samples) == [
        {"t_s": 4.0, "delay_ms": 20.0, "target_ms": 20.0, "minimum_ms": 20.0},
        {"t_s": 6.0, "delay_ms": 120.0, "target_ms": 20.0, "minimum_ms": 20.0},  # 100 ms over target: seen
    ]  # nothing emitted in the last interval (the agent was silent): no row


def test_stt_sent_at_the_pause_counts_only_after_the_turns_end() -> None:
    """agent/turn/early_stt.py: STT's time inside the hangover is not in the browser's response, so the overhead
    subtracts only what is left of it after the trace's t0."""
    from lab.callbench.measure import match_turns

    points = {"vad_speech_start": -1.5, "vad_speech_end": 0.0, "stt_request": -0.12, "stt_done": 0.23,
              "llm_request": 0.235, "llm_first_token": 0.375, "tts_first_text": 0.39, "tts_first_packet": 0.43,
              "first_frame_published": 0.44}  # fmt: skip
    trace = {"turn_id": "t1", "wall_t0": 1000.0, "complete": True, "points": points}
    log = [{"type": "turn", "userEndAtMs": 999_950.0, "responseMs": 600.0, "turnGapMs": 824.0,
            "agentStartAtMs": 1_000_530.0}]  # fmt: skip
    (row,) = match_turns(log, [trace], hangover_ms=224.0)
    assert row["stt_ms"] == pytest.approx(350.0) and row["stt_after_end_ms"] == pytest.approx(230.0)
    assert row["overhead_ms"] == pytest.approx(600.0 - 230.0 - 140.0 - 40.0)
    assert row["vad_to_stt_ms"] == pytest.approx(-120.0)


def test_the_stack_takes_the_a_b_knobs_but_no_service_from_the_callers_environment(monkeypatch, tmp_path) -> None:
    from lab.callbench.stack import LocalStack

    monkeypatch.setenv("STT_EARLY_MS", "off")
    monkeypatch.setenv("STT_BASE_URL", "http://elsewhere:8000/v1")
    monkeypatch.setenv("LLM_MODEL", "big")
    env = LocalStack(tmp_path).env
    assert env["STT_EARLY_MS"] == "off" and env["STT_BASE_URL"] == "" and "LLM_MODEL" not in env
