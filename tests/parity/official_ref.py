"""Import the official Qwen3-TTS implementation (`qwen-tts-hf`) as a CPU test-time reference.

Facts from shared/reference/parity_reference.md: qwen_tts imports torchaudio, sox and onnxruntime at
import time for its 25 Hz tokenizer only; torchaudio cannot be installed next to torch 2.13, so those
modules are replaced by empty stand-ins after transformers has probed for torchaudio. On transformers
5.17-5.20 its rope shim also needs `rope_theta` to fall back to `rope_parameters`.

`load_official()` raises (never skips) when the package is missing: parity must fail loudly in CI.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any


def import_qwen_tts() -> Any:
    if "qwen_tts" in sys.modules:
        return sys.modules["qwen_tts"]
    import transformers.processing_utils  # noqa: F401  (let transformers probe torchaudio first)

    if "torchaudio" not in sys.modules:
        ta = types.ModuleType("torchaudio")
        comp = types.ModuleType("torchaudio.compliance")
        kaldi = types.ModuleType("torchaudio.compliance.kaldi")

        def _fbank(*_a: Any, **_k: Any) -> Any:
            raise NotImplementedError("the 25 Hz tokenizer is not used by the 12 Hz parity tests")

        kaldi.fbank = _fbank
        comp.kaldi = kaldi
        ta.compliance = comp
        sys.modules.update({"torchaudio": ta, "torchaudio.compliance": comp, "torchaudio.compliance.kaldi": kaldi})
    for name in ("sox", "onnxruntime"):
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
    try:
        import qwen_tts
    except ImportError as exc:  # pragma: no cover - environment problem, reported loudly
        raise RuntimeError(
            "the parity reference qwen-tts-hf is not installed; run scripts/setup.sh "
            "(it installs qwen-tts-hf==0.1.1.post1 with --no-deps)"
        ) from exc
    from tts_engine.bench.peer import patch_rope_default  # the same shim the GPU peer bench needs

    patch_rope_default()
    return qwen_tts


def load_official(model_dir: str | Path) -> Any:
    """The official wrapper (`Qwen3TTSModel`) on CPU in fp32."""
    import torch

    qwen_tts = import_qwen_tts()
    return qwen_tts.Qwen3TTSModel.from_pretrained(str(model_dir), device_map="cpu", dtype=torch.float32)
