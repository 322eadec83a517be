"""The scoring (lab/convbench/score.py) on synthetic calls whose answers are known: the agent's audio is
drawn frame by frame (10 ms, -18 dBFS talking, -100 silent), its states, transcripts and the worker's traces are
placed by hand, so every rule (cut-off window, commit point, stop vs dropout, duck, resume, natural end, miss)
is checked against a number worked out here."""

from __future__ import annotations

import numpy as np
import pytest

from lab.convbench.activity import AgentActivity, Thresholds, level_windows, runs
from lab.convbench.score import score
from lab.convbench.timeline import ItemRecord, Play, Timeline

T0 = 1_800_000_000.0  # a Unix time: everything below is seconds after it


class Call:
    """A synthetic call of `seconds`; times are seconds after T0."""

    def __init__(self, seconds: float = 40.0) -> None:
        self.t = T0 + np.arange(int(seconds * 100)) * 0.01
        self.db = np.full(self.t.size, -100.0)
        self.tl = Timeline(script="synthetic", room="r")

    def talk(self, start: float, end: float, db: float = -18.0) -> Call:
        self.db[(self.t >= T0 + start) & (self.t < T0 + end)] = db
        return self

    def state(self, at: float, state: str) -> Call:
        self.tl.states.append((T0 + at, state))
        return self

    def turn(self, item_id: str, clips: list[tuple[float, float]], pauses: list[int], words=()) -> Call:
        self.tl.items.append(ItemRecord(item_id, "turn", played=True, expect_words=list(words),
                                        pauses=[{"ms": ms, "kind": "mid_clause"} for ms in pauses]))  # fmt: skip
        for i, (a, b) in enumerate(clips):
            self.tl.plays.append(Play(item_id, "turn", i, T0 + a, T0 + b))
        return self

    def cued(self, item_id: str, kind: str, at: tuple[float, float] | None, anchor: float = 0.0,
             reason: str = "") -> Call:  # fmt: skip
        rec = ItemRecord(item_id, kind, played=at is not None, reason=reason, anchor=T0 + anchor,
                         cue=T0 + (at[0] if at else anchor + 1.0))  # fmt: skip
        self.tl.items.append(rec)
        if at is not None:
            self.tl.plays.append(Play(item_id, kind, 0, T0 + at[0], T0 + at[1]))
        return self

    def trace(self, t0: float, points: dict[str, float] | None = None, interrupt: float | None = None,
              outcome: str = "answered") -> Call:  # fmt: skip
        points = {"vad_speech_end": 0.0, **({} if outcome == "no_transcript" else {"stt_done": 0.3}), **(points or {})}
        record = {"wall_t0": T0 + t0, "points": points, "interruptions": [], "outcome": outcome}
        if interrupt is not None:
            record["interruptions"].append({"interrupt_detected": interrupt - t0, "source": "vad"})
        self.tl.traces.append(record)
        return self

    def text(self, at: float, who: str, text: str) -> Call:
        self.tl.transcripts.append({"t": T0 + at, "who": who, "text": text, "final": True})
        return self

    def scored(self) -> dict:
        self.tl.agent_t, self.tl.agent_db = self.t.tolist(), self.db.tolist()
        return score([self.tl])


def test_a_pause_is_cut_by_a_commit_inside_it_and_not_by_one_after_the_resume() -> None:
    # clip 0 ends at 2.0, 700 ms pause, clip 1 3.0-4.0 ends, 500 ms pause, clip 2 4.5-5.5 (true end)
    call = Call().turn("t1", [(0.5, 2.0), (2.7, 4.0), (4.5, 5.5)], [700, 500], words=["table"])
    call.trace(2.35, outcome="unanswered")  # the VAD ended a turn in the first pause, with words: committed there
    call.state(3.4, "thinking")  # the caller sees it only during clip 1: outside the second pause, not counted there
    call.trace(5.85, {"llm_request": 0.3}).state(6.3, "thinking").talk(7.0, 12.0).state(7.0, "speaking")
    call.text(6.2, "user", "I would like a table.")
    r = call.scored()
    first, second = r["pause_rows"]
    assert first["cut"] and first["signal"] == "trace_commit" and first["signal_ms"] == pytest.approx(350.0, abs=0.5)
    assert first["before_resume"] and first["measured_ms"] == pytest.approx(700.0, abs=0.5)
    assert not second["cut"] and second["signal"] is None
    assert r["summary"]["pauses"]["false_cutoff_rate"] == 0.5 and r["commit_point"] == "vad_speech_end"
    (end,) = r["end_rows"]
    assert end["decision_ms"] == pytest.approx(800.0, abs=0.5) and end["commit_ms"] == pytest.approx(350.0, abs=0.5)
    assert end["audio_ms"] == pytest.approx(1500.0, abs=10.0) and end["cut_inside"]
    assert end["words_found"] == ["table"]
    assert r["summary"]["true_ends"]["decision_ms_uncut"]["n"] == 0


