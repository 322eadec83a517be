"""Parsed talker configuration: root `config.json` + `generation_config.json` of a Qwen3-TTS checkpoint.

Contract: `ModelConfig.from_dir(model_dir)` reads both files (the real transformers-4.57 layout: docs/model.md,
"Checkpoint compatibility") and returns plain dataclasses; a missing file, a missing key or a value
of the wrong type raises `CheckpointError` naming the file and the key. Nothing here touches torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_engine.errors import CheckpointError
from tts_engine.model.layout import CONFIG_FILE, GENERATION_CONFIG_FILE


@dataclass(frozen=True)
class StackConfig:
    """One Qwen3-style decoder stack (the talker's or the code predictor's)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    max_position_embeddings: int


@dataclass(frozen=True)
class GenerationDefaults:
    """Sampling defaults from generation_config.json (the official wrapper's defaults when keys are absent)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_do_sample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048


@dataclass(frozen=True)
class ModelConfig:
    talker: StackConfig
    predictor: StackConfig
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int
    tts_model_size: str
    tts_model_type: str
    # text-token ids
    im_start_id: int
    im_end_id: int
    tts_pad_id: int
    tts_bos_id: int
    tts_eos_id: int
    # codec-token ids
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    language_ids: dict[str, int] = field(default_factory=dict)
    speaker_ids: dict[str, int] = field(default_factory=dict)
    speaker_dialect: dict[str, str | None] = field(default_factory=dict)
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)

    @property
    def speakers(self) -> list[str]:
        return sorted(self.speaker_ids)

    @property
    def languages(self) -> list[str]:
        """"auto" plus every language key that is not a dialect (dialects are chosen by the speaker)."""
        return ["auto"] + sorted(k for k in self.language_ids if not k.endswith("_dialect"))

    @property
    def supports_instruct(self) -> bool:
        # The official wrapper drops the instruction when `tts_model_size in "0b6"` (a substring test).
        return self.tts_model_size not in "0b6"

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        model_dir = Path(model_dir)
        root = _read_json(model_dir / CONFIG_FILE)
        gen = _read_json(model_dir / GENERATION_CONFIG_FILE)
        return cls.from_dicts(root, gen, model_dir / CONFIG_FILE)

    @classmethod
    def from_dicts(cls, root: dict[str, Any], gen: dict[str, Any], path: Path | str = CONFIG_FILE) -> ModelConfig:
        r = _Keys(root, str(path))
        t = _Keys(r.get("talker_config", dict), f"{path} talker_config")
        p = _Keys(t.get("code_predictor_config", dict), f"{path} talker_config.code_predictor_config")
        rope = t.get("rope_scaling", dict)
        if "mrope_section" not in rope or "interleaved" not in rope:
            raise CheckpointError(
                f"{path}: talker_config.rope_scaling must contain 'mrope_section' and 'interleaved' (got {rope})"
            )
        talker = _stack(t)
        if 2 * sum(rope["mrope_section"]) != talker.head_dim:
            raise CheckpointError(
                f"{path}: talker_config.rope_scaling.mrope_section {rope['mrope_section']} must sum to "
                f"head_dim/2 = {talker.head_dim // 2}"
            )
        dialect_raw = t.get("spk_is_dialect", dict)
        speaker_ids = {k.lower(): int(v) for k, v in t.get("spk_id", dict).items()}
        language_ids = {k.lower(): int(v) for k, v in t.get("codec_language_id", dict).items()}
        speaker_dialect: dict[str, str | None] = {}
        for name in speaker_ids:
            value = dialect_raw.get(name, False)
            if value and str(value).lower() not in language_ids:
                raise CheckpointError(
                    f"{path}: talker_config.spk_is_dialect[{name!r}] = {value!r} is not a codec_language_id key"
                )
            speaker_dialect[name] = str(value).lower() if value else None
        return cls(
            talker=talker,
            predictor=_stack(p),
            text_vocab_size=t.get("text_vocab_size", int),
            text_hidden_size=t.get("text_hidden_size", int),
            num_code_groups=t.get("num_code_groups", int),
            tts_model_size=str(root.get("tts_model_size", "")),
            tts_model_type=str(root.get("tts_model_type", "custom_voice")),
            im_start_id=int(root.get("im_start_token_id", 151644)),
            im_end_id=int(root.get("im_end_token_id", 151645)),
            tts_pad_id=r.get("tts_pad_token_id", int),
            tts_bos_id=r.get("tts_bos_token_id", int),
            tts_eos_id=r.get("tts_eos_token_id", int),
            codec_pad_id=t.get("codec_pad_id", int),
            codec_bos_id=t.get("codec_bos_id", int),
            codec_eos_id=t.get("codec_eos_token_id", int),
            codec_think_id=t.get("codec_think_id", int),
            codec_nothink_id=t.get("codec_nothink_id", int),
            codec_think_bos_id=t.get("codec_think_bos_id", int),
            codec_think_eos_id=t.get("codec_think_eos_id", int),
            language_ids=language_ids,
            speaker_ids=speaker_ids,
            speaker_dialect=speaker_dialect,
            generation=_generation(gen),
        )


class _Keys:
    """Typed access to one JSON object with errors that name the file and key."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise CheckpointError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def get(self, key: str, kind: type) -> Any:
        if key not in self.data:
            raise CheckpointError(f"{self.where}: missing key {key!r}")
        value = self.data[key]
        if kind is int and isinstance(value, int | float) and not isinstance(value, bool) and int(value) == value:
            return int(value)
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind):
            raise CheckpointError(f"{self.where}: key {key!r} = {value!r} is not a {kind.__name__}")
        return value


def _stack(k: _Keys) -> StackConfig:
    hidden = k.get("hidden_size", int)
    heads = k.get("num_attention_heads", int)
    head_dim = int(k.data.get("head_dim") or hidden // heads)
    return StackConfig(
        num_layers=k.get("num_hidden_layers", int),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=k.get("num_key_value_heads", int),
        head_dim=head_dim,
        intermediate_size=k.get("intermediate_size", int),
        rms_norm_eps=float(k.data.get("rms_norm_eps", 1e-6)),
        rope_theta=float(k.data.get("rope_theta", 1_000_000.0)),
        vocab_size=k.get("vocab_size", int),
        max_position_embeddings=int(k.data.get("max_position_embeddings", 32768)),
    )


def _generation(gen: dict[str, Any]) -> GenerationDefaults:
    d = GenerationDefaults()
    return GenerationDefaults(
        do_sample=bool(gen.get("do_sample", d.do_sample)),
        temperature=float(gen.get("temperature", d.temperature)),
        top_k=int(gen.get("top_k", d.top_k)),
        top_p=float(gen.get("top_p", d.top_p)),
        repetition_penalty=float(gen.get("repetition_penalty", d.repetition_penalty)),
        subtalker_do_sample=bool(gen.get("subtalker_dosample", d.subtalker_do_sample)),
        subtalker_temperature=float(gen.get("subtalker_temperature", d.subtalker_temperature)),
        subtalker_top_k=int(gen.get("subtalker_top_k", d.subtalker_top_k)),
        subtalker_top_p=float(gen.get("subtalker_top_p", d.subtalker_top_p)),
        max_new_tokens=int(gen.get("max_new_tokens", d.max_new_tokens)),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.parent.is_dir():
        raise CheckpointError(f"{path.parent}: model directory does not exist")
    if not path.is_file():
        raise CheckpointError(f"{path}: required file is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object at the top level")
    return data
