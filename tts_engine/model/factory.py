"""Random-weight Qwen3-TTS CustomVoice checkpoints in the exact real Hugging Face layout.

Contract: `make_checkpoint(preset, out_dir, seed)` writes
`config.json generation_config.json model.safetensors preprocessor_config.json configuration.json
vocab.json merges.txt tokenizer_config.json speech_tokenizer/*` (the last via M2's `write_codec_checkpoint`).
- Configs are written by hand in the real transformers-4.57 layout (`rope_scaling`, not `rope_parameters`).
- Tensor names/shapes come from our own module tree (`talker.TTSWeights`), which mirrors the real one.
  Values: N(0, 0.02) for matrices, embeddings and biases, 1 + N(0, 0.02) for norm weights, from one
  `torch.Generator` seeded with `seed`, tensor by tensor in name order (same seed -> same bytes).
- "tiny": 2-layer stacks, fp32, builds in seconds. "0.6b"/"1.7b": the real shapes, talker file in bf16 (the
  speech tokenizer stays fp32); tensors are generated one at a time (peak RAM ~ the bf16 file plus one fp32 tensor).
- The text tokenizer is a small byte-level BPE trained with `tokenizers` whose byte tokens carry the GPT-2/Qwen2
  ids (so "\\n" is 198) and whose specials and chat-template words carry the real Qwen2 ids *in vocab.json*
  (transformers 5 ignores ids listed only in tokenizer_config.json; docs/model.md, "Random checkpoints").
CLI: `python -m tts_engine make-checkpoint --preset tiny|0.6b|1.7b --out DIR [--seed N]` (make_checkpoint_cli.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from common.audio_format import SAMPLE_RATE
from tts_engine.model.codec_factory import write_codec_checkpoint
from tts_engine.model.config import ModelConfig
from tts_engine.model.layout import (
    CODEC_DIR,
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    MODELSCOPE_CONFIG,
    MODELSCOPE_FILE,
    PREPROCESSOR_FILE,
    PRESETS,
    WEIGHTS_FILE,
)
from tts_engine.model.talker import TTSWeights

# Real codec-token tables of the CustomVoice models (their config.json `codec_language_id` / `spk_id`).
LANGUAGE_IDS = {
    "english": 2050, "german": 2053, "spanish": 2054, "chinese": 2055, "japanese": 2058, "french": 2061,
    "sichuan_dialect": 2062, "korean": 2064, "russian": 2069, "italian": 2070, "portuguese": 2071,
    "beijing_dialect": 2074,
}
SPEAKER_IDS = {
    "aiden": 2861, "sohee": 2864, "ono_anna": 2873, "eric": 2875, "dylan": 2878, "uncle_fu": 3010,
    "ryan": 3061, "vivian": 3065, "serena": 3066,
}
SPEAKER_DIALECT: dict[str, str | bool] = {name: False for name in SPEAKER_IDS} | {
    "dylan": "beijing_dialect", "eric": "sichuan_dialect",
}
SPECIAL_TOKENS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|audio_start|>": 151669,
    "<|audio_end|>": 151670, "<tts_pad>": 151671, "<tts_text_bos>": 151672, "<tts_text_eod>": 151673,
    "<tts_text_bos_single>": 151674, "<|audio_pad|>": 151675,
}
TEMPLATE_WORDS = {"assistant": 77091, "user": 872, "system": 8948}

GENERATION_CONFIG = {
    "do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
    "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0, "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}
PREPROCESSOR_CONFIG = {
    "padding_side": "left", "padding_value": 0.0, "processor_class": "Qwen3TTSProcessor", "return_attention_mask": True,
}

# (layers, hidden, heads, kv_heads, head_dim, intermediate, mrope_section, text_hidden) per preset
_TALKER_DIMS: dict[str, tuple[int, int, int, int, int, int, list[int], int]] = {
    "tiny": (2, 64, 4, 2, 16, 128, [4, 2, 2], 32),
    "0.6b": (28, 1024, 16, 8, 128, 3072, [24, 20, 20], 2048),
    "1.7b": (28, 2048, 16, 8, 128, 6144, [24, 20, 20], 2048),
}
# (layers, hidden, heads, kv_heads, head_dim, intermediate) of the code predictor
_PREDICTOR_DIMS: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny": (2, 64, 4, 2, 16, 128),
    "0.6b": (5, 1024, 16, 8, 128, 3072),
    "1.7b": (5, 1024, 16, 8, 128, 3072),
}
_MODEL_SIZE = {"tiny": "0b6", "0.6b": "0b6", "1.7b": "1b7"}


def root_config(preset: str) -> dict[str, Any]:
    """The root config.json for a preset, key for key in the real layout."""
    layers, hidden, heads, kv, head_dim, inter, mrope, text_hidden = _TALKER_DIMS[preset]
    p_layers, p_hidden, p_heads, p_kv, p_head_dim, p_inter = _PREDICTOR_DIMS[preset]
    predictor = {
        "model_type": "qwen3_tts_talker_code_predictor",
        "num_hidden_layers": p_layers, "hidden_size": p_hidden, "num_attention_heads": p_heads,
        "num_key_value_heads": p_kv, "head_dim": p_head_dim, "intermediate_size": p_inter, "hidden_act": "silu",
        "max_position_embeddings": 65536, "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": None,
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "max_window_layers": p_layers,
        "layer_types": ["full_attention"] * p_layers, "attention_dropout": 0.0, "vocab_size": 2048,
        "num_code_groups": 16, "initializer_range": 0.02, "use_cache": True, "tie_word_embeddings": False,
    }
    talker = {
        "model_type": "qwen3_tts_talker",
        "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": head_dim, "intermediate_size": inter, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
        "rope_scaling": {"interleaved": True, "mrope_section": mrope, "rope_type": "default"},
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "attention_dropout": 0.0,
        "vocab_size": 3072, "text_vocab_size": 151936, "text_hidden_size": text_hidden, "num_code_groups": 16,
        "position_id_per_seconds": 13, "initializer_range": 0.02, "use_cache": True, "tie_word_embeddings": False,
        "codec_pad_id": 2148, "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
        "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157,
        "codec_language_id": dict(LANGUAGE_IDS), "spk_id": dict(SPEAKER_IDS), "spk_is_dialect": dict(SPEAKER_DIALECT),
        "code_predictor_config": predictor,
    }
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": _MODEL_SIZE[preset],
        "tts_model_type": "custom_voice",
        "im_start_token_id": 151644, "im_end_token_id": 151645, "assistant_token_id": 77091,
        "tts_pad_token_id": 151671, "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
        "talker_config": talker,
        "speaker_encoder_config": {"enc_dim": hidden, "sample_rate": SAMPLE_RATE},
        "transformers_version": "4.57.3",
    }


def _random_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if "norm" in name.rsplit(".", 2)[-2]:
        return 1.0 + torch.randn(shape, generator=gen) * 0.02
    return torch.randn(shape, generator=gen) * 0.02


def write_talker_weights(cfg_dict: dict[str, Any], path: Path, dtype: torch.dtype, seed: int,
                         progress: bool = False) -> int:
    """Random talker weights for a root config dict (shapes from our module tree) into `path`."""
    cfg = ModelConfig.from_dicts(cfg_dict, GENERATION_CONFIG)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in TTSWeights(cfg).state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    total = sum(int(torch.Size(s).numel()) for s in shapes.values())
    done = 0
    last = time.monotonic()
    for name in sorted(shapes):
        tensors[name] = _random_tensor(name, shapes[name], gen).to(dtype)
        done += tensors[name].numel()
        if progress and (time.monotonic() - last > 2.0 or done == total):
            last = time.monotonic()
            print(f"  weights {done / 1e6:,.0f}M / {total / 1e6:,.0f}M parameters", file=sys.stderr, flush=True)
    if progress:
        print(f"  writing {path} ...", file=sys.stderr, flush=True)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return total


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table; its order is the id order of the 256 byte tokens."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


_CORPUS = [
    "assistant", "user", "system", "hello world", "Hello, how are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "This is a test of the speech synthesis engine.", "Thank you very much for calling.", "Good morning, everyone.",
    "We stream audio as soon as it exists.", "Numbers like 12, 345 and 6789 are read aloud.", "What time is it?",
    "你好，世界。", "今天天气很好。", "我们一起去吃饭吧。", "北京欢迎你。", "Guten Tag, wie geht es Ihnen?",
    "Bonjour tout le monde.", "Hola, ¿cómo estás?", "こんにちは、元気ですか。", "안녕하세요.",
]


def write_tokenizer(out_dir: Path) -> None:
    """Train a small byte-level BPE and write vocab.json / merges.txt / tokenizer_config.json with the real ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False, min_frequency=2
    )
    # repeat the chat-template words so each becomes a single token, as in the real vocabulary
    corpus = _CORPUS * 4 + [f"{w}\n" for w in TEMPLATE_WORDS for _ in range(50)]
    tok.train_from_iterator(corpus, trainer)
    raw_merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in raw_merges]
    vocab: dict[str, int] = {ch: i for i, ch in enumerate(_bytes_to_unicode().values())}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    for word, real_id in TEMPLATE_WORDS.items():
        if word not in vocab:
            raise RuntimeError(f"tokenizer training did not produce the single token {word!r}")
        vocab[word] = real_id
    vocab.update(SPECIAL_TOKENS)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    (out_dir / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
    )
    added = {
        str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}
        for s, i in SPECIAL_TOKENS.items()
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "unk_token": None, "model_max_length": 131072, "add_prefix_space": False,
        "split_special_tokens": False, "errors": "replace", "clean_up_tokenization_spaces": False,
        "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>", "audio_token": "<|audio_pad|>",
        "additional_special_tokens": [s for s in SPECIAL_TOKENS if s not in ("<|endoftext|>", "<|im_end|>")],
        "added_tokens_decoder": added,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n")


def make_checkpoint(preset: str, out_dir: str | Path, seed: int = 0, progress: bool = False) -> Path:
    """Write a complete random-weight checkpoint for `preset` into `out_dir` and return the directory."""
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r} is not allowed; allowed presets: {', '.join(PRESETS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = root_config(preset)
    for name, content in (
        (CONFIG_FILE, config), (GENERATION_CONFIG_FILE, GENERATION_CONFIG),
        (PREPROCESSOR_FILE, PREPROCESSOR_CONFIG), (MODELSCOPE_FILE, MODELSCOPE_CONFIG),
    ):
        (out / name).write_text(json.dumps(content, indent=2) + "\n")
    write_tokenizer(out)
    dtype = torch.float32 if preset == "tiny" else torch.bfloat16
    write_talker_weights(config, out / WEIGHTS_FILE, dtype, seed, progress)
    if progress:
        print("  writing speech_tokenizer/ ...", file=sys.stderr, flush=True)
    write_codec_checkpoint(out / CODEC_DIR, preset, seed)
    return out