def test_each_pause_and_end_says_which_wait_judged_it() -> None:
    """`wait` comes from the worker's judgements: a cut pause and a true end from the committed turn's
    `turn_decision`, a held pause from its own `pauses[].decision`, none where the caller went on before one."""
    # t1: clips 0.5-2.0, 3.0-4.0 (a 1000 ms pause held in the medium wait), 4.3-5.0 (a 300 ms one; the true end)
    call = Call().turn("t1", [(0.5, 2.0), (3.0, 4.0), (4.3, 5.0)], [1000, 300])
    t1 = {"wall_t0": T0 + 5.3, "points": {"vad_speech_end": 0.0, "stt_done": 0.3, "turn_committed": 0.5},
          "interruptions": [], "outcome": "answered", "turn_decision": {"words": "finished", "wait": "short"},
          "pauses": [{"at": 2.2 - 5.3, "ms": 1000.0, "decision": {"words": "neutral", "wait": "medium"}},
                     {"at": 4.2 - 5.3, "ms": 300.0}]}  # the second: the caller went on before it was judged
    # t2: 10.0-11.0, cut 0.4 s into a 700 ms pause by a short wait, 11.7-12.5 (true end, judged long)
    call.turn("t2", [(10.0, 11.0), (11.7, 12.5)], [700])
    cut = {"wall_t0": T0 + 11.1, "points": {"vad_speech_end": 0.0, "stt_done": 0.2, "turn_committed": 0.3},
           "interruptions": [], "outcome": "unanswered", "turn_decision": {"words": "neutral", "wait": "short"}}
    end = {"wall_t0": T0 + 12.8, "points": {"vad_speech_end": 0.0, "stt_done": 0.3, "turn_committed": 2.4},
           "interruptions": [], "outcome": "answered", "turn_decision": {"words": "unfinished", "wait": "long"}}
    call.tl.traces += [t1, cut, end]
    r = call.scored()
    assert [(p["item"], p["cut"], p["wait"]) for p in r["pause_rows"]] == [
        ("t1", False, "medium"), ("t1", False, None), ("t2", True, "short")]
    assert [(e["item"], e["wait"]) for e in r["end_rows"]] == [("t1", "short"), ("t2", "long")]
    by_wait = r["summary"]["pauses"]["by_wait"]
    assert by_wait["medium"]["n"] == by_wait["none"]["n"] == 1
    assert by_wait["short"] == {"n": 1, "cut": 1, "rate": 1.0}
    ends = r["summary"]["true_ends"]["by_wait"]
    assert ends["long"]["n"] == 1 and ends["short"]["n"] == 1 and ends["long"]["decision_ms"]["n"] == 0


def test_a_vad_end_without_words_is_no_commit() -> None:
    call = Call().turn("t1", [(0.5, 2.0), (3.0, 4.0)], [1000]).trace(2.3, outcome="no_transcript")
    assert not call.scored()["pause_rows"][0]["cut"]


def test_a_signal_at_the_caller_before_the_resume_cuts_the_pause_without_traces() -> None:
    call = Call().turn("t1", [(0.5, 2.0), (3.0, 4.0)], [1000]).state(2.6, "thinking")
    (row,) = call.scored()["pause_rows"]
    assert row["cut"] and row["signal"] == "thinking" and row["signal_ms"] == pytest.approx(600.0, abs=0.5)
    assert row["before_resume"]


