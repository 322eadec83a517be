"""lab/stress_instants.py: which trace outcome tells the truth about a cut round."""

from __future__ import annotations

from lab.stress_instants import Round


def test_an_interrupted_turn_is_truthful_and_an_answered_one_is_not() -> None:
    assert Round(index=1, milestone="llm_request", nth=1, ticks=0, interrupted=True, outcome="interrupted").truthful
    assert not Round(index=2, milestone="frame", nth=1, ticks=0, interrupted=True, outcome="answered").truthful


def test_a_cut_early_answer_leaves_the_turn_answered() -> None:
    """TURN_HANDLING=ours: a cut right after the speech is created can hit the answer prepared before the commit;
    the framework throws it away (the trace's `discarded`) and answers the turn with a new speech."""
    early = Round(index=10, milestone="speech_created", nth=1, ticks=1, interrupted=True, outcome="answered",
                  early_answer=True)  # fmt: skip
    assert early.truthful
    assert not Round(index=11, milestone="speech_created", nth=1, ticks=1, interrupted=True, outcome="error",
                     early_answer=True).truthful  # fmt: skip
