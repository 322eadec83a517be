"""Random-weight speech-tokenizer folder in the real Qwen3-TTS layout (for tests and GPU benchmarks).

Contract: `write_codec_checkpoint(out_dir, preset, seed)` writes `out_dir/{config.json, model.safetensors,
preprocessor_config.json, configuration.json}` exactly as the published `speech_tokenizer/` folder is laid out:
the decoder's tensors by their real names and shapes (`codec_config.decoder_tensor_shapes`), fp32, filled from a
`torch.Generator` seeded with `seed` (same seed -> same bytes).

Only the decoder is written. The Mimi encoder (`encoder.*`) is used for voice cloning, never by CustomVoice; its
config block is present (the official loader needs it) but its weights are omitted, so the official
`from_pretrained` initialises them itself and our loader ignores them.

Weight scales (docs/codec.md, "Test checkpoints") make the waveform a useful parity signal
(std ~0.1, little clipping, every code audible): weights N(0, 0.8/sqrt(fan_in)), biases N(0, 0.02),
codebook sums N(0, 1) over usages U(0.5, 1.5), SnakeBeta log-alpha/log-beta U(-0.1, 0.1), norm weights
1 +- 0.02. Residual scales (LayerScale, ConvNeXt gamma) are drawn around 0.1 rather than the 0.01 training
init, so the sliding-window attention visibly shapes the output and a window off-by-one fails the parity test.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from common.audio_format import SAMPLE_RATE
from tts_engine.model.codec_config import CodecConfig, decoder_tensor_shapes, preset_config
from tts_engine.model.layout import CONFIG_FILE, MODELSCOPE_CONFIG, MODELSCOPE_FILE, PREPROCESSOR_FILE, WEIGHTS_FILE

PREPROCESSOR_CONFIG = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": SAMPLE_RATE,
}


def _fan_in(shape: tuple[int, ...]) -> int:
    # Linear [out, in], Conv1d [out, in/groups, k] and ConvTranspose1d [in, out, k] alike: product of all but dim 0.
    # (For the transposed convs this under-counts the true fan-in, which keeps the SnakeBeta stack from growing.)
    fan = 1
    for dim in shape[1:]:
        fan *= dim
    return fan


def _init_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    def normal(std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    def uniform(low: float, high: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen, dtype=torch.float32) * (high - low) + low

    leaf = name.rsplit(".", 1)[-1]
    if leaf == "embedding_sum":
        return normal(1.0)
    if leaf == "cluster_usage":
        return uniform(0.5, 1.5)
    if leaf in ("alpha", "beta"):
        return uniform(-0.1, 0.1)
    if leaf == "scale" or leaf == "gamma":
        return uniform(0.05, 0.15)
    if "norm" in name.rsplit(".", 2)[-2]:  # RMSNorm / LayerNorm parameters
        return normal(0.02, 1.0) if leaf == "weight" else normal(0.02)
    if leaf == "bias":
        return normal(0.02)
    return normal(0.8 / _fan_in(shape) ** 0.5)


def write_codec_checkpoint(out_dir: Path, preset: str, seed: int) -> None:
    """Write a random-weight `speech_tokenizer/` folder for `preset` ("tiny" | "0.6b" | "1.7b") into `out_dir`."""
    config = preset_config(preset)
    cfg = CodecConfig.from_json(config)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {name: _init_tensor(name, shape, gen) for name, shape in decoder_tensor_shapes(cfg).items()}
    save_file(tensors, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    for file_name, content in (
        (CONFIG_FILE, config),
        (PREPROCESSOR_FILE, PREPROCESSOR_CONFIG),
        (MODELSCOPE_FILE, MODELSCOPE_CONFIG),
    ):
        (out_dir / file_name).write_text(json.dumps(content, indent=2) + "\n")