def test_turn_committed_replaces_the_vad_end_once_the_worker_traces_it() -> None:
    call = Call().turn("t1", [(0.5, 2.0), (3.0, 4.0)], [1000])
    call.trace(2.3, {"llm_request": 0.1})  # a speculative request in the pause: not a commit any more
    call.trace(4.35, {"turn_committed": 0.05, "llm_request": 0.0})  # committed 400 ms after the true end
    r = call.scored()
    assert r["commit_point"] == "turn_committed" and not r["pause_rows"][0]["cut"]
    assert r["end_rows"][0]["commit_ms"] == pytest.approx(400.0, abs=0.5)


def test_a_dropout_is_not_a_stop_and_a_duck_is_a_duck() -> None:
    call = Call().turn("t1", [(0.5, 2.0)], []).state(2.5, "thinking").state(3.0, "speaking").talk(3.0, 15.0)
    call.cued("t1.backchannel", "backchannel", (4.0, 4.4), anchor=3.0)
    call.talk(4.8, 4.95, -100.0)  # 150 ms of silence, the state stays "speaking": frames came late
    call.cued("t1.noise", "noise", (9.0, 9.4), anchor=3.0)  # past the backchannel's window (its clip + 3 s)
    call.talk(9.3, 9.8, -32.0)  # 14 dB down for 500 ms, then back: ducked, never silent
    call.trace(2.4, {"llm_request": 0.1})
    rows = {r["item"]: r for r in call.scored()["cued_rows"]}
    bc, noise = rows["t1.backchannel"], rows["t1.noise"]
    assert not bc["stopped"] and bc["dropouts"] == 1 and bc["duck_ms"] is None and bc["reference_db"] == -18.0
    assert noise["ducked"] and noise["duck_ms"] == pytest.approx(300.0, abs=10.0) and not noise["stopped"]


def test_a_paused_reply_that_comes_back_is_a_false_interruption_with_its_gap() -> None:
    call = Call().turn("t1", [(0.5, 2.0)], []).state(3.0, "speaking").talk(3.0, 5.65).talk(7.2, 12.0)
    call.cued("t1.backchannel", "backchannel", (4.0, 4.4), anchor=3.0)
    call.state(5.6, "listening").state(7.2, "speaking")  # paused at 5.6, back at 7.2 with no new turn
    call.trace(2.4, {"llm_request": 0.1})
    r = call.scored()
    (row,) = r["cued_rows"]
    assert row["stopped"] and row["resumed"] and not row["answered"] and not row["cut_by_worker"]
    assert row["silence_ms"] == pytest.approx(1650.0, abs=10.0) and row["gap_ms"] == pytest.approx(1550.0, abs=10.0)
    assert r["summary"]["false_interruptions"]["rate"] == 1.0
    assert r["summary"]["false_interruptions"]["backchannel"]["resumed"] == 1


def test_a_backchannel_taken_as_a_turn_is_answered_and_a_natural_end_is_no_interruption() -> None:
    call = Call().turn("t1", [(0.5, 2.0)], []).state(3.0, "speaking").talk(3.0, 4.9)
    call.cued("t1.backchannel", "backchannel", (4.0, 4.4), anchor=3.0)
    call.trace(2.4, {"llm_request": 0.1}, interrupt=4.85).state(4.88, "listening")  # cut by the worker
    call.state(6.0, "thinking").state(7.0, "speaking").talk(7.0, 12.0)  # ... and it answered the "yeah"
    call.turn("t2", [(14.0, 15.0)], []).state(16.0, "speaking").talk(16.0, 17.5).state(17.5, "listening")
    call.cued("t2.noise", "noise", (17.0, 17.3), anchor=16.0)  # the reply simply ended 500 ms later
    call.trace(15.3, {"llm_request": 0.1, "first_frame_published": 0.62})  # the trace of that reply: no cut
    rows = {r["item"]: r for r in call.scored()["cued_rows"]}
    bc, noise = rows["t1.backchannel"], rows["t2.noise"]
    assert bc["stopped"] and bc["cut_by_worker"] and bc["cut_source"] == "vad" and bc["answered"]
    assert not bc["resumed"] and bc["silence_ms"] == pytest.approx(900.0, abs=10.0)
    assert noise["reply_ended"] and not noise["stopped"]


