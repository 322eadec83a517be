"""Trace schema and ordering: nine points relative to t0 = vad_speech_end plus the turn's commit, segments,
completeness (the record's truth rules), pauses held inside a turn, JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.tracing import ALL_POINTS, POINTS, SCHEMA_VERSION, SEGMENTS, TURN_COMMITTED, TraceCollector, TurnTrace


def mark_all(turn: TurnTrace, t0: float, first: int = 2) -> None:
    """The points from POINTS[first] on, 10 ms apart, and the commit between the transcript and the LLM request."""
    for i, point in enumerate(POINTS[first:], start=1):
        turn.mark(point, t0 + i * 0.01)
    turn.mark(TURN_COMMITTED, turn.points["stt_done"] + 0.005)


def full_turn(collector: TraceCollector, t0: float = 100.0) -> None:
    collector.speech_started(t0 - 1.0)
    turn = collector.open_turn(t0)
    mark_all(turn, t0)
    turn.user_text = "hello"
    collector.finish(turn)


def test_record_schema_and_relative_points(tmp_path: Path) -> None:
    collector = TraceCollector("sess", traces_dir=tmp_path)
    full_turn(collector)
    (path,) = tmp_path.glob("*.jsonl")
    rec = json.loads(path.read_text().strip())
    assert rec["schema"] == SCHEMA_VERSION
    assert rec["turn_id"] == "sess-t1" and rec["turn_index"] == 1
    assert list(rec["points"]) == list(ALL_POINTS)
    assert rec["points"]["vad_speech_end"] == 0.0
    assert rec["points"]["vad_speech_start"] == pytest.approx(-1.0)
    assert rec["points"]["first_frame_published"] == pytest.approx(0.07)
    assert set(rec["segments_ms"]) == {name for name, _, _ in SEGMENTS}
    assert rec["segments_ms"]["e2e"] == pytest.approx(70.0)
    assert rec["segments_ms"]["end_of_turn"] == pytest.approx(25.0)
    assert all(v >= 0 for v in rec["segments_ms"].values())
    assert rec["complete"] is True and rec["outcome"] == "answered"
    for key in ("timestamp", "user_text_chars", "reply_text_chars", "tts_segments", "playout_gaps", "playout_gap_ms",
                "interruptions", "errors", "pauses", "discarded", "overlaps", "turn_decision", "reply_id"):
        assert key in rec


def test_out_of_order_or_missing_points_are_not_complete() -> None:
    collector = TraceCollector("s", traces_dir=None)
    turn = collector.open_turn(10.0)
    mark_all(turn, 10.0)
    assert turn.complete()
    turn.points["stt_done"] = 9.0  # before stt_request
    assert not turn.complete()
    turn2 = collector.open_turn(20.0)
    assert not turn2.complete()
    assert collector.records[0]["complete"] is False


def test_first_mark_wins_and_unknown_point_is_refused() -> None:
    collector = TraceCollector("s", traces_dir=None)
    turn = collector.open_turn(1.0)
    turn.mark("stt_request", 1.1)
    turn.mark("stt_request", 1.5)
    assert turn.points["stt_request"] == 1.1
    with pytest.raises(ValueError, match="unknown trace point 'nope'"):
        turn.mark("nope")


def test_opening_a_turn_finishes_the_previous_one() -> None:
    collector = TraceCollector("s", traces_dir=None)
    collector.open_turn(1.0)
    collector.open_turn(2.0)
    assert [r["turn_index"] for r in collector.records] == [1]
    assert collector.records[0]["outcome"] == "no_transcript"
    collector.close()
    assert [r["turn_index"] for r in collector.records] == [1, 2]


def test_speech_start_after_end_is_clamped() -> None:
    collector = TraceCollector("s", traces_dir=None)
    collector.speech_started(5.0)
    turn = collector.open_turn(4.0)
    assert turn.points["vad_speech_start"] == 4.0


def test_unwritable_directory_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    collector = TraceCollector("s", traces_dir=blocker / "sub")
    full_turn(collector)
    assert len(collector.records) == 1


def test_empty_traces_dir_writes_nothing(tmp_path, monkeypatch) -> None:
    """TRACES_DIR set to "" means no trace files; it used to write <date>.jsonl into the working directory."""
    monkeypatch.chdir(tmp_path)
    collector = TraceCollector("s", traces_dir="")
    collector.finish(collector.open_turn())
    assert list(tmp_path.iterdir()) == [] and len(collector.records) == 1


def test_stt_sent_at_the_pause_may_precede_the_end_of_the_turn() -> None:
    """agent/turn/early_stt.py sends the utterance before the hangover is over: stt_request < t0 is in order, as long
    as it lies inside the user's speech .. transcript span."""
    collector = TraceCollector("s", traces_dir=None)
    collector.speech_started(9.0)
    turn = collector.open_turn(10.0)
    turn.mark("stt_request", 9.85)
    mark_all(turn, 10.0, first=3)
    assert turn.complete()
    assert turn.to_record()["segments_ms"]["vad_to_stt"] == pytest.approx(-150.0)
    turn.points["stt_request"] = 8.5  # before the speech began: not a request for this turn
    assert not turn.complete()
    turn.points["stt_request"] = 10.02  # after its own transcript
    assert not turn.complete()


