"""The offline end-of-turn evaluation's rules (lab/convbench/eot_offline.py), on made-up scores: no model, no audio."""

from __future__ import annotations

import numpy as np

from agent.turn.words import Completeness
from lab.convbench import eot_offline as eo

N = len(eo.STEPS)


def _end(p: list[float], words: Completeness = Completeness.NEUTRAL, p_v1: float | None = None) -> dict:
    return {"kind": "end", "p": p, "words": words, "p_v1": p_v1}


def _pause(ms: int, p: list[float], words: Completeness = Completeness.NEUTRAL, p_v1: float | None = None) -> dict:
    steps = int(np.sum(eo.STEPS < ms))
    return {"kind": "pause", "pause_ms": ms, "pause_kind": "mid_clause", "p": p[:steps], "words": words, "p_v1": p_v1}


def test_a_schedule_ends_at_the_first_step_over_its_threshold() -> None:
    th = eo.thresholds((0.9, 0.8, 0.7, 0.5))
    assert th[0] > 1.0  # never at 0 ms: the first step is 100 ms
    p = [0.0] * N
    p[5] = 0.85  # 500 ms: the threshold there lies between 0.9 and 0.8
    assert eo.decide(p, th, None) == 500
    assert eo.decide(p, th, None, hold=2) == eo.MAX_MS  # one step alone is not a run of two
    assert eo.decide([0.0] * N, th, None) == eo.MAX_MS
    assert eo.decide([0.0] * N, th, None, fallback=eo.MEDIUM_MS) == eo.MEDIUM_MS


def test_the_words_come_first() -> None:
    th = eo.thresholds((0.5, 0.5, 0.5, 0.5))
    assert eo.decide([1.0] * N, th, Completeness.UNFINISHED) == eo.MAX_MS
    assert eo.decide([0.0] * N, th, Completeness.FINISHED) == eo.KNOTS_MS[0]


def test_a_cut_off_is_an_end_decided_before_the_caller_resumes() -> None:
    th = eo.thresholds((0.5, 0.5, 0.5, 0.5))
    rows = [_pause(400, [0.0, 0.0, 0.0, 0.9] + [0.9] * (N - 4)), _pause(350, [0.0] * 4 + [0.9] * (N - 4))]
    result = eo.evaluate(rows, lambda r: eo.decide(r["p"], th, None))
    assert result["false_cutoffs"] == 1  # at 300 ms, inside the 400 ms pause; the 350 ms one ended before 400


def test_the_fit_keeps_to_the_budget_and_prefers_short_waits() -> None:
    rng = np.random.default_rng(1)
    pauses = [_pause(1000, list(rng.uniform(0.0, 0.6, N))) for _ in range(40)]
    ends = [_end(list(rng.uniform(0.7, 1.0, N))) for _ in range(40)]
    knots, hold, info = eo.fit_schedule(pauses + ends, use_words=False)
    assert info["tuning_false_cutoff_rate"] <= eo.BUDGET
    assert info["tuning_mean_delay_ms"] <= 200  # ends score over every pause: the schedule ends them at once


def test_todays_rule_replayed() -> None:
    assert eo.today(_end([], Completeness.NEUTRAL, p_v1=0.9)) == eo.VAD_MS + eo.MIN_ENDPOINTING_MS
    assert eo.today(_end([], Completeness.NEUTRAL, p_v1=0.1)) == eo.MEDIUM_MS
    assert eo.today(_end([], Completeness.UNFINISHED, p_v1=0.9)) == eo.VAD_MS + eo.MAX_MS


def test_the_voice_threshold_fit_is_the_lowest_within_the_budget() -> None:
    # 20 NEUTRAL pauses of 1 s: one scores 0.9, one 0.6, the rest 0.2; with a 5 % budget one cut-off is allowed
    pauses = [{**_pause(1000, []), "words": Completeness.NEUTRAL, "p_v1": p} for p in [0.9, 0.6] + [0.2] * 18]
    assert eo.fit_v1_threshold(pauses) == 0.61  # at 0.61 only the 0.9 pause is cut (1/20); at 0.6 two are
    assert eo.today_at(0.61)(pauses[1]) == eo.MEDIUM_MS


def test_words_read_as_a_transcriber_writes_them() -> None:
    assert eo.words_of("I would like to book a table,") is Completeness.NEUTRAL
    assert eo.words_of("Tell me a story about") is Completeness.UNFINISHED
