"""Load a Qwen3-TTS CustomVoice checkpoint (real Hugging Face layout) into our own modules.

Contract: `load_model(model_dir, device, dtype)` reads `config.json`, `generation_config.json`,
`model.safetensors` (by real parameter names), the tokenizer files and `speech_tokenizer/`; talker and predictor
go to `dtype` on `device`, the codec decoder is always fp32. On CUDA the text embedding table (151,936 x 2,048,
~0.58 GiB in bf16) stays in CPU memory: it is only read while a prompt is built, a few hundred rows per request,
so it has no place in GPU memory (`Talker.embed_text` moves the looked-up rows).
Before anything is read, `tts_engine.doctor.verify` checks the whole checkpoint from its configs and safetensors
headers (so every caller, `Engine.load` included, gets all problems at once, the config key that disagrees named).
Every problem raises `CheckpointError` with a one-line message naming the file and, for weights, the tensor and
the expected vs actual shape. Tensors the CustomVoice path does not use (e.g. a Base model's `speaker_encoder.*`)
are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tts_engine.doctor import verify
from tts_engine.errors import CheckpointError
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.config import ModelConfig
from tts_engine.model.layout import CODEC_DIR, WEIGHTS_FILE
from tts_engine.model.predictor import CodePredictor
from tts_engine.model.talker import Talker, TTSWeights
from tts_engine.model.tokenizer import TextTokenizer
from tts_engine.model.weights_io import read_checked_tensors

#: read on the host only (prompt building): kept in CPU memory when the model runs on a GPU
HOST_TENSORS = ("talker.model.text_embedding.weight",)
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda if available else cpu; anything else as given."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """"auto" -> bf16 on CUDA, fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not allowed; allowed values: auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


@dataclass
class LoadedModel:
    config: ModelConfig
    talker: Talker
    predictor: CodePredictor
    codec: CodecDecoder
    tokenizer: TextTokenizer
    device: torch.device
    dtype: torch.dtype
    speakers: list[str]
    languages: list[str]
    model_dir: Path


def load_talker_weights(model_dir: Path, cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> TTSWeights:
    """Build the module tree on the meta device, check every tensor's presence and shape, then load for real."""
    path = model_dir / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: required weights file is missing")
    with torch.device("meta"):
        root = TTSWeights(cfg)
    expected = {name: tuple(t.shape) for name, t in root.state_dict().items()}
    host = HOST_TENSORS if device.type == "cuda" else ()
    tensors = read_checked_tensors(path, expected, device, dtype, host=host)
    root.load_state_dict(tensors, strict=True, assign=True)
    return root.eval().requires_grad_(False)


def load_model(model_dir: str | Path, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: model directory does not exist")
    verify(model_dir)  # configs against tensor headers, every problem in one line, before a weight is read
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    cfg = ModelConfig.from_dir(model_dir)
    codec_dir = model_dir / CODEC_DIR
    if not codec_dir.is_dir():
        raise CheckpointError(f"{codec_dir}: required speech tokenizer folder is missing")
    tokenizer = TextTokenizer.from_dir(model_dir)
    root = load_talker_weights(model_dir, cfg, dev, dt)
    codec = CodecDecoder.from_pretrained(codec_dir, dev)
    return LoadedModel(
        config=cfg,
        talker=root.talker,
        predictor=root.talker.code_predictor,
        codec=codec,
        tokenizer=tokenizer,
        device=dev,
        dtype=dt,
        speakers=cfg.speakers,
        languages=cfg.languages,
        model_dir=model_dir,
    )