def test_not_complete_when_heard_before_the_commit_or_the_llm_asked_before_the_transcript() -> None:
    collector = TraceCollector("s", traces_dir=None)
    turn = collector.open_turn(10.0)
    mark_all(turn, 10.0)
    assert turn.complete()
    turn.points[TURN_COMMITTED] = turn.points["first_frame_published"] + 0.001  # heard before it was committed
    assert not turn.complete()
    turn.points[TURN_COMMITTED] = turn.points["stt_done"]
    assert turn.complete()
    turn.points["llm_request"] = turn.points["stt_done"] - 0.001  # asked before the transcript existed
    assert not turn.complete()


def test_an_early_answer_may_start_before_the_commit() -> None:
    """The LLM and TTS of an answer prepared on the transcript may precede the commit; its audio may not."""
    collector = TraceCollector("s", traces_dir=None)
    turn = collector.open_turn(10.0)
    mark_all(turn, 10.0)
    turn.points[TURN_COMMITTED] = turn.points["tts_first_packet"]
    assert turn.complete()


def test_a_pause_inside_the_turn_moves_t0_and_clears_the_utterance_stt_points() -> None:
    collector = TraceCollector("s", traces_dir=None)
    collector.speech_started(9.0)
    turn = collector.open_turn(10.0)
    turn.mark("stt_request", 9.9)
    turn.mark("stt_done", 10.3)
    turn.resume(10.7)
    assert "stt_request" not in turn.points and "stt_done" not in turn.points
    turn.end_of_speech(12.0, 1_000.0)
    turn.mark("stt_request", 11.9)
    rec = turn.to_record()
    assert rec["points"]["vad_speech_start"] == pytest.approx(-3.0) and rec["points"]["vad_speech_end"] == 0.0
    assert rec["pauses"] == [{"at": pytest.approx(-2.0), "ms": pytest.approx(700.0)}]
    assert rec["wall_t0"] == 1_000.0


def test_a_held_pause_keeps_its_own_judgement_and_the_turn_the_last_one() -> None:
    """The wait a pause was held in stays with that pause; `turn_decision` is the judgement of the turn's last end
    (none when the caller went on before a pause was judged)."""
    collector = TraceCollector("s", traces_dir=None)
    collector.speech_started(9.0)
    turn = collector.open_turn(10.0)
    held = {"words": "neutral", "p_voice": 0.12, "threshold": 0.36, "wait": "medium"}
    turn.turn_decision = dict(held)
    turn.resume(11.2)
    turn.end_of_speech(12.0, 1_000.0)
    turn.resume(12.3)  # went on before this end was judged
    turn.end_of_speech(13.0, 1_001.0)
    last = {"words": "finished", "p_voice": 0.5, "threshold": 0.36, "wait": "short"}
    turn.turn_decision = dict(last)
    rec = turn.to_record()
    assert [p.get("decision") for p in rec["pauses"]] == [held, None]
    assert rec["turn_decision"] == last
    assert json.loads(json.dumps(rec))["pauses"][0]["decision"]["wait"] == "medium"


