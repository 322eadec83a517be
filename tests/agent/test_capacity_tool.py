"""lab/capacity.py's reading of a run: levels from the worker's stats lines and traces, the knee, the
capacity and the settings it recommends. The run itself (real stack, real callers) is the tool; this checks the
arithmetic on records in the stats file's and the traces' own shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import capacity


def stats_row(t: float, cores: float, share: float, lag_p95: float = 1.0) -> dict:
    return {
        "t_wall": t, "interval_s": 1.0, "cpu_s": t, "cpu_cores": cores, "cpu_python_cores": cores / 2,
        "cpu_usable": cores / share, "host_busy": 0.9, "threads": {}, "rss_mb": 900.0, "calls": 1,
        "loop_lag_ms": {"loops": 1, "samples": 20, "p50": 0.5, "p95": lag_p95, "p99": lag_p95, "max": lag_p95 * 2,
                        "late_loops": 0},
        "gc": {"count": 2, "gen2": 0, "ms": 0.4, "max_ms": 0.3}, "engine": {"active": 0, "capacity": 16},
        "load": 0.1, "load_terms": {"calls": 0.0, "engine": 0.0, "cpu": 0.1}, "sampler_ms": 2.0,
    }  # fmt: skip


def turn(t: float, e2e: float, gaps: int = 0, errors: tuple[str, ...] = ()) -> dict:
    return {
        "wall_t0": t, "segments_ms": {"e2e": e2e}, "outcome": "error" if errors else "answered",
        "playout_gaps": gaps, "playout_gap_ms": 30.0 * gaps, "errors": list(errors),
    }  # fmt: skip


def run_of(levels: dict[int, tuple[float, float, list[dict]]]) -> list[dict]:
    """calls -> (worker cores, their share of its cores, turns at t offsets 0..9 in the level): the level reports."""
    stats, traces, reports = [], [], []
    for calls, (cores, share, turns) in levels.items():
        t0 = 1000.0 + 100 * calls
        stats += [stats_row(t0 + s, cores, share) for s in range(10)]
        traces += [{**t, "wall_t0": t0 + t["wall_t0"]} for t in turns]
        reports.append(capacity.level_report(calls, t0, t0 + 10, stats, traces))
    return reports


def test_a_level_reads_its_own_window() -> None:
    (zero, one) = run_of({0: (0.05, 0.1, []), 1: (0.4, 0.3, [turn(1, 500), turn(5, 700, gaps=1)])})
    assert zero["seconds"] == 10 and zero["turns"] == 0 and zero["response_p95_ms"] is None
    assert one["cpu_cores"] == 0.4 and one["cpu_share"] == 0.3 and one["cpu_python_cores"] == 0.2
    assert one["turns"] == 2 and one["turns_with_gaps"] == 1 and one["gap_ms"] == 30.0
    assert one["response_p50_ms"] == 600.0 and one["loop_lag_p95_ms"] == 1.0 and one["late_loop_seconds"] == 0


def test_the_knee_is_the_first_level_that_breaks_a_criterion() -> None:
    ok = [turn(1, 500), turn(4, 520)]
    levels = run_of({
        0: (0.05, 0.1, []), 1: (0.4, 0.30, ok), 2: (0.75, 0.55, ok), 3: (1.1, 0.80, [turn(1, 540), turn(3, 600)]),
        4: (1.4, 0.95, [turn(1, 900, gaps=2)]),
    })  # fmt: skip
    knee, why = capacity.find_knee(levels, response_slack_ms=50)
    assert knee == 3 and "response P95" in why  # 597 > 520 + 50 (one call's P95 is 519)
    summary = capacity.summarise(levels, knee, why, max_calls=4)
    assert summary["capacity_calls"] == 2
    assert summary["cpu_per_call"] == pytest.approx(0.35, abs=0.01)
    assert summary["cpu_idle"] == pytest.approx(0.05, abs=0.01)
    assert summary["cpu_limit"] == pytest.approx((0.55 + 0.80) / 2, abs=0.01)
    assert capacity.find_knee(levels[:3], 1000) == (None, "")
    gaps = run_of({1: (0.4, 0.3, ok), 2: (0.8, 0.6, [turn(1, 510, gaps=1)])})
    assert capacity.find_knee(gaps, 1000)[0] == 2
    failed = run_of({1: (0.4, 0.3, ok), 2: (0.8, 0.6, [turn(1, 510, errors=("llm: timeout",))])})
    assert capacity.find_knee(failed, 1000) == (2, "1 failed turn(s)")


def test_no_knee_extrapolates_the_cpu_limit_and_the_report_says_what_to_set() -> None:
    ok = [turn(1, 500)]
    levels = run_of({0: (0.05, 0.1, []), 1: (0.4, 0.3, ok), 2: (0.75, 0.5, ok)})
    summary = capacity.summarise(levels, None, "", max_calls=2)
    assert summary["capacity_calls"] == 2 and summary["knee_reason"] == "none up to 2 calls"
    assert summary["cpu_limit"] == pytest.approx(0.6)  # 0.5 + half of the last step (0.2)
    report = {"date": "d", "command": "c", "host": {"cpus": 2, "cpu_model": "m"}, "git": "g",
              "settings": {"hold_s": 10, "gap_s": 8}, "levels": levels, "summary": summary}  # fmt: skip
    assert "`AGENT_MAX_SESSIONS=2 AGENT_CPU_LIMIT=0.6`" in capacity.markdown(report)
    broken = capacity.summarise(run_of({1: (0.4, 0.3, [turn(1, 500, gaps=3)])}), 1, "gaps", max_calls=1)
    assert broken["capacity_calls"] == 0 and broken["cpu_limit"] is None


def test_read_jsonl_skips_a_line_cut_by_the_workers_exit(tmp_path: Path) -> None:
    path = tmp_path / "stats.jsonl"
    path.write_text('{"t_wall": 1}\n{"t_wall": 2}\n{"t_wa')
    assert capacity.read_jsonl(path) == [{"t_wall": 1}, {"t_wall": 2}]
    assert capacity.read_jsonl(tmp_path / "missing.jsonl") == []


def test_bad_arguments_are_refused_with_the_name(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, name in ((["--max-calls", "0"], "--max-calls"), (["--hold", "5"], "--hold"), (["--env", "X"], "--env")):
        with pytest.raises(SystemExit) as exc:
            capacity.main([*argv, "--out", "/tmp/unused"])
        assert exc.value.code == 2 and name in capsys.readouterr().err
