"""Configuration and tensor inventory of the 12 Hz speech-tokenizer decoder (Qwen3-TTS "tokenizer v2").

Contract:
- `CodecConfig.from_json(dict)` parses `speech_tokenizer/config.json` (its `decoder_config` block plus the
  top-level rates) and raises `CheckpointError` naming the key when a required value is missing or inconsistent.
- `decoder_tensor_shapes(cfg)` lists every decoder tensor of the real checkpoint layout
  (`decoder.*` names as stored in `speech_tokenizer/model.safetensors`) with its shape. The loader checks a
  checkpoint against it and the factory writes exactly these tensors.
- `PRESET_CONFIGS` holds the config.json contents the factory writes: "tiny" (CPU tests) and the real dims
  shared by the 0.6B and 1.7B checkpoints.

Layout facts (docs/codec.md): the quantizer works in `codebook_dim // 2` dimensions with
1x1 input/output projections to `codebook_dim`; ConvTranspose weights are [in, out, k]; decoder block i maps
`decoder_dim / 2**i` to `decoder_dim / 2**(i+1)` channels with kernel 2*rate and stride rate.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.errors import CheckpointError

RESIDUAL_DILATIONS = (1, 3, 9)


@dataclass(frozen=True)
class CodecConfig:
    codebook_size: int
    codebook_dim: int  # quantizer output width (the per-codebook vectors are codebook_dim // 2 wide)
    latent_dim: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int
    sliding_window: int
    rms_norm_eps: float
    rope_theta: float
    num_quantizers: int
    num_semantic_quantizers: int
    decoder_dim: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    hidden_act: str
    attention_bias: bool

    @property
    def vq_dim(self) -> int:
        return self.codebook_dim // 2

    @property
    def total_upsample(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)

    def block_dims(self, index: int) -> tuple[int, int]:
        """(in, out) channels of decoder block `index` (0-based among the SnakeBeta blocks)."""
        return self.decoder_dim // 2**index, self.decoder_dim // 2 ** (index + 1)

    @property
    def output_dim(self) -> int:
        return self.decoder_dim // 2 ** len(self.upsample_rates)

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "speech_tokenizer/config.json") -> CodecConfig:
        dec = data.get("decoder_config")
        if not isinstance(dec, dict):
            raise CheckpointError(f"{source}: missing object 'decoder_config'")

        def need(key: str, default: Any = None) -> Any:
            if key in dec and dec[key] is not None:
                return dec[key]
            if default is not None:
                return default
            raise CheckpointError(f"{source}: decoder_config.{key} is missing (required)")

        heads = int(need("num_attention_heads", 16))
        hidden = int(need("hidden_size", 1024))
        cfg = cls(
            codebook_size=int(need("codebook_size", 2048)),
            codebook_dim=int(need("codebook_dim")),  # no default in the official class either
            latent_dim=int(need("latent_dim", 1024)),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=int(need("num_key_value_heads", 16)),
            head_dim=int(dec.get("head_dim") or hidden // heads),
            intermediate_size=int(need("intermediate_size", 3072)),
            num_hidden_layers=int(need("num_hidden_layers", 8)),
            sliding_window=int(need("sliding_window", 72)),
            rms_norm_eps=float(need("rms_norm_eps", 1e-5)),
            rope_theta=float(need("rope_theta", 10000)),
            num_quantizers=int(need("num_quantizers", 16)),
            num_semantic_quantizers=int(dec.get("num_semantic_quantizers") or 1),
            decoder_dim=int(need("decoder_dim", 1536)),
            upsample_rates=tuple(int(r) for r in need("upsample_rates", [8, 5, 4, 3])),
            upsampling_ratios=tuple(int(r) for r in need("upsampling_ratios", [2, 2])),
            hidden_act=str(need("hidden_act", "silu")),
            attention_bias=bool(dec.get("attention_bias", False)),
        )
        if cfg.hidden_act != "silu":
            raise CheckpointError(f"{source}: decoder_config.hidden_act={cfg.hidden_act!r}; only 'silu' is supported")
        if cfg.num_semantic_quantizers != 1:
            raise CheckpointError(
                f"{source}: decoder_config.num_semantic_quantizers={cfg.num_semantic_quantizers}; only 1 is supported"
            )
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise CheckpointError(f"{source}: num_attention_heads must be a multiple of num_key_value_heads")
        upsample = int(data.get("decode_upsample_rate", cfg.total_upsample))
        if cfg.total_upsample != SAMPLES_PER_FRAME or upsample != SAMPLES_PER_FRAME:
            raise CheckpointError(
                f"{source}: upsample_rates x upsampling_ratios = {cfg.total_upsample} (decode_upsample_rate "
                f"{upsample}); the engine needs {SAMPLES_PER_FRAME} samples per frame"
            )
        if int(data.get("output_sample_rate", SAMPLE_RATE)) != SAMPLE_RATE:
            raise CheckpointError(f"{source}: output_sample_rate must be {SAMPLE_RATE}")
        return cfg


def decoder_tensor_shapes(cfg: CodecConfig) -> dict[str, tuple[int, ...]]:
    """Every `decoder.*` tensor of the real speech-tokenizer checkpoint, with its shape."""
    shapes: dict[str, tuple[int, ...]] = {}
    vq, cd = cfg.vq_dim, cfg.codebook_dim
    for group, count in (("rvq_first", cfg.num_semantic_quantizers), ("rvq_rest", cfg.num_quantizers - 1)):
        base = f"decoder.quantizer.{group}"
        shapes[f"{base}.input_proj.weight"] = (vq, cd, 1)
        shapes[f"{base}.output_proj.weight"] = (cd, vq, 1)
        for i in range(count):
            shapes[f"{base}.vq.layers.{i}._codebook.cluster_usage"] = (cfg.codebook_size,)
            shapes[f"{base}.vq.layers.{i}._codebook.embedding_sum"] = (cfg.codebook_size, vq)

    shapes["decoder.pre_conv.conv.weight"] = (cfg.latent_dim, cd, 3)
    shapes["decoder.pre_conv.conv.bias"] = (cfg.latent_dim,)

    h, attn = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    pt = "decoder.pre_transformer"
    shapes[f"{pt}.input_proj.weight"] = (h, cfg.latent_dim)
    shapes[f"{pt}.input_proj.bias"] = (h,)
    shapes[f"{pt}.output_proj.weight"] = (cfg.latent_dim, h)
    shapes[f"{pt}.output_proj.bias"] = (cfg.latent_dim,)
    shapes[f"{pt}.norm.weight"] = (h,)
    for i in range(cfg.num_hidden_layers):
        layer = f"{pt}.layers.{i}"
        shapes[f"{layer}.input_layernorm.weight"] = (h,)
        shapes[f"{layer}.post_attention_layernorm.weight"] = (h,)
        shapes[f"{layer}.self_attn.q_proj.weight"] = (attn, h)
        shapes[f"{layer}.self_attn.k_proj.weight"] = (kv, h)
        shapes[f"{layer}.self_attn.v_proj.weight"] = (kv, h)
        shapes[f"{layer}.self_attn.o_proj.weight"] = (h, attn)
        if cfg.attention_bias:
            for proj, width in (("q", attn), ("k", kv), ("v", kv), ("o", h)):
                shapes[f"{layer}.self_attn.{proj}_proj.bias"] = (width,)
        shapes[f"{layer}.mlp.gate_proj.weight"] = (cfg.intermediate_size, h)
        shapes[f"{layer}.mlp.up_proj.weight"] = (cfg.intermediate_size, h)
        shapes[f"{layer}.mlp.down_proj.weight"] = (h, cfg.intermediate_size)
        shapes[f"{layer}.self_attn_layer_scale.scale"] = (h,)
        shapes[f"{layer}.mlp_layer_scale.scale"] = (h,)

    lat = cfg.latent_dim
    for i, factor in enumerate(cfg.upsampling_ratios):
        up = f"decoder.upsample.{i}"
        shapes[f"{up}.0.conv.weight"] = (lat, lat, factor)
        shapes[f"{up}.0.conv.bias"] = (lat,)
        shapes[f"{up}.1.dwconv.conv.weight"] = (lat, 1, 7)
        shapes[f"{up}.1.dwconv.conv.bias"] = (lat,)
        shapes[f"{up}.1.norm.weight"] = (lat,)
        shapes[f"{up}.1.norm.bias"] = (lat,)
        shapes[f"{up}.1.pwconv1.weight"] = (4 * lat, lat)
        shapes[f"{up}.1.pwconv1.bias"] = (4 * lat,)
        shapes[f"{up}.1.pwconv2.weight"] = (lat, 4 * lat)
        shapes[f"{up}.1.pwconv2.bias"] = (lat,)
        shapes[f"{up}.1.gamma"] = (lat,)

    shapes["decoder.decoder.0.conv.weight"] = (cfg.decoder_dim, lat, 7)
    shapes["decoder.decoder.0.conv.bias"] = (cfg.decoder_dim,)
    for b, rate in enumerate(cfg.upsample_rates):
        cin, cout = cfg.block_dims(b)
        blk = f"decoder.decoder.{b + 1}.block"
        shapes[f"{blk}.0.alpha"] = (cin,)
        shapes[f"{blk}.0.beta"] = (cin,)
        shapes[f"{blk}.1.conv.weight"] = (cin, cout, 2 * rate)
        shapes[f"{blk}.1.conv.bias"] = (cout,)
        for u in range(len(RESIDUAL_DILATIONS)):
            unit = f"{blk}.{u + 2}"
            for act in ("act1", "act2"):
                shapes[f"{unit}.{act}.alpha"] = (cout,)
                shapes[f"{unit}.{act}.beta"] = (cout,)
            shapes[f"{unit}.conv1.conv.weight"] = (cout, cout, 7)
            shapes[f"{unit}.conv1.conv.bias"] = (cout,)
            shapes[f"{unit}.conv2.conv.weight"] = (cout, cout, 1)
            shapes[f"{unit}.conv2.conv.bias"] = (cout,)
    n = len(cfg.upsample_rates)
    shapes[f"decoder.decoder.{n + 1}.alpha"] = (cfg.output_dim,)
    shapes[f"decoder.decoder.{n + 1}.beta"] = (cfg.output_dim,)
    shapes[f"decoder.decoder.{n + 2}.conv.weight"] = (1, cfg.output_dim, 7)
    shapes[f"decoder.decoder.{n + 2}.conv.bias"] = (1,)
    return shapes


_TOP_LEVEL: dict[str, Any] = {
    "architectures": ["Qwen3TTSTokenizerV2Model"],
    "model_type": "qwen3_tts_tokenizer_12hz",
    "encoder_valid_num_quantizers": 16,
    "input_sample_rate": SAMPLE_RATE,
    "output_sample_rate": SAMPLE_RATE,
    "decode_upsample_rate": SAMPLES_PER_FRAME,
    "encode_downsample_rate": SAMPLES_PER_FRAME,
}


def _mimi_encoder(hidden: int, filters: int, layers: int, inter: int, heads: int, vq_dim: int) -> dict[str, Any]:
    # Mimi encoder as the 12 Hz tokenizer configures it (frame rate 12.5 Hz, 32 quantizers); unused by CustomVoice.
    return {
        "model_type": "mimi",
        "sampling_rate": SAMPLE_RATE,
        "audio_channels": 1,
        "hidden_size": hidden,
        "num_filters": filters,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 6, 5, 4],
        "kernel_size": 7,
        "last_kernel_size": 3,
        "residual_kernel_size": 3,
        "dilation_growth_rate": 2,
        "use_causal_conv": True,
        "pad_mode": "constant",
        "compress": 2,
        "trim_right_ratio": 1.0,
        "codebook_size": 2048,
        "codebook_dim": vq_dim,
        "num_quantizers": 32,
        "use_conv_shortcut": False,
        "vector_quantization_hidden_dimension": vq_dim,
        "num_semantic_quantizers": 1,
        "upsample_groups": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": hidden // heads,
        "hidden_act": "gelu",
        "max_position_embeddings": 8000,
        "norm_eps": 1e-05,
        "use_cache": False,
        "use_streaming": False,
        "rope_theta": 10000.0,
        "sliding_window": 250,
        "attention_dropout": 0.0,
        "layer_scale_initial_scale": 0.01,
        "attention_bias": False,
        "_frame_rate": 12.5,
    }


def _decoder(**dims: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "codebook_size": 2048,
        "codebook_dim": 512,
        "hidden_size": 512,
        "latent_dim": 1024,
        "decoder_dim": 1536,
        "max_position_embeddings": 8000,
        "rope_theta": 10000,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 64,
        "attention_bias": False,
        "sliding_window": 72,
        "intermediate_size": 1024,
        "hidden_act": "silu",
        "layer_scale_initial_scale": 0.01,
        "rms_norm_eps": 1e-05,
        "num_hidden_layers": 8,
        "num_quantizers": 16,
        "num_semantic_quantizers": 1,
        "semantic_codebook_size": 4096,
        "vector_quantization_hidden_dimension": 512,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "attention_dropout": 0.0,
    }
    base.update(dims)
    return base


_REAL = {
    **_TOP_LEVEL,
    "encoder_config": _mimi_encoder(hidden=512, filters=64, layers=8, inter=2048, heads=8, vq_dim=256),
    "decoder_config": _decoder(),
    "transformers_version": "4.57.3",
}

PRESET_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {
        **_TOP_LEVEL,
        "encoder_config": _mimi_encoder(hidden=32, filters=4, layers=2, inter=64, heads=2, vq_dim=16),
        "decoder_config": _decoder(
            codebook_dim=32,
            hidden_size=64,
            latent_dim=64,
            decoder_dim=64,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=16,
            intermediate_size=128,
            num_hidden_layers=2,
            vector_quantization_hidden_dimension=32,
        ),
        "transformers_version": "4.57.3",
    },
    "0.6b": _REAL,
    "1.7b": _REAL,  # both sizes ship the same speech tokenizer
}


def preset_config(preset: str) -> dict[str, Any]:
    if preset not in PRESET_CONFIGS:
        raise ValueError(f"unknown codec preset {preset!r}; valid presets: {', '.join(PRESET_CONFIGS)}")
    return copy.deepcopy(PRESET_CONFIGS[preset])
