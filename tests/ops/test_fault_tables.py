"""The drills' reports (lab/faults/report.py and each drill's `summary` and `table`): every committed result in
results/faults/ is rebuilt from its own tries, so a change to a drill's table or summary shows here as a diff
against what a real run wrote, and a drill added to the CLI without a table fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.faults.__main__ import DRILLS, table
from lab.faults.report import markdown, measured, p50, top

RESULTS = Path(__file__).resolve().parents[2] / "results" / "faults"
COMMITTED = sorted(RESULTS.glob("*.json"))


def test_every_drill_of_the_cli_has_committed_results() -> None:
    drills = {json.loads(path.read_text())["drill"] for path in COMMITTED}
    assert drills == set(DRILLS)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_committed_report_renders_to_its_committed_table(path: Path) -> None:
    report = json.loads(path.read_text())
    assert table(report["drill"], report) == path.with_suffix(".md").read_text()
    drill = DRILLS[report["drill"]]
    if hasattr(drill, "summary"):
        assert drill.summary(report["results"]) == report["summary"]


def test_the_table_shape_and_the_figures_of_tries_that_measured_nothing() -> None:
    rows = [{"ms": 120.0}, {"ms": None}, {"ms": 80.0}]
    assert measured(rows, "ms") == [120.0, 80.0]
    assert (p50([]), top([])) == (None, None)
    assert p50([120.0, 80.0]) == 100.0 and top([120.0, 80.0]) == 120.0
    table_ = markdown("Intro.", ["a", "b"], [[1, None]], "Footer.")
    assert table_ == "Intro.\n\n| a | b |\n|---|---|\n| 1 | None |\n\nFooter.\n"
    assert markdown("Intro.", ["a"], []).endswith("|---|\n")
