"""The codec checkpoint factory (real layout, determinism, real dims) and the loader's errors on broken folders."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts_engine.errors import CheckpointError
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_config import CodecConfig, decoder_tensor_shapes, preset_config
from tts_engine.model.codec_factory import write_codec_checkpoint

FILES = {"config.json", "model.safetensors", "preprocessor_config.json", "configuration.json"}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("codec_ckpt") / "speech_tokenizer"
    write_codec_checkpoint(folder, "tiny", seed=0)
    return folder


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_factory_writes_the_real_file_set_deterministically(tiny_folder: Path, tmp_path: Path) -> None:
    assert {p.name for p in tiny_folder.iterdir()} == FILES
    write_codec_checkpoint(tmp_path / "same", "tiny", seed=0)
    write_codec_checkpoint(tmp_path / "other", "tiny", seed=1)
    weights = tiny_folder / "model.safetensors"
    assert sha256(tmp_path / "same" / "model.safetensors") == sha256(weights)
    assert sha256(tmp_path / "other" / "model.safetensors") != sha256(weights)
    config = json.loads((tiny_folder / "config.json").read_text())
    assert config["model_type"] == "qwen3_tts_tokenizer_12hz"
    assert config["encoder_config"]["model_type"] == "mimi"
    assert config["decoder_config"]["sliding_window"] == 72
    tensors = load_file(str(weights))
    assert all(t.dtype == torch.float32 for t in tensors.values())
    assert set(tensors) == set(decoder_tensor_shapes(CodecConfig.from_json(config)))


@pytest.mark.parametrize("preset", ["0.6b", "1.7b"])
def test_real_presets_have_the_published_decoder_dims(preset: str) -> None:
    cfg = CodecConfig.from_json(preset_config(preset))
    shapes = decoder_tensor_shapes(cfg)
    # 114,323,137 = parameter count of the official Qwen3TTSTokenizerV2Model decoder built from this config
    assert sum(torch.Size(s).numel() for s in shapes.values()) == 114_323_137
    assert shapes["decoder.quantizer.rvq_rest.vq.layers.14._codebook.embedding_sum"] == (2048, 256)
    assert shapes["decoder.quantizer.rvq_first.output_proj.weight"] == (512, 256, 1)
    assert shapes["decoder.pre_transformer.layers.7.self_attn.q_proj.weight"] == (1024, 512)
    assert shapes["decoder.decoder.4.block.1.conv.weight"] == (192, 96, 6)
    assert cfg.total_upsample == 1920


def broken_copy(source: Path, target: Path, edit: dict[str, torch.Tensor | None]) -> Path:
    shutil.copytree(source, target)
    tensors = load_file(str(source / "model.safetensors"))
    for name, value in edit.items():
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    save_file(tensors, str(target / "model.safetensors"))
    return target


def test_missing_tensor_is_named(tiny_folder: Path, tmp_path: Path) -> None:
    name = "decoder.pre_transformer.layers.1.mlp.up_proj.weight"
    folder = broken_copy(tiny_folder, tmp_path / "st", {name: None})
    expected = rf"model\.safetensors: tensor {name} missing \(expected shape \[128, 64\]\)"
    with pytest.raises(CheckpointError, match=expected):
        CodecDecoder.from_pretrained(folder, "cpu")


def test_wrong_shape_is_named(tiny_folder: Path, tmp_path: Path) -> None:
    name = "decoder.decoder.2.block.1.conv.weight"
    folder = broken_copy(tiny_folder, tmp_path / "st", {name: torch.zeros(32, 16, 9)})
    with pytest.raises(CheckpointError, match=rf"tensor {name} has shape \[32, 16, 9\], expected \[32, 16, 10\]"):
        CodecDecoder.from_pretrained(folder, "cpu")


def test_missing_files_and_folder_are_named(tiny_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="speech tokenizer folder not found"):
        CodecDecoder.from_pretrained(tmp_path / "nowhere", "cpu")
    for missing in ("config.json", "model.safetensors"):
        folder = tmp_path / missing
        shutil.copytree(tiny_folder, folder)
        (folder / missing).unlink()
        with pytest.raises(CheckpointError, match=rf"{missing}: file missing"):
            CodecDecoder.from_pretrained(folder, "cpu")


def test_bad_config_is_named(tiny_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "st"
    shutil.copytree(tiny_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["decoder_config"]["codebook_dim"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: decoder_config\.codebook_dim is missing"):
        CodecDecoder.from_pretrained(folder, "cpu")
    config["decoder_config"]["codebook_dim"] = 32
    config["decoder_config"]["upsample_rates"] = [8, 5, 4, 4]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="2560"):
        CodecDecoder.from_pretrained(folder, "cpu")
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    config["decoder_config"]["upsample_rates"] = [8, 5, 4, 3]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        CodecDecoder.from_pretrained(folder, "cpu")


def test_unknown_preset_lists_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid presets: tiny, 0.6b, 1.7b"):
        write_codec_checkpoint(tmp_path, "2b", seed=0)
