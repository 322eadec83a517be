"""Kernel fusion for the CUDA path: torch.compile (Inductor, without its own CUDA graphs) on the
pointwise-heavy pieces of the model, so each captured frame step launches far fewer kernels.

Why: a batch-1 frame step is launch-bound, not bandwidth-bound. Unfused, one talker layer is ~55 kernels
(fp32 RMSNorms, per-head q/k norms, rotate-half RoPE, SwiGLU, residuals); a CUDA graph removes the CPU
launch cost but each tiny kernel still costs a few microseconds on the GPU. Compiling the layer pieces
fuses those pointwise chains into a few kernels around the matrix products.

Contract:
- `fuse_model(model)` replaces, on the given model instances only, the bound methods `RMSNorm.forward`
  (talker/predictor), `Attention._qkv` (projections + q/k norms + RoPE), `DecoderLayer.finish` (residual +
  norm + SwiGLU MLP + residual), and the codec's `SnakeBeta.forward`, with `torch.compile(dynamic=True)`
  versions of the same methods: the model code stays the single source of the math; the CPU path and the
  model classes are untouched. Compilation happens lazily on first use (graph capture warm-up at load).
- Graph and eager engines in one process both use the fused model, so graphs on/off stay bit-identical.
  Fused results differ from the unfused model by bf16 rounding only (Inductor keeps fp32 inside a fused
  chain), like any kernel change.
- Returns a status string for the engine stats; on any compile setup failure the model is left unfused.
- `TTS_CUDA_FUSION=0` in the environment turns it off (diagnosis / A-B measurement).
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def fusion_enabled() -> bool:
    return os.environ.get("TTS_CUDA_FUSION", "1").strip().lower() not in ("0", "false", "no", "off")


def fuse_model(model: Any) -> str:
    """Swap in compiled versions of the hot methods (CUDA models only). Returns 'on (N methods)' or 'off: why'."""
    if model.device.type != "cuda":
        return "off: device is not CUDA"
    if not fusion_enabled():
        return "off: TTS_CUDA_FUSION=0"
    try:
        import torch
        import torch._dynamo

        from tts_engine.model.codec_layers import SnakeBeta
        from tts_engine.model.layers import Attention, DecoderLayer, RMSNorm
    except Exception as exc:  # noqa: BLE001 - no compiler here: run unfused
        return f"off: {type(exc).__name__}: {exc}"
    # many module instances share each compiled code object; allow one entry per shape family and module kind
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    count = 0
    targets = ((RMSNorm, "forward"), (Attention, "_qkv"), (DecoderLayer, "finish"))
    for module in model.talker.modules():  # the code predictor lives under the talker
        for cls, name in targets:
            if isinstance(module, cls):
                setattr(module, name, torch.compile(getattr(module, name), dynamic=True))
                count += 1
    for module in model.codec.modules():
        if isinstance(module, SnakeBeta):
            module.forward = torch.compile(module.forward, dynamic=True)
            count += 1
    log.info("CUDA fusion: %d methods compiled lazily", count)
    return f"on ({count} methods)"
