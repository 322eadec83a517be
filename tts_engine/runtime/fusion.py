"""Kernel fusion for the CUDA path: torch.compile (Inductor, without its own CUDA graphs) on the pointwise-heavy
pieces of the model, so each captured frame step launches far fewer kernels (why and what it measured:
docs/engine.md, "CUDA fusion").

Contract:
- `fuse_model(model)` replaces, on the given model instances only, the bound methods `RMSNorm.forward`
  (talker/predictor), `Attention._qkv` (projections + q/k norms + RoPE), `DecoderLayer.finish` (residual + norm +
  SwiGLU MLP + residual) with `torch.compile(dynamic=True)` versions; the CPU path and the model classes are
  untouched. `_qkv_one_matmul` / `_mlp_one_matmul` restate q/k/v and gate/up as one product each over weights
  concatenated once (the original parameters become views into them: no extra memory).
- Parts (`TTS_CUDA_FUSION`: `1` every part, `0` off, or a comma list): `layers`; `predictor_attention` and
  `talker_attention` (the code predictor's `DecoderStack.fixed` and the talker's one-row `Attention.step` compiled
  whole, attention as `attend_by_reduction`; a many-row talker step writes its cache outside the compiled code and
  attends with SDPA or `TTS_TALKER_BATCHED_ATTENTION=reduce`); `codec_snake` (SnakeBeta as one fused kernel).
- Fused results differ from the unfused model by bf16 rounding only; graph and eager engines of one process both use
  the fused model, so graphs on/off stay bit-identical. Every step shape must be compiled before any capture
  (`runtime/step_graphs.compile_step_shapes`); compiles after load are counted (`compiles_since_load`).
- Returns a status string for the engine stats; on a compile setup failure the model is left unfused. A second call
  on the same model changes nothing and returns the first status. `apply_fusion(model, parts, compile_fn)` does the
  work on any device with any compiler (the CPU tests use a recording backend).
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from tts_engine.model.codec_layers import SnakeBeta, snake
from tts_engine.model.layers import MLP, Attention, DecoderLayer, RMSNorm, apply_rope

log = logging.getLogger(__name__)


PARTS = ("layers", "predictor_attention", "talker_attention", "codec_snake")


def compiled_graph_count() -> int:
    """Graphs torch.compile has compiled in this process so far (every model; 0 where Dynamo is absent)."""
    try:  # optional: torch's compiler (Dynamo) may be absent from a build
        from torch._dynamo.utils import counters
    except Exception:  # noqa: BLE001 - no compiler, nothing compiled
        return 0
    return int(counters["stats"]["unique_graphs"])


def fusion_parts(value: str | None = None) -> tuple[str, ...]:
    """The parts TTS_CUDA_FUSION asks for (`1`: all, `0`: none, or a comma list); unknown names are an error."""
    raw = (os.environ.get("TTS_CUDA_FUSION", "1") if value is None else value).strip().lower()
    if raw in ("1", "true", "yes", "on", ""):
        return PARTS
    if raw in ("0", "false", "no", "off"):
        return ()
    parts = tuple(p.strip() for p in raw.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"TTS_CUDA_FUSION={raw!r}: unknown part(s) {', '.join(unknown)}; "
                         f"allowed: 1, 0 or a comma list of {', '.join(PARTS)}")
    return parts


BATCHED_ATTENTION = ("sdpa", "reduce")


def talker_batched_attention(value: str | None = None) -> str:
    """TTS_TALKER_BATCHED_ATTENTION: how the talker attends when a step has more than one row (default sdpa)."""
    raw = (os.environ.get("TTS_TALKER_BATCHED_ATTENTION", "sdpa") if value is None else value).strip().lower()
    if raw not in BATCHED_ATTENTION:
        choices = " or ".join(BATCHED_ATTENTION)
        raise ValueError(f"TTS_TALKER_BATCHED_ATTENTION={raw!r} is not allowed; choose {choices}")
    return raw


def _concat_rows(linears: list[Any]) -> Any:
    """One weight [sum(out), in] for several bias-free Linears; each Linear's weight becomes a view into it."""
    weight = torch.cat([lin.weight.detach() for lin in linears], dim=0)
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        lin.weight = torch.nn.Parameter(weight[start : start + rows], requires_grad=False)
        start += rows
    return weight


