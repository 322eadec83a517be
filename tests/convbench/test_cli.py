"""`python -m lab.convbench`'s command line: what it refuses before any call starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.convbench.__main__ import _parser, main
from tests.convbench.test_script import good_doc, write


def test_worker_env_is_name_value_pairs() -> None:
    args = _parser().parse_args(
        ["--corpus", "c", "--out", "o", "--worker-env", "OVERLAP_EARLY_WORDS=0", "--worker-env", "EOT_THRESHOLD=0.5"]
    )
    assert args.worker_env == [("OVERLAP_EARLY_WORDS", "0"), ("EOT_THRESHOLD", "0.5")]
    assert _parser().parse_args(["--corpus", "c", "--out", "o"]).worker_env == []


@pytest.mark.parametrize("bad", ["OVERLAP_EARLY_WORDS", "=0", "NOT A NAME=1"])
def test_a_malformed_worker_env_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--corpus", "c", "--out", "o", "--worker-env", bad])
    assert exc.value.code == 2
    assert "is not NAME=VALUE" in capsys.readouterr().err


def test_a_half_no_script_belongs_to_is_refused_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, good_doc(), "a.json")  # no meta.half: not a split corpus
    assert main(["--corpus", str(tmp_path), "--out", str(tmp_path / "out"), "--half", "report"]) == 2
    assert "no script of the report half" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