def test_a_sink_that_raises_does_not_end_the_call() -> None:
    seen: list[str] = []
    collector = TraceCollector("s", traces_dir=None, on_record=lambda r: seen.append(r["turn_id"]))
    collector.sinks.insert(0, lambda r: 1 / 0)
    full_turn(collector)
    assert seen == ["s-t1"] and len(collector.records) == 1


# -- a disk that fills up: the call goes on, warnings are throttled, health says what was lost ---------------


def full_disk_at(path: Path) -> None:
    """Writes to `path` fail as on a full disk: it is a link to /dev/full (every write: ENOSPC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/full")


def test_a_full_disk_warns_once_per_file_per_minute_and_health_counts_what_was_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's worth of writes (its journal on every trace point, its records) to a full disk: one warning per
    file, not one per write; the health snapshot counts every lost write; the first write that succeeds again
    says so once."""
    import datetime as dt

    from agent import journal as journal_module
    from agent import tracing

    now = [1000.0]
    writes = tracing.WriteHealth(clock=lambda: now[0])
    monkeypatch.setattr(tracing, "WRITES", writes)
    monkeypatch.setattr(journal_module, "WRITES", writes)
    collector = TraceCollector("sess", traces_dir=tmp_path)
    day_file = tmp_path / f"{dt.datetime.now(dt.UTC):%Y-%m-%d}.jsonl"
    full_disk_at(day_file)
    journal = journal_module.CallJournal(tmp_path, room="r", agent_identity="a", job_id="AJ_1", session_id="sess")
    journal.watch(collector)
    journal_path = journal.path
    full_disk_at(journal_path.with_suffix(".tmp"))  # the journal writes its .tmp, then renames it
    caplog.set_level("INFO", logger="agent.tracing")

    for i in range(3):  # three turns: 3 * (open + 8 marks + finish) journal writes, 3 record writes
        full_turn(collector, t0=100.0 + 10 * i)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2, warnings  # one per file
    assert any(str(day_file) in w and "No space left on device" in w for w in warnings), warnings
    assert any(str(journal_path) in w for w in warnings), warnings
    health = writes.snapshot()
    assert not health["ok"] and set(health["failing"]) == {str(day_file), str(journal_path)}
    assert health["failing"][str(day_file)]["failed_writes"] == 3
    assert health["not_written"] == 3 + health["failing"][str(journal_path)]["failed_writes"] >= 30

    caplog.clear()
    now[0] += tracing.WRITE_WARN_INTERVAL_S  # a minute later: one more warning per file still failing
    full_turn(collector, t0=200.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and all("earlier write(s) to it since the last warning" in w for w in warnings), warnings

    caplog.clear()
    day_file.unlink()  # space again
    full_turn(collector, t0=300.0)
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert any(f"{day_file} is written again (4 write(s) to it failed before)" in m for m in infos), infos
    assert json.loads(day_file.read_text())["turn_id"] == "sess-t5"
    assert str(day_file) not in writes.snapshot()["failing"]
    journal.close()


def test_the_start_up_check_names_an_unusable_or_nearly_full_traces_folder(tmp_path: Path) -> None:
    from agent.tracing import check_traces_dir

    assert check_traces_dir(tmp_path / "new") == [] and (tmp_path / "new").is_dir()  # created, writable, room
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    (problem,) = check_traces_dir(blocker / "traces")
    assert problem.startswith(f"TRACES_DIR={blocker / 'traces'}: cannot create the traces folder"), problem
    (problem,) = check_traces_dir(tmp_path, min_free_bytes=2**62)  # "nearly full": less free than asked
    assert "MiB free on its file system" in problem and "traces stop when it is full" in problem, problem
