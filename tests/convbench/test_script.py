"""The conversation-script format (lab/convbench/script.py): a good script loads with its clips cut to their
voiced span, and every mistake is reported with the script, the item and the field, all at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.convbench.audio import RATE, voiced_span
from lab.convbench.script import FORMAT, Cued, Gap, ItemKind, ScriptError, Turn, load_corpus, load_script
from tests.convbench.wavs import tone


def good_doc() -> dict:
    return {
        "format": FORMAT,
        "name": "example",
        "speaker": {"id": "test", "voice": "sine"},
        "items": [
            {"id": "t1", "kind": "turn", "expect_words": ["table"], "clips": [
                {"wav": "clips/a.wav", "text": "I would like to book a table,"},
                {"wav": "clips/b.wav", "text": "for four.", "pause_before": {"ms": 700, "kind": "mid_clause"}},
            ]},
            {"id": "bc", "kind": "backchannel", "wav": "clips/c.wav", "text": "mm-hmm",
             "at": {"after_agent_audio_ms": 1200}},
            {"id": "n", "kind": "noise", "noise": "cough", "wav": "clips/c.wav", "at": {"after_agent_audio_ms": 500},
             "within_ms": 5000},
            {"id": "g", "kind": "gap", "ms": 1000},
            {"id": "x", "kind": "barge_in", "wav": "clips/c.wav", "text": "stop", "at": {"after_agent_audio_ms": 0}},
        ],
    }  # fmt: skip


def write(tmp_path: Path, doc: dict, name: str = "script.json") -> Path:
    for clip in ("a", "b", "c"):
        if not (tmp_path / "clips" / f"{clip}.wav").exists():
            tone(tmp_path / "clips" / f"{clip}.wav")
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def problems(tmp_path: Path, doc: dict) -> list[str]:
    with pytest.raises(ScriptError) as info:
        load_script(write(tmp_path, doc))
    return info.value.problems


def test_a_good_script_loads_with_each_clip_cut_to_its_voiced_span(tmp_path: Path) -> None:
    script = load_script(write(tmp_path, good_doc()))
    assert script.name == "example" and script.speaker["id"] == "test"
    turn, bc, noise, gap, barge = script.items
    assert isinstance(turn, Turn) and turn.expect_words == ("table",) and turn.wait_for_agent and turn.gap_ms == 600
    assert turn.clips[0].pause_before is None and turn.clips[1].pause_before.ms == 700
    assert turn.clips[1].pause_before.kind == "mid_clause"
    assert len(turn.clips[0].pcm) == pytest.approx(0.5 * RATE, abs=2)  # the 0.1 s of silence each side is gone
    assert voiced_span(turn.clips[0].pcm) == (0, len(turn.clips[0].pcm) - 1)
    assert isinstance(bc, Cued) and bc.kind is ItemKind.BACKCHANNEL and bc.after_agent_audio_ms == 1200
    assert bc.within_ms == 15_000 and noise.label == "cough" and noise.within_ms == 5000
    assert isinstance(gap, Gap) and gap.ms == 1000 and barge.kind is ItemKind.BARGE_IN
    assert script.counts() == {"turns": 1, "pauses": 1, "backchannel": 1, "barge_in": 1, "noise": 1}


def test_wav_paths_are_relative_to_the_script(tmp_path: Path) -> None:
    doc = good_doc()
    for item in doc["items"]:
        for clip in item.get("clips", []):
            clip["wav"] = "../" + clip["wav"]
        if "wav" in item:
            item["wav"] = "../" + item["wav"]
    write(tmp_path, {"format": FORMAT, "items": []})  # makes the clips
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "s.json"
    path.write_text(json.dumps(doc))
    assert load_script(path).items[0].clips[0].wav == (tmp_path / "clips" / "a.wav").resolve()


def test_a_missing_wav_names_the_item_and_field(tmp_path: Path) -> None:
    doc = good_doc()
    doc["items"][1]["wav"] = "clips/nope.wav"
    (line,) = problems(tmp_path, doc)
    assert line.startswith("items[1] (id 'bc') field 'wav': ") and "nope.wav does not exist" in line


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [({"rate": 16_000}, "is 16000 Hz; clips must be 48000 Hz (convert with: sox"),
     ({"channels": 2}, "has 2 channels; clips must be mono"),
     ({"level": 0.0}, "never reaches -50 dBFS: the caller would play silence")],
)  # fmt: skip
def test_a_wrong_wav_says_what_is_wrong(tmp_path: Path, kwargs: dict, expected: str) -> None:
    tone(tmp_path / "clips" / "b.wav", **kwargs)
    (line,) = problems(tmp_path, good_doc())
    assert line.startswith("items[0] (id 't1') field 'clips[1]' field 'wav': ") and expected in line


def test_a_file_that_is_not_a_wav(tmp_path: Path) -> None:
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "c.wav").write_bytes(b"not a wav at all")
    lines = problems(tmp_path, good_doc())
    assert len(lines) == 3 and all("is not a PCM WAV file" in line for line in lines)  # three items use it


def test_an_unknown_kind_lists_the_allowed_ones(tmp_path: Path) -> None:
    doc = good_doc()
    doc["items"][3]["kind"] = "silence"
    (line,) = problems(tmp_path, doc)
    assert line == ("items[3] (id 'g') field 'kind': unknown kind 'silence' (allowed: turn, backchannel, barge_in, "
                    "noise, gap)")  # fmt: skip


def test_pauses_belong_between_clips(tmp_path: Path) -> None:
    doc = good_doc()
    doc["items"][0]["clips"][0]["pause_before"] = {"ms": 300, "kind": "after_um"}
    del doc["items"][0]["clips"][1]["pause_before"]
    first, second = problems(tmp_path, doc)
    where = "items[0] (id 't1') field 'clips[{}]' field 'pause_before': "
    assert first == where.format(0) + "the first clip of a turn has no pause before it"
    assert second.startswith(where.format(1) + "every clip after a turn's first needs a pause")


def test_out_of_range_values_and_bad_labels(tmp_path: Path) -> None:
    doc = good_doc()
    doc["items"][0]["clips"][1]["pause_before"] = {"ms": 20_000, "kind": "Mid Clause"}
    doc["items"][1]["at"] = {"after_agent_audio_ms": -5}
    doc["items"][2]["noise"] = "a door"
    lines = problems(tmp_path, doc)
    pause = "items[0] (id 't1') field 'clips[1]' field 'pause_before'"
    assert f"{pause} field 'ms': must be an integer in 50..10000 ms, got 20000" in lines
    assert any(line.startswith(f"{pause} field 'kind': must be a lowercase identifier") for line in lines)
    at = "items[1] (id 'bc') field 'at' field 'after_agent_audio_ms'"
    assert f"{at}: must be an integer in 0..60000 ms, got -5" in lines
    assert any(line.startswith("items[2] (id 'n') field 'noise': must be a lowercase identifier") for line in lines)


def test_typos_duplicates_and_order_are_caught(tmp_path: Path) -> None:
    doc = good_doc()
    doc["items"][1]["txet"] = "mm-hmm"
    doc["items"][3]["id"] = "t1"
    doc["items"].insert(0, {"id": "early", "kind": "barge_in", "wav": "clips/c.wav", "text": "stop",
                            "at": {"after_agent_audio_ms": 0}})  # fmt: skip
    lines = problems(tmp_path, doc)
    early = "items[0] (id 'early'): a barge_in is cued on the agent's reply to a turn, and no turn comes before it"
    assert early in lines
    assert any(line.startswith("items[2] (id 'bc') field 'txet': unknown field (allowed: ") for line in lines)
    assert "items[4] field 'id': 't1' is used twice" in lines


def test_the_top_level_is_checked(tmp_path: Path) -> None:
    assert problems(tmp_path, {"format": "convbench/0", "items": []}) == [
        "top level field 'format': must be 'convbench.script/1', got 'convbench/0'",
        "top level field 'items': must be a non-empty list",
    ]
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ScriptError, match="not valid JSON"):
        load_script(tmp_path / "broken.json")
    with pytest.raises(ScriptError, match="the script file does not exist"):
        load_script(tmp_path / "absent.json")


def test_a_corpus_reports_every_script_s_problems_at_once(tmp_path: Path) -> None:
    write(tmp_path, good_doc(), "a.json")
    bad = good_doc()
    bad["items"][0]["kind"] = "nope"
    write(tmp_path, bad, "b.json")
    worse = good_doc()
    worse["items"][3]["ms"] = "long"
    write(tmp_path, worse, "c.json")
    with pytest.raises(ScriptError) as info:
        load_corpus(tmp_path)
    assert {p.split(":")[0] for p in info.value.problems} == {"b.json", "c.json"}
    with pytest.raises(ScriptError, match="no \\*.json conversation scripts"):
        load_corpus(tmp_path / "clips")


def test_a_corpus_folder_s_manifest_is_not_a_script_and_meta_is_kept(tmp_path: Path) -> None:
    doc = good_doc()
    doc["meta"] = {"half": "report", "voice": {"tape": 1.07}}
    write(tmp_path, doc, "a.json")
    (tmp_path / "manifest.json").write_text(json.dumps({"versions": {}, "halves": {}}))
    (script,) = load_corpus(tmp_path)
    assert script.meta == {"half": "report", "voice": {"tape": 1.07}}
