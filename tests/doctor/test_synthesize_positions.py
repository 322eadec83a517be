"""`python -m tts_engine synthesize` honours TTS_DEEP_STREAM_MAX_POSITIONS (it used to hard-code 4,096 and then
advise raising the variable it ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tts_engine.__main__ import main

LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 6  # a prompt of a few hundred positions


def _synthesize(tiny_checkpoint: Path, out: Path, *extra: str) -> int:
    return main(["synthesize", "--model", str(tiny_checkpoint), "--text", LONG_TEXT, "--out", str(out),
                 "--device", "cpu", "--max-frames", "2", *extra])


def test_the_variable_bounds_the_positions(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_DEEP_STREAM_MAX_POSITIONS", "128")
    assert _synthesize(tiny_checkpoint, tmp_path / "a.wav") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "max_seq_len=128" in err[-1]
    assert not (tmp_path / "a.wav").exists()


def test_raising_the_variable_is_obeyed(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_DEEP_STREAM_MAX_POSITIONS", "8192")
    assert _synthesize(tiny_checkpoint, tmp_path / "b.wav") == 0
    assert "max_seq_len 8192" in capsys.readouterr().err
    assert (tmp_path / "b.wav").stat().st_size == 44 + 2 * 1920 * 2


def test_a_bad_value_is_one_line_naming_the_variable(tiny_checkpoint: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_DEEP_STREAM_MAX_POSITIONS", "lots")
    assert _synthesize(tiny_checkpoint, tmp_path / "c.wav") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TTS_DEEP_STREAM_MAX_POSITIONS='lots'" in err[0] and "128..32768" in err[0]
