"""Loader: hand-broken copies of the tiny checkpoint give one-line CheckpointErrors naming the file/tensor/shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts_engine.errors import CheckpointError
from tts_engine.model.loader import LoadedModel, load_model, resolve_dtype

NORM = "talker.model.norm.weight"
CODEC_HEAD = "talker.codec_head.weight"


@pytest.fixture()
def broken(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny checkpoint to damage."""
    out = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, out)
    return out


def _error(model_dir: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_model(model_dir, device="cpu")
    message = str(info.value)
    assert "\n" not in message
    return message


def _rewrite_weights(model_dir: Path, edit) -> None:
    tensors = load_file(str(model_dir / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})


def test_loads_tiny(tiny_model: LoadedModel) -> None:
    assert tiny_model.dtype == torch.float32 and tiny_model.device.type == "cpu"
    assert "serena" in tiny_model.speakers and "dylan" in tiny_model.speakers
    assert tiny_model.languages[0] == "auto" and "english" in tiny_model.languages
    assert not any(lang.endswith("_dialect") for lang in tiny_model.languages)
    assert tiny_model.predictor is tiny_model.talker.code_predictor


def test_missing_directory(tmp_path: Path) -> None:
    assert "does not exist" in _error(tmp_path / "nope")


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "model.safetensors", "vocab.json"])
def test_missing_root_file(broken: Path, name: str) -> None:
    (broken / name).unlink()
    message = _error(broken)
    assert name in message and "missing" in message


def test_missing_speech_tokenizer(broken: Path) -> None:
    shutil.rmtree(broken / "speech_tokenizer")
    message = _error(broken)
    assert "speech_tokenizer" in message and "missing" in message


def test_missing_tensor(broken: Path) -> None:
    _rewrite_weights(broken, lambda t: t.pop(NORM))
    message = _error(broken)
    assert "model.safetensors" in message and NORM in message and "[64]" in message


def test_wrong_shape(broken: Path) -> None:
    _rewrite_weights(broken, lambda t: t.__setitem__(CODEC_HEAD, torch.zeros(3000, 64)))
    message = _error(broken)
    assert CODEC_HEAD in message and "[3000, 64]" in message and "expected [3072, 64]" in message


def test_missing_config_key(broken: Path) -> None:
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["talker_config"]["codec_bos_id"]
    (broken / "config.json").write_text(json.dumps(cfg))
    message = _error(broken)
    assert "config.json" in message and "codec_bos_id" in message


def test_corrupt_json(broken: Path) -> None:
    (broken / "generation_config.json").write_text("{not json")
    assert "generation_config.json" in _error(broken)


def test_resolve_dtype() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="float64"):
        resolve_dtype("float64", cpu)


def test_cli_reports_broken_checkpoint_in_one_line(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tts_engine.__main__ import main

    _rewrite_weights(broken, lambda t: t.pop(NORM))
    rc = main(["synthesize", "--model", str(broken), "--text", "hi", "--out", str(broken / "o.wav")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("error: ") and NORM in err[-1]
