"""The checkpoint doctor on damaged copies of the tiny checkpoint (tts_engine/model/factory.py): truncated,
renamed-tensor, wrong-size and wrong-config-key checkpoints are each reported in one line naming the file and the
tensor or config key, by `python -m tts_engine check`, by the loader (so Engine.load, serve, synthesize, simulate and
the worker), and by `python -m agent preflight`'s check_weights; simulate exits 2 with one line, no traceback."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts_engine.__main__ import main as tts_main
from tts_engine.config import EngineConfig
from tts_engine.doctor import diagnose
from tts_engine.errors import CheckpointError

NORM = "talker.model.norm.weight"
CODEC_HEAD = "talker.codec_head.weight"
PRE_CONV_BIAS = "decoder.pre_conv.conv.bias"


def _tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _config(path: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _truncate(path: Path, n: int = 1000) -> None:
    path.write_bytes(path.read_bytes()[:-n])


def _rename(old: str, new: str) -> Callable[[dict[str, torch.Tensor]], None]:
    return lambda t: t.__setitem__(new, t.pop(old))


# (damage, substrings the one problem line must hold, substrings it must not hold)
CASES: dict[str, tuple[Callable[[Path], None], list[str], list[str]]] = {
    "truncated": (
        lambda d: _truncate(d / "model.safetensors"),
        ["model.safetensors: truncated: its header describes", "the file has"], [],
    ),
    "truncated-speech-tokenizer": (
        lambda d: _truncate(d / "speech_tokenizer" / "model.safetensors"),
        ["speech_tokenizer/model.safetensors: truncated"], [],
    ),
    "renamed-tensor": (
        lambda d: _tensors(d / "model.safetensors", _rename(NORM, "talker.model.final_norm.weight")),
        [f"model.safetensors: 1 tensor(s) missing: {NORM} (expected [64])",
         "1 unexpected: talker.model.final_norm.weight [64]", "renamed?"], [],
    ),
    "renamed-codec-tensor": (
        lambda d: _tensors(d / "speech_tokenizer" / "model.safetensors", _rename(PRE_CONV_BIAS, "decoder.pre_conv.b")),
        ["speech_tokenizer/model.safetensors", PRE_CONV_BIAS, "decoder.pre_conv.b"], [],
    ),
    "wrong-size": (
        lambda d: _tensors(d / "model.safetensors", lambda t: t.__setitem__(CODEC_HEAD, torch.zeros(3000, 64))),
        [f"model.safetensors: tensor {CODEC_HEAD} has shape [3000, 64], expected [3072, 64]"], [],
    ),
    "wrong-hidden-size": (
        lambda d: _config(d / "config.json", lambda c: c["talker_config"].__setitem__("hidden_size", 96)),
        ["config.json: talker_config.hidden_size = 96 disagrees with the tensors",
         "which fit talker_config.hidden_size = 64"], ["has shape"],
    ),
    "wrong-kv-heads": (
        lambda d: _config(d / "config.json", lambda c: c["talker_config"].__setitem__("num_key_value_heads", 4)),
        ["config.json: talker_config.num_key_value_heads = 4", "fit talker_config.num_key_value_heads = 2"],
        ["has shape"],
    ),
    "wrong-layer-count": (
        lambda d: _config(d / "config.json",
                          lambda c: c["talker_config"]["code_predictor_config"].__setitem__("num_hidden_layers", 3)),
        ["talker_config.code_predictor_config.num_hidden_layers = 3", "= 2"], ["missing"],
    ),
    "wrong-codec-key": (
        lambda d: _config(d / "speech_tokenizer" / "config.json",
                          lambda c: c["decoder_config"].__setitem__("hidden_size", 48)),
        ["speech_tokenizer/config.json: decoder_config.hidden_size = 48", "fit decoder_config.hidden_size = 64"],
        ["has shape"],
    ),
    "zero-heads": (
        lambda d: _config(d / "config.json", lambda c: c["talker_config"].__setitem__("num_attention_heads", 0)),
        ["config.json: talker_config.num_attention_heads = 0 is not allowed"], [],
    ),
}


@pytest.fixture()
def checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, out)
    return out


def test_the_tiny_checkpoint_is_healthy(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tts_main(["check", "--model", str(tiny_checkpoint)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok: {tiny_checkpoint}") and "model.safetensors: 83 tensors" in out


@pytest.mark.parametrize("case", list(CASES))
def test_each_damage_is_one_line_naming_the_file_and_the_key(checkpoint: Path, case: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    damage, wanted, unwanted = CASES[case]
    damage(checkpoint)
    assert tts_main(["check", "--model", str(checkpoint)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {checkpoint}/")
    for text in wanted:
        assert text in lines[0], (text, lines[0])
    for text in unwanted:
        assert text not in lines[0], (text, lines[0])

    # the loader runs the same doctor before reading any weight: the same line, not the first tensor it trips on
    from tts_engine.model.loader import load_model

    with pytest.raises(CheckpointError) as info:
        load_model(checkpoint, device="cpu")
    assert str(info.value) == lines[0].removeprefix("error: ")

    from agent.preflight import check_weights

    check = check_weights(dataclasses.replace(EngineConfig.from_env({}), model_dir=str(checkpoint)))
    assert not check.ok and "\n" not in check.detail and lines[0].removeprefix("error: ") in check.detail


def test_every_problem_is_listed_not_only_the_first(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tensors(checkpoint / "model.safetensors", lambda t: (t.pop(CODEC_HEAD), t.pop(NORM)))
    _truncate(checkpoint / "speech_tokenizer" / "model.safetensors")
    (checkpoint / "merges.txt").unlink()
    assert tts_main(["check", "--model", str(checkpoint)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert CODEC_HEAD in lines[0] and NORM in lines[0] and "2 tensor(s) missing" in lines[0]
    assert "merges.txt" in lines[1] and "speech_tokenizer/model.safetensors: truncated" in lines[2]
    assert len(diagnose(checkpoint).problems) == 3


def test_engine_load_and_serve_refuse_with_the_key_named(checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tts_engine.engine import Engine

    CASES["wrong-hidden-size"][0](checkpoint)
    config = dataclasses.replace(EngineConfig.from_env({}), device="cpu")
    with pytest.raises(CheckpointError, match=r"talker_config\.hidden_size = 96"):
        Engine.load(checkpoint, config)
    with caplog.at_level(logging.ERROR):
        rc = tts_main(["serve", "--model", str(checkpoint), "--device", "cpu", "--port", "0", "--env-file", "/none"])
    assert rc == 2 and "talker_config.hidden_size = 96" in caplog.text


def test_synthesize_refuses_with_one_line(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    CASES["truncated"][0](checkpoint)
    rc = tts_main(["synthesize", "--model", str(checkpoint), "--text", "hi", "--out", str(checkpoint / "o.wav")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "model.safetensors: truncated" in err[0]


def test_simulate_on_a_broken_checkpoint_prints_one_line_and_exits_2(  # the lab runs in a child: capfd
    checkpoint: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from agent.__main__ import main as agent_main

    CASES["renamed-tensor"][0](checkpoint)
    rc = agent_main(["simulate", "--model-dir", str(checkpoint), "--out", str(tmp_path / "sim")])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("[simulate] ") and "talker.model.final_norm.weight" in err[0]
    assert "Traceback" not in err[0]