def _qkv_one_matmul(self: Any, x: Any, cos: Any, sin: Any) -> tuple[Any, ...]:
    """Attention._qkv with the three projections as one product (same norms and RoPE, model/layers.py)."""
    b, t, _ = x.shape
    width_q, width_kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
    q, k, v = F.linear(x, self._w_qkv).split((width_q, width_kv, width_kv), dim=-1)
    q = self.q_norm(q.reshape(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
    k = self.k_norm(k.reshape(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
    v = v.reshape(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def _mlp_one_matmul(self: Any, x: Any) -> Any:
    """MLP.forward with gate and up as one product: down(silu(gate(x)) * up(x))."""
    gate, up = F.linear(x, self._w_gate_up).chunk(2, dim=-1)
    return self.down_proj(F.silu(gate) * up)


def fuse_model(model: Any) -> str:
    """Swap in compiled versions of the hot methods (CUDA models only). Returns 'on (N methods)' or 'off: why'."""
    if model.device.type != "cuda":
        return "off: device is not CUDA"
    done = getattr(model, "fusion_status", None)
    if done is not None:  # a second engine over the same loaded model shares its compiled functions
        return str(done)
    parts = fusion_parts()
    status = apply_fusion(model, parts) if parts else "off: TTS_CUDA_FUSION=0"
    model.fusion_status = status
    return status


def apply_fusion(model: Any, parts: tuple[str, ...] = PARTS, compile_fn: Callable[..., Any] | None = None) -> str:
    """Fuse `parts` of `model` on any device; `compile_fn(fn, dynamic=True)` defaults to torch.compile."""
    try:  # optional: torch's compiler (Dynamo) may be absent from a build
        import torch._dynamo
    except Exception as exc:  # noqa: BLE001 - no compiler here: run unfused
        return f"off: {type(exc).__name__}: {exc}"
    compile_fn = compile_fn or torch.compile
    # many module instances share each compiled code object; allow one entry per shape family and module kind
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    count = 0
    for module in model.talker.modules():
        if isinstance(module, Attention):
            module._w_qkv = _concat_rows([module.q_proj, module.k_proj, module.v_proj])
            module._qkv = types.MethodType(_qkv_one_matmul, module)  # type: ignore[method-assign]  # fused, per instance
        elif isinstance(module, MLP):
            module._w_gate_up = _concat_rows([module.gate_proj, module.up_proj])
            module.forward = types.MethodType(_mlp_one_matmul, module)  # type: ignore[method-assign]  # fused, per instance
    # Tried and left out (H100, 2026-11-23): compiling Attention.step/.static whole (predictor 3.95 -> 3.79 ms
    # but talker 2.75 -> 2.99 ms, RTF 0.094 -> 0.099, load +70 s), and the codec's SnakeBeta / ConvNeXt /
    # transformer (decoder 2.4 -> 1.8 ms, hidden anyway beside the talker half; SNR vs the plain decoder
    # 77 dB, one-LSB graph/eager mismatches, before every shape was compiled ahead of capture), so the codec ran
    # as written; at 256 rows its unfused SnakeBeta passes dominate, hence `codec_snake` now. Later that day: compiling
    # the predictor's whole 5-layer stack as one function (predictor 3.60 -> 3.79 ms), and cuDNN autotuning
    # for the codec (decoder 2.42 -> 2.40 ms, but its workspaces took the process to 78 GiB reserved).
    predictor_attention = {id(m) for m in model.predictor.modules() if isinstance(m, Attention)}
    batched_attention = talker_batched_attention()
    if "predictor_attention" in parts:
        model.predictor.use_fixed_positions(model.device)
    if "layers" in parts:
        targets = ((RMSNorm, "forward"), (Attention, "_qkv"), (DecoderLayer, "finish"))
        for module in model.talker.modules():  # the code predictor lives under the talker
            for cls, name in targets:
                if isinstance(module, cls):
                    setattr(module, name, compile_fn(getattr(module, name), dynamic=True))
                    count += 1
    for module in model.talker.modules():
        if not isinstance(module, Attention):
            continue
        if id(module) in predictor_attention and "predictor_attention" in parts:
            module.fixed = compile_fn(module.fixed, dynamic=True)  # type: ignore[method-assign]  # compiled, per instance
            count += 1
        elif id(module) not in predictor_attention and "talker_attention" in parts:
            module.reduce_attention = True
            module.whole_step = compile_fn(module._step, dynamic=True)  # one row: the whole step, one function
            module.split_step = True  # many rows: cache written outside the compiled attention (layers.py)
            module.batched_attention = batched_attention
            module.attend_out = compile_fn(module._attend_out, dynamic=True)
            count += 2
    codec = getattr(model, "codec", None)
    if "codec_snake" in parts and codec is not None:
        fused_snake = compile_fn(snake, dynamic=True)  # one compiled function for every SnakeBeta of the codec
        for module in codec.modules():
            if isinstance(module, SnakeBeta):
                module.activation = fused_snake
        count += 1
    log.info("CUDA fusion (%s): %d methods compiled lazily", ",".join(parts), count)
    return f"on ({','.join(parts)}; {count} methods)"
