"""A drill's tries (lab/faults/tries.py): each try graded and printed, the report in the shape the drills' tables
read (each drill's `table`, lab/faults/report.py)."""

from __future__ import annotations

import pytest

from lab.faults.tries import repeat


def test_each_try_is_graded_printed_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    report = repeat("demo", 3, lambda i: {"try": i, "ms": 100 * i}, lambda r: r["ms"] != 200, lambda r: f"{r['ms']} ms")
    assert report["tries"] == 3 and report["passed"] == 2
    assert [(r["try"], r["ok"]) for r in report["results"]] == [(1, True), (2, False), (3, True)]
    assert capsys.readouterr().out.splitlines() == [
        "[faults] demo try 1/3: 100 ms; ok", "[faults] demo try 2/3: 200 ms; FAIL", "[faults] demo try 3/3: 300 ms; ok"]
