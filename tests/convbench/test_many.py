"""The many-calls runner's arithmetic (lab/convbench/many.py) on synthetic calls, and the reader of the
worker's stats file (worker_stats.py) on a fixture in the worker's format (one JSON object a second)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.convbench import many
from lab.convbench import worker_stats as stats_file
from lab.convbench.script import FORMAT, Turn, load_script
from lab.convbench.timeline import ItemRecord, Play, Timeline
from tests.convbench.wavs import tone

T0 = 1_800_000_000.0


def call_with_a_gap() -> Timeline:
    """One question (ends at 2.0 s), the agent speaks 3.0-6.0 s with a 60 ms hole at 4.0 s and no frame at all
    between 5.00 and 5.08 s; a second question (ends at 9.0 s) is never answered."""
    t = T0 + np.arange(1200) * 0.01
    db = np.full(t.size, -100.0)
    db[(t >= T0 + 3.0) & (t < T0 + 6.0)] = -18.0
    db[(t >= T0 + 4.0) & (t < T0 + 4.06)] = -100.0
    keep = ~((t > T0 + 5.0) & (t < T0 + 5.08))
    tl = Timeline(script="q", room="r", agent_t=t[keep].tolist(), agent_db=db[keep].tolist(), ended=T0 + 12.0)
    tl.states = [(T0 + 2.5, "thinking"), (T0 + 2.95, "speaking"), (T0 + 6.05, "listening")]
    for i, end in enumerate((2.0, 9.0)):
        tl.items.append(ItemRecord(f"q{i}", "turn", played=True))
        tl.plays.append(Play(f"q{i}", "turn", 0, T0 + end - 1.0, T0 + end))
    tl.rtc = [{"t": T0, "concealed_samples": 100, "silent_concealed_samples": 100},
              {"t": T0 + 10, "concealed_samples": 4900, "silent_concealed_samples": 1300}]  # fmt: skip
    return tl


def test_a_call_row_counts_responses_gaps_stalls_and_concealment() -> None:
    row = many.call_row(call_with_a_gap(), many.DEFAULT_THRESHOLDS)
    traces = [{"session_id": "r-job1", "outcome": "answered"},
              {"session_id": "r-job1", "outcome": "interrupted", "errors": ["stt: ModuleNotFoundError: jiter"]},
              {"session_id": "other-job2", "outcome": "error", "errors": ["tts: x"]}]  # fmt: skip
    traced = many.traced_turns(traces, "r")  # the second turn failed; its apology was cut by the caller
    assert traced == {"outcomes": {"answered": 1, "interrupted": 1}, "failed_turns": 1, "answered_turns": 1,
                      "traced_errors": ["stt: ModuleNotFoundError: jiter"]}  # fmt: skip
    row.update(traced)
    assert row["response_ms"] == [pytest.approx(1000.0, abs=1.0), None] and row["unanswered"] == 1
    assert row["replies"] == 1 and row["replies_with_gap"] == 1
    assert row["gaps_ms"] == [pytest.approx(60.0)] and row["stalls_ms"] == [pytest.approx(80.0, abs=1.0)]
    assert row["concealed_ms"] == pytest.approx(75.0)  # (4800 - 1200) samples at 48 kHz
    assert not row["failed"]
    summary = many.level_summary(1, [row], [{"publish_late_ms": {"p99": 1.0, "max": 2.0}}], [{"samples": 0}])
    assert summary["response_ms"]["n"] == 1 and summary["unanswered_turns"] == 1 and summary["calls_with_gap"] == 1
    assert summary["gaps"] == 1 and summary["stalls"] == 1 and summary["concealed_ms_total"] == 75.0
    assert summary["failed_turns"] == 1 and summary["turn_outcomes"] == {"answered": 1, "interrupted": 1}
    assert "| 1 | 0 | 1/2 | 1 |" in many.markdown({"device": "d", "date": "2026-11-28", "command": "c",
                                               "config": {"stand_in": "local", "caller_procs": 1,
                                                          "arrival_window_s": 1.0},
                                               "levels": [summary]})  # fmt: skip


def test_a_failed_call_is_counted() -> None:
    tl = Timeline(script="q", room="r", errors=["TimeoutError: the agent never joined"])
    row = many.call_row(tl, many.DEFAULT_THRESHOLDS)
    assert row["failed"] and row["turns"] == 0 and row["concealed_ms"] is None


def test_first_turns_keeps_the_items_cued_on_the_last_kept_turn(tmp_path: Path) -> None:
    tone(tmp_path / "a.wav")
    items = []
    for i in range(3):
        items += [{"id": f"q{i}", "kind": "turn", "clips": [{"wav": "a.wav"}]},
                  {"id": f"q{i}.x", "kind": "barge_in", "wav": "a.wav", "text": "stop",
                   "at": {"after_agent_audio_ms": 500}}]  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps({"format": FORMAT, "items": items}))
    script = load_script(tmp_path / "s.json")
    assert [i.id for i in many.first_turns(script, 2).items] == ["q0", "q0.x", "q1", "q1.x"]
    assert many.first_turns(script, None) is script
    assert sum(isinstance(i, Turn) for i in many.first_turns(script, 5).items) == 3


def test_bad_levels_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("two", "0", "1,2000"):
        with pytest.raises(SystemExit):
            many.main(["--calls", bad, "--out", "/tmp/unused"])
    assert "--calls='1,2000': each level must be in 1..1024" in capsys.readouterr().err


STATS = [  # the worker's format (docs/operations.md "The worker's stats file")
    {"t_wall": T0 + 1, "interval_s": 1.0, "cpu_s": 10.0, "cpu_cores": 0.8, "cpu_python_cores": 0.5, "cpu_usable": 2.0,
     "host_busy": 0.6, "threads": {"MainThread": {"n": 1, "cores": 0.3}, "job_thread": {"n": 2, "cores": 0.4}},
     "loop_lag_ms": {"loops": 2, "samples": 40, "p50": 1.0, "p95": 3.0, "p99": 8.0, "max": 12.0, "late_loops": 0},
     "gc": {"count": 3, "gen2": 0, "ms": 1.5, "max_ms": 0.9}, "rss_mb": 900.0, "calls": 2,
     "engine": {"active": 1, "capacity": 16}, "load": 0.4, "load_terms": {}, "sampler_ms": 0.7},
    {"t_wall": T0 + 2, "cpu_cores": 1.2, "cpu_usable": 2.0, "threads": {"job_thread": {"n": 2, "cores": 0.8}},
     "loop_lag_ms": {"p99": 25.0, "max": 60.0, "late_loops": 1}, "gc": {"count": 1, "ms": 4.0, "max_ms": 4.0},
     "rss_mb": 950.0, "calls": 3, "livekit_jobs": 4, "engine": {"active": 2, "capacity": 16}, "load": 0.7},
    {"t_wall": T0 + 9, "cpu_cores": 2.0},  # outside the window
]  # fmt: skip


def test_the_worker_stats_file_is_read_and_summarized(tmp_path: Path) -> None:
    path = tmp_path / "stats.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in STATS) + '\n[1, 2]\n{"t_wall": 1')  # a torn last line
    records = stats_file.read(path)
    assert len(records) == 3
    s = stats_file.summarize(records, T0, T0 + 5)
    assert s["samples"] == 2 and s["cpu_cores"] == {"mean": 1.0, "max": 1.2, "usable": 2.0, "share": 0.5}
    assert s["threads"] == {"job_thread": 0.6, "MainThread": 0.15}
    assert s["loop_lag_ms"] == {"p99_max": 25.0, "max": 60.0, "late_loops_max": 1.0}
    assert s["gc"] == {"count": 4.0, "ms": 5.5, "max_ms": 4.0} and s["rss_mb_max"] == 950.0
    assert s["calls_max"] == 3.0 and s["engine_active_max"] == 2.0 and s["load_max"] == 0.7
    assert s["livekit_jobs_max"] == 4.0  # LiveKit's count beside ours: a job not yet connected is only in it
    assert s["cpu_python_cores_mean"] == 0.5  # a key only one record has
    assert stats_file.summarize(records, T0 + 100, T0 + 200) == {"samples": 0}
    assert stats_file.read(tmp_path / "absent.jsonl") == [] and stats_file.read(None) == []


def test_caller_processes_return_their_calls_and_health_even_when_calls_fail(tmp_path: Path) -> None:
    """Two caller processes (spawned) against a token server that is not there: each call fails with its reason,
    and each process still reports its pacing (no LiveKit needed)."""
    tone(tmp_path / "a.wav")
    (tmp_path / "s.json").write_text(json.dumps({"format": FORMAT, "items": [
        {"id": "q", "kind": "turn", "clips": [{"wav": "a.wav"}]}]}))  # fmt: skip
    timelines, health = many.run_calls("http://127.0.0.1:9/", tmp_path / "s.json", 3, window_s=0.5, procs=2,
                                       turns=None)  # fmt: skip
    assert len(timelines) == 3 and len(health) == 2
    assert all(tl.errors and "ClientConnectorError" in tl.errors[0] for tl in timelines), [t.errors for t in timelines]
    assert all(many.call_row(tl, many.DEFAULT_THRESHOLDS)["failed"] for tl in timelines)


def test_each_worker_gets_its_stats_file_its_share_and_a_gpu_round_robin(tmp_path: Path) -> None:
    alone = many.worker_env(0, 1, 0, tmp_path / "s.jsonl", 16)
    assert alone == {"AGENT_STATS_PATH": str((tmp_path / "s.jsonl").resolve()), "AGENT_MAX_SESSIONS": "16"}
    spread = [many.worker_env(i, 4, 2, tmp_path / f"s{i}.jsonl", 32) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in spread] == ["0", "1", "0", "1"]
    # two engines share each GPU: each gets half of the default memory share
    share = float(spread[0]["TTS_DEEP_STREAM_GPU_MEMORY_FRACTION"])
    assert share == pytest.approx(many.EngineConfig.gpu_memory_fraction / 2, abs=1e-3)
    assert "TTS_DEEP_STREAM_GPU_MEMORY_FRACTION" not in many.worker_env(1, 2, 2, tmp_path / "t.jsonl", 8)


def test_each_response_gets_the_wait_the_worker_chose_for_that_turn() -> None:
    """Responses are split by the worker's turn decision (its traces), matched by the end of speech: the caller's
    last voiced sound, then the worker's VAD end within MATCH_S; a turn with no trace reads None."""
    def trace(t0: float, wait: str, room: str = "r1") -> dict:
        return {"session_id": f"{room}-AJ_x", "wall_t0": t0, "outcome": "answered", "turn_decision": {"wait": wait}}

    records = [trace(T0 + 2.3, "short"), trace(T0 + 9.4, "medium"), trace(T0 + 2.3, "long", room="other"),
               {"session_id": "r1-AJ_x", "wall_t0": T0 + 30.0, "outcome": "error"},  # no decision: an error
               {**trace(T0 + 30.0, "long")}]
    row = {"response_ms": [650.0, 1950.0, None], "response_ends": [T0 + 2.0, T0 + 9.0, T0 + 20.0]}
    row.update(many.traced_turns(records, "r1", row["response_ends"]))
    assert row["response_waits"] == ["short", "medium", None]
    second = {"response_ms": [700.0], "response_waits": ["short"]}
    groups = many.by_wait([row, second])
    assert groups["short"]["n"] == 2 and groups["short"]["p50"] == 675.0
    assert groups["medium"]["n"] == 1 and "None" not in groups  # an unanswered turn has no response to split
    assert "short 675.0" in many.waits(groups)


def test_rescore_scores_what_a_run_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--rescore` reads a run's folder (timelines per level, traces, stats) and writes many_rescored.*; a folder
    with no timelines is refused with a clear error, not a traceback."""
    with pytest.raises(SystemExit) as refused:
        many.main(["--rescore", "--out", str(tmp_path)])
    assert refused.value.code == 2 and "not a many-calls run's folder" in capsys.readouterr().err
    (tmp_path / "timelines" / "n1").mkdir(parents=True)
    tl = call_with_a_gap()
    (tmp_path / "timelines" / "n1" / "r.json").write_text(json.dumps(tl.to_json()))
    (tmp_path / "stack" / "traces").mkdir(parents=True)
    (tmp_path / "many_partial.json").write_text(json.dumps({"device": "the run's host", "command": "run cmd"}))
    assert many.main(["--rescore", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "many_rescored.json").read_text())
    assert report["device"] == "the run's host" and report["run_command"] == "run cmd"
    (level,) = report["levels"]
    assert level["calls"] == 1 and level["rows"][0]["room"] == "r" and level["host"] is None
    assert (tmp_path / "many_rescored.md").read_text().startswith("# Many calls: the run's host")
