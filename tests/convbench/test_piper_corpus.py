"""The Piper corpus's plan (lab/convbench/piper_corpus.py), checked without rendering audio: the counts issue 39 asks
for, and a report half that shares no speaker and no phrase with the tuning half."""

from __future__ import annotations

from collections import Counter

import numpy as np

from lab.convbench import piper_corpus as pc


def _by_half() -> dict[str, list[dict]]:
    items = pc.plan()
    half = {s.id: s.half for s in pc.SPEAKERS}
    out: dict[str, list[dict]] = {h: [] for h in pc.HALVES}
    for sid, its in items.items():
        out[half[sid]] += its
    return out


def test_the_plan_has_what_issue_39_asks_for() -> None:
    items = [i for its in pc.plan().values() for i in its]
    turns = [i for i in items if i["kind"] == "turn"]
    pauses = [p for t in turns for p in t["pauses"]]
    kinds = Counter(i["kind"] for i in items)
    assert len(pauses) >= 80 and len(turns) >= 80 and kinds["backchannel"] >= 40 and kinds["barge_in"] >= 40
    assert kinds["noise"] >= 16
    assert all(350 <= p["ms"] <= 1800 for p in pauses)
    assert {"after_um", "mid_clause", "phone_number", "address", "digits", "after_clause"} <= {
        p["kind"] for p in pauses
    }
    ends = [t["parts"][-1] for t in turns]
    assert sum(e.endswith(".") for e in ends) > 0.75 * len(ends)  # statements and requests, not only questions
    barge = {i["text"] for i in items if i["kind"] == "barge_in"}
    assert {"Stop.", "Wait.", "No no."} <= barge


def test_the_halves_share_no_speaker_and_no_phrase() -> None:
    by_half = _by_half()
    phrases = {h: {i.get("text") or " ".join(i.get("parts", [])) for i in its if i["kind"] != "noise"}
               for h, its in by_half.items()}  # fmt: skip
    assert not phrases["tuning"] & phrases["report"]
    words = {h: {p for i in its if i["kind"] == "turn" for p in i["parts"]} for h, its in by_half.items()}
    assert not words["tuning"] & words["report"]  # no part of a turn either
    assert (
        len({s.id for s in pc.SPEAKERS if s.half == "tuning"} & {s.id for s in pc.SPEAKERS if s.half == "report"}) == 0
    )


def test_the_plan_is_deterministic() -> None:
    assert pc.plan() == pc.plan()


def test_a_cut_fades_only_where_it_was_cut() -> None:
    x = np.ones(22050, dtype=np.float32)
    y = pc.faded(x, 22050, fade_in=False, fade_out=True)
    assert y[0] == 1.0 and y[-1] < 0.01 and y[len(y) // 2] == 1.0
