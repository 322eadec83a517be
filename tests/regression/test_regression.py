"""Regression suite: fast mode passes on the tiny checkpoint, a golden baseline is honoured, a broken one fails,
and each gate's measurement catches what it is meant to catch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tts_engine.__main__ import main
from tts_engine.regression import audio_problems, longest_loop, snr_db
from tts_engine.runtime.codedump import load_code_dump
from tts_engine.runtime.wav import read_wav, wav_bytes

GATES = {
    "determinism",
    "stream_vs_offline",
    "duration",
    "decode_exactness",
    "repeat",
    "bad_audio",
    "runaway",
    "snr_vs_baseline",
    "ttfa",
}


def _regress(model: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "regression",
            "--mode",
            "fast",
            "--model",
            str(model),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--max-frames",
            "6",
            "--runs",
            "2",
            "--env-file",
            str(out / "absent.env"),
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def golden(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("golden")
    assert _regress(tiny_checkpoint, out) == 0
    return out


def test_fast_mode_passes_and_writes_the_summary(golden: Path) -> None:
    summary = json.loads((golden / "summary.json").read_text())
    assert set(summary) >= {"pass", "gates", "device", "config", "cases"}
    assert summary["pass"] is True and summary["device"] == "cpu"
    assert set(summary["gates"]) == GATES
    for name, g in summary["gates"].items():
        assert {"pass", "value", "threshold"} <= set(g), name
    assert summary["gates"]["ttfa"]["skipped"] and summary["gates"]["snr_vs_baseline"]["skipped"]
    assert summary["gates"]["determinism"]["value"] == 1
    assert len(summary["cases"]) == 3
    for case in summary["cases"]:
        pcm, rate = read_wav(golden / case["wav"])
        assert rate == 24000 and len(pcm) == case["frames"] * 1920 == case["samples"]


def test_golden_baseline_is_compared_and_a_different_one_fails(
    golden: Path, tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTS_REGRESSION_BASELINE", str(golden / "summary.json"))
    assert _regress(tiny_checkpoint, tmp_path / "same") == 0
    same = json.loads((tmp_path / "same" / "summary.json").read_text())["gates"]["snr_vs_baseline"]
    assert same["pass"] and same["value"] == 200.0

    broken = tmp_path / "broken_baseline"
    broken.mkdir()
    summary = json.loads((golden / "summary.json").read_text())
    for case in summary["cases"]:
        pcm, _ = read_wav(golden / case["wav"])
        noise = np.random.default_rng(0).integers(-8000, 8000, len(pcm))
        (broken / case["wav"]).write_bytes(wav_bytes(np.clip(pcm + noise, -32768, 32767).astype(np.int16)))
    (broken / "summary.json").write_text(json.dumps(summary))
    assert _regress(tiny_checkpoint, tmp_path / "diff", "--baseline", str(broken / "summary.json")) == 1
    failed = json.loads((tmp_path / "diff" / "summary.json").read_text())
    assert failed["pass"] is False and failed["gates"]["snr_vs_baseline"]["pass"] is False
    assert failed["gates"]["snr_vs_baseline"]["value"] < 15.0


def test_unusable_baseline_is_a_configuration_error(tiny_checkpoint: Path, tmp_path: Path) -> None:
    assert _regress(tiny_checkpoint, tmp_path, "--baseline", str(tmp_path / "missing.json")) == 2


def test_replay_decodes_the_dumped_codes_to_the_same_audio(golden: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    case = json.loads((golden / "summary.json").read_text())["cases"][0]
    codes, meta = load_code_dump(golden / case["codes"])
    assert codes.shape == (case["frames"], 16) and meta["speaker"] == case["speaker"]
    engine_pcm, _ = read_wav(golden / case["wav"])
    for mode in ("stream", "single"):
        out = tmp_path / f"{mode}.wav"
        assert (
            main(
                [
                    "replay",
                    "--model",
                    str(tiny_checkpoint),
                    "--codes",
                    str(golden / case["codes"]),
                    "--out",
                    str(out),
                    "--mode",
                    mode,
                    "--device",
                    "cpu",
                ]
            )
            == 0
        )
        replayed, _ = read_wav(out)
        if mode == "stream":  # the engine's own decode path at batch 1: bit-identical
            assert replayed.tobytes() == engine_pcm.tobytes()
        else:  # one unchunked pass: fp32 rounding only
            assert np.abs(replayed.astype(np.int32) - engine_pcm).max() <= 2
    assert main(["replay", "--model", str(tiny_checkpoint), "--codes", str(tmp_path / "nope.npz")]) == 2


def test_loop_detector() -> None:
    rng = np.random.default_rng(0)
    speech = rng.integers(0, 2048, (60, 16))
    assert longest_loop(speech) == 0
    looped = np.concatenate([speech[:10], np.tile(speech[10:13], (12, 1)), speech[13:20]])
    assert longest_loop(looped) == 36
    stuck = np.concatenate([speech[:5], np.repeat(speech[5:6], 30, axis=0)])
    assert longest_loop(stuck) == 30


def test_bad_audio_and_snr_measures() -> None:
    rng = np.random.default_rng(1)
    speech = (rng.standard_normal(19200) * 3000).astype(np.int16)
    assert audio_problems(speech, 0) == []
    assert audio_problems(np.zeros(0, np.int16), 0) == ["empty"]
    assert audio_problems(np.zeros(1920, np.int16), 0) == ["silent throughout"]
    assert audio_problems(np.full(1920, 32767, np.int16), 0) == ["clipped throughout"]
    assert audio_problems(speech, 3) == ["3 non-finite samples"]
    assert snr_db(speech, speech) == 200.0
    assert 19 < snr_db(speech, (speech * 0.9).astype(np.int16)) < 21
    assert snr_db(speech, speech[:9600]) < 5