def test_barge_ins_silence_and_misses() -> None:
    call = Call().turn("t1", [(0.5, 2.0)], []).state(3.0, "speaking").talk(3.0, 5.3)
    call.cued("t1.barge_in", "barge_in", (4.5, 5.2), anchor=3.0)
    call.trace(2.4, {"llm_request": 0.1}, interrupt=5.25).state(5.27, "listening")
    call.turn("t2", [(10.0, 11.0)], []).state(12.0, "speaking").talk(12.0, 30.0)
    call.cued("t2.barge_in", "barge_in", (13.0, 13.5), anchor=12.0)  # the agent kept talking
    call.cued("t3.barge_in", "barge_in", None, anchor=12.0, reason="the agent was not speaking at the cue")
    call.trace(11.3, {"llm_request": 0.1})
    r = call.scored()
    b = r["summary"]["barge_ins"]
    assert b["n"] == 2 and b["missed"] == 1 and b["silence_ms"]["p50"] == pytest.approx(800.0, abs=10.0)
    assert b["cut_by_worker"] == 1
    assert r["summary"]["not_played"] == [{"item": "t3.barge_in", "script": "synthetic", "kind": "barge_in",
                                           "reason": "the agent was not speaking at the cue"}]  # fmt: skip


@pytest.mark.parametrize("traced", [None, "another reply"])
def test_a_stop_counts_unless_a_trace_holds_the_reply(traced: str | None) -> None:
    call = Call().turn("t1", [(0.5, 2.0)], []).state(3.0, "speaking").talk(3.0, 4.9).state(4.9, "listening")
    call.cued("t1.backchannel", "backchannel", (4.0, 4.4), anchor=3.0)
    if traced:
        call.trace(0.2, {"first_frame_published": 0.5})  # a reply heard at ~0.6 s, not the one heard at 3.0 s
    (row,) = call.scored()["cued_rows"]
    assert row["stopped"] and not row["reply_ended"]  # nothing tells a natural end from an untraced cut


def test_the_live_tracker_and_the_helpers() -> None:
    activity = AgentActivity(Thresholds(stop_min_ms=100))
    levels = [-100] * 5 + [-20] * 10 + [-100] * 5 + [-20] * 5 + [-100] * 12 + [-20] * 3
    for i, db in enumerate(levels):
        activity.update(i * 0.01, db)
    assert activity.onsets == pytest.approx([0.05, 0.37])  # the 50 ms dip is no stop; the 120 ms silence is
    assert activity.audible() and activity.onset_after(0.1) == pytest.approx(0.37)
    activity.update(0.40, -100)
    assert activity.audible() and activity.quiet_since() is None
    assert runs(np.array([False, True, True, False, True])) == [(1, 3), (4, 5)]
    assert level_windows(np.array([-20.0] * 10))[0] == pytest.approx(-20.0)


def test_the_report_renders_its_table_and_plots(tmp_path) -> None:
    from lab.convbench import report as reports

    call = Call().turn("t1", [(0.5, 2.0), (3.0, 4.0)], [1000]).trace(2.3).state(4.6, "thinking")
    call.state(5.0, "speaking").talk(5.0, 12.0).cued("t1.barge_in", "barge_in", (6.0, 6.8), anchor=5.0)
    call.trace(4.4, {"first_frame_published": 0.5}, interrupt=7.0).state(7.02, "listening").talk(7.05, 12.0, -100.0)
    meta = {"date": "2026-11-28T00:00:00+00:00", "command": "python -m lab.convbench --script s.json",
            "device": "test", "versions": {}, "config": {"turn_handling": "vad"}, "duration_s": 12.0,
            "counts": {"scripts": 1, "items": 2, "items_played": 2, "errors": 0}, "caller": {}}  # fmt: skip
    report = reports.build(call.scored(), meta)
    assert report["verdict"]["false_cutoff_rate"] == "MISS" and report["verdict"]["barge_in_missed"] == "pass"
    assert report["summary"]["barge_ins"]["silence_ms"]["p50"] == pytest.approx(1050.0, abs=10.0)
    reports.write(report, tmp_path)
    text = (tmp_path / "convbench.md").read_text()
    assert "| false cut-offs (pauses inside a turn) | 1/1 = 100.0 % (before the resume: 1) | <= 5.0 % | MISS |" in text
    assert (tmp_path / "convbench.png").stat().st_size > 0
    reports.compare_plot([report, report], tmp_path / "compare.png")
    assert (tmp_path / "compare.png").stat().st_size > 0
