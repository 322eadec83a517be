"""Our corpus (lab/convbench/corpus.py): the counts issue 28 asks for, honest prosody, several speakers, and
the same files from the same command (a second run renders nothing: clips are cached by content hash)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from lab.convbench import corpus
from lab.convbench.audio import frame_levels
from lab.convbench.script import Cued, ItemKind, Turn, load_corpus, load_script


def tree(root: Path, paths: list[str]) -> dict[str, str]:
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="module")
def built() -> tuple[Path, dict]:
    out = corpus.cached()  # rendered once per machine; `build` again rewrites the scripts, renders what is missing
    return out, corpus.build(out)


def test_the_corpus_has_what_issue_28_asks_for(built: tuple[Path, dict]) -> None:
    out, counts = built
    scripts = load_corpus(out)
    assert counts["scripts"] == len(scripts) == 12
    turns = [i for s in scripts for i in s.items if isinstance(i, Turn)]
    pauses = [c.pause_before for t in turns for c in t.clips[1:]]
    cued = [i for s in scripts for i in s.items if isinstance(i, Cued)]
    assert len(pauses) == counts["pauses"] >= 60 and all(300 <= p.ms <= 1500 for p in pauses)
    assert {"after_um", "mid_clause", "phone_number", "address"} <= {p.kind for p in pauses}
    assert len(turns) >= 60  # each turn ends in a true end of turn
    assert sum(c.kind is ItemKind.BACKCHANNEL for c in cued) >= 30
    assert sum(c.kind is ItemKind.BARGE_IN for c in cued) >= 30
    noises = {c.label for c in cued if c.kind is ItemKind.NOISE}
    assert noises == {"cough", "door", "keyboard"}
    assert {c.label for c in cued if c.kind is ItemKind.BACKCHANNEL} >= {"Mm-hmm.", "Yeah.", "Right.", "Okay."}
    assert {"Stop.", "Wait, no."} <= {c.label for c in cued if c.kind is ItemKind.BARGE_IN}
    assert len({s.speaker["voice"] for s in scripts}) >= 8 and len({s.speaker["rate_wpm"] for s in scripts}) >= 6


def test_each_clip_carries_the_prosody_of_where_it_stands(built: tuple[Path, dict]) -> None:
    for script in load_corpus(built[0]):
        for turn in (i for i in script.items if isinstance(i, Turn)):
            *going_on, last = [c.text for c in turn.clips]
            assert all(t.endswith(",") and "," not in t[:-1] for t in going_on), going_on  # continues; no inner pause
            assert last[-1] in ".?" and turn.expect_words, last


def test_noises_are_audible_at_the_caller_s_level_rule(built: tuple[Path, dict]) -> None:
    for kind in corpus.NOISES:
        pcm = corpus.noise_pcm(kind, 7)
        assert np.array_equal(pcm, corpus.noise_pcm(kind, 7))  # seeded
        assert frame_levels(pcm).max() >= -30.0, kind
    with pytest.raises(ValueError, match="unknown noise 'bell'"):
        corpus.noise_pcm("bell", 1)


def test_the_same_command_writes_the_same_files(built: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = built
    again = corpus.build(out)  # cached: nothing rendered, nothing removed
    assert again["clips_rendered"] == 0 and again["clips_removed"] == 0
    # a part built alone in a fresh folder is byte for byte the part of the whole corpus
    corpus.build(tmp_path, parts=("ci", "calls"))
    scripts = ["ci/short.json", "calls/questions.json"]
    names = list(scripts)
    for name in scripts:
        doc = json.loads((tmp_path / name).read_text())
        for item in doc["items"]:
            names += [w.removeprefix("../") for w in [item.get("wav")] + [c["wav"] for c in item.get("clips", [])] if w]
    assert tree(tmp_path, names) == tree(out, names)


def test_the_short_and_calls_scripts_load(built: tuple[Path, dict]) -> None:
    short = load_script(built[0] / "ci" / "short.json")
    assert short.counts() == {"turns": 2, "pauses": 1, "backchannel": 1, "barge_in": 1, "noise": 0}
    assert short.items[0].clips[1].pause_before.ms == 700  # the issue's own example
    calls = load_script(built[0] / "calls" / "questions.json")
    assert calls.counts()["turns"] == 5 and calls.counts()["barge_in"] == 2
