"""The transport floor (lab/callbench/floor.py) runs end to end: the real page in Chromium, LiveKit's own
server and the echo agent (an SDK participant of kind agent that answers every end of speech at once and stops
on a new onset). Every turn is heard and split into uplink and downlink; the barge-ins are heard and split at
the echo's cut. No timing is asserted (CPU tests never assert speed): the figures are what the tool reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.callbench import floor

pytestmark = [pytest.mark.browser, pytest.mark.call]


def test_floor_measures_turns_and_barge_ins(tmp_path: Path) -> None:
    assert floor.main(["--cycles", "3", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "floor.json").read_text())
    assert report["counts"]["turns_heard"] == 3 and report["counts"]["page_problems"] == []
    assert report["counts"]["page_agent_state"] in floor.ECHO_STATES, report["counts"]  # the echo's state reached it
    for row in report["rows"]["turns"]:
        assert all(row[k] is not None for k in ("uplink_end_lag_ms", "echo_decision_ms", "publish_to_heard_ms")), row
        assert row["echo_decision_ms"] < 100.0, row  # the echo answers at its own end of speech, no model between
        assert row["publish_to_heard_ms"] > 0 and row["response_ms"] > 0, row
    barges = report["rows"]["barge_ins"]
    assert len(barges) >= 1, report["raw"]
    assert all(b["cut_to_silence_ms"] is not None and b["cut_to_silence_ms"] > 0 for b in barges), barges
    assert "| response_ms |" in (tmp_path / "floor.md").read_text()


def test_echo_vad_follows_the_page_rules() -> None:
    vad = floor.EnergyVad(threshold_db=-50, min_speech_ms=60, hangover_ms=200)
    events = [(t, vad.update(-20.0 if 100 <= t < 700 else -90.0, float(t))) for t in range(0, 1200, 10)]
    fired = [(t, e) for t, e in events if e is not None]
    assert fired == [(160, "speech_start"), (890, "speech_end")]  # 60 ms after onset; 200 ms after the last loud


def test_match_pairs_each_heard_reply_with_its_cause() -> None:
    """The echo may decide an end of speech before the page's own VAD does (it hears the decoded uplink, the
    page its microphone): the CI run of 0c3cd42 had one turn where it did by more than the old 50 ms window
    and the turn lost its split. Matching by cause keeps it, with a negative uplink lag."""
    log = [
        {"type": "turn", "userEndAtMs": 1_000.0, "agentStartAtMs": 1_140.0, "responseMs": 140.0},
        {"type": "turn", "userEndAtMs": 5_000.0, "agentStartAtMs": 5_097.0, "responseMs": 97.0},
    ]
    events = [
        {"type": "user_end", "at_ms": 1_020.0}, {"type": "published", "at_ms": 1_021.0},
        {"type": "user_end", "at_ms": 4_930.0}, {"type": "published", "at_ms": 4_931.0},
    ]  # fmt: skip
    turns, _ = floor.match(log, events)
    assert [t["uplink_end_lag_ms"] for t in turns] == [20.0, -70.0]
    assert [t["echo_decision_ms"] for t in turns] == [1.0, 1.0]
    assert [t["publish_to_heard_ms"] for t in turns] == [119.0, 166.0]
