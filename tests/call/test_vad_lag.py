"""The end-of-turn probe (lab/callbench/vad_lag.py) runs end to end on LiveKit's own server: every
question ends a turn, each is split into uplink and Silero's decision, and the live end is the same event
Silero finds offline in the received audio (no timing target is asserted: CPU tests never assert speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.callbench import vad_lag

pytestmark = pytest.mark.call


def test_vad_lag_splits_the_end_of_turn(tmp_path: Path) -> None:
    assert vad_lag.main(["--questions", "3", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "vad_lag.json").read_text())
    assert len(report["rows"]) == 3, report["rows"]
    for row in report["rows"]:
        assert all(row[k] is not None for k in vad_lag.COLUMNS), row
        assert row["uplink_ms"] > 0, row  # a frame arrives after it was sent (one host, one clock)
        assert abs(row["live_minus_offline_ms"]) < 100.0, row  # one and the same END_OF_SPEECH, not a neighbour
    assert report["ends"] == 3 and report["config"]["quiet_db"] == -50.0  # one turn per question, the worker's gate
    assert "| vad_decision_ms |" in (tmp_path / "vad_lag.md").read_text()


def test_questions_are_checked() -> None:
    with pytest.raises(SystemExit):
        vad_lag.main(["--questions", "11", "--out", "/tmp/unused"])


def test_the_quiet_gate_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        vad_lag.main(["--quiet-db", "loud", "--out", "/tmp/unused"])
    assert "--quiet-db='loud' is not allowed (allowed: a level in dBFS" in capsys.readouterr().err
