"""Qwen3-style decoder building blocks shared by the talker and the code predictor (inference only).

Contract (docs/model.md, "The frame step"):
- `RMSNorm`: mean of squares in fp32, cast back to the input dtype, then multiplied by the weight.
- `DecoderLayer`: pre-norm attention (per-head q/k RMSNorm applied before rotate-half RoPE, GQA, no biases,
  scale head_dim**-0.5) and a SwiGLU MLP, both with residuals. Parameter names equal the checkpoint's.
- Key/value caches are owned by the caller and passed in; the layer writes the new keys/values in place:
  * `prefill`: one sequence of T tokens at positions 0..T-1 into one cache row (causal attention);
  * `step`: one token per row, each row at its own position (a device tensor), keys masked by `mask`;
  * `static`: t tokens for every row at the same Python-int start position (code predictor).
  * `fixed`: t tokens for every row at positions given as a device tensor, attending over the whole cache
    under a key mask (code predictor on CUDA: one shape for every pass, so one compiled kernel set).
  None of them synchronises with the host, and `step`/`static`/`fixed` have fixed shapes for fixed inputs.
- Attention math: `scaled_dot_product_attention`, or with `Attention.reduce_attention` set (the CUDA fusion
  sets it) `attend_by_reduction`, the same softmax attention written as plain reductions so that the
  compiler fuses it into a couple of small kernels (SDPA launches one ~16 us flash kernel even for 16 keys).
- `step` on many rows with `Attention.split_step` set (the CUDA fusion sets it): projections, then the new keys
  and values written into the cache by one indexed write each, then attention + output projection reading the
  cache (`attend_out`; SDPA or reductions per `batched_attention`): compiled as one function, the in-place cache
  write became a copy of the layer's whole cache (docs/engine.md, "CUDA fusion"). One row keeps the single compiled
  step (`whole_step`), which is fastest at batch 1.
- `rope_table` gives fp32 cos/sin rows exactly as the official rotary module computes them; they are cast to the
  activation dtype before being applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from tts_engine.model.config import StackConfig


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rope_table(theta: float, head_dim: int, n_positions: int,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (cos, sin) of shape [n_positions, head_dim], rotate-half layout (frequencies repeated twice)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).to(torch.float32) / head_dim
    inv_freq = 1.0 / (theta**exponent)
    positions = torch.arange(n_positions, dtype=torch.float32, device=device)
    freqs = positions[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, D]; cos/sin broadcastable to it, already in x's dtype."""
    return x * cos + _rotate_half(x) * sin


def attend_by_reduction(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_mask: torch.Tensor | None,
                        groups: int) -> torch.Tensor:
    """Exact softmax attention as reductions, computed in fp32: q [B, heads, t, D]; keys/values [B, kv, L, D]
    (head h reads kv head h // groups); key_mask bool, broadcastable to [B, kv, groups, t, L], True = visible
    (None: every key). Returns [B, heads, t, D] in q's dtype."""
    b, heads, t, d = q.shape
    kv = keys.shape[1]
    qg = q.float().reshape(b, kv, groups, t, 1, d)
    scores = (qg * keys.float()[:, :, None, None]).sum(-1) * d**-0.5  # [B, kv, g, t, L]
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask, float("-inf"))
    probs = scores.softmax(-1)
    out = (probs[..., None] * values.float()[:, :, None, None]).sum(-2)  # [B, kv, g, t, D]
    return out.reshape(b, heads, t, d).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: StackConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.groups = cfg.num_heads // cfg.num_kv_heads
        width_q = cfg.num_heads * cfg.head_dim
        width_kv = cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, width_q, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, width_kv, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, width_kv, bias=False)
        self.o_proj = nn.Linear(width_q, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.reduce_attention = False  # True: attend_by_reduction instead of SDPA for single-token queries
        # the two ways `step` runs (runtime/fusion.py swaps in compiled versions on CUDA)
        self.whole_step = self._step
        self.attend_out = self._attend_out
        self.split_step = False  # True: rows > 1 write the cache outside `attend_out` (see the module docstring)
        self.batched_attention = "sdpa"  # attention of `attend_out` on rows > 1: "sdpa" or "reduce"

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [B, T, H] -> q [B, heads, T, D], k/v [B, kv_heads, T, D] with norm + RoPE applied to q and k."""
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _out(self, attn: torch.Tensor, b: int, t: int) -> torch.Tensor:
        return self.o_proj(attn.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))

    def _grouped_single_query(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                              mask: torch.Tensor | None) -> torch.Tensor:
        """One query token per row: fold the query heads of a KV group into the query axis (exact GQA, no copies)."""
        b = q.shape[0]
        if self.reduce_attention:
            visible = mask.reshape(b, 1, 1, 1, -1) if mask is not None else None
            return attend_by_reduction(q, keys, values, visible, self.groups)
        qg = q.reshape(b, self.num_kv_heads, self.groups, self.head_dim)
        out = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask)
        return out.reshape(b, self.num_heads, 1, self.head_dim)

    def prefill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x [1, T, H] with k_cache/v_cache [kv_heads, L, D] (one slot's rows), or x [B, T, H] with caches
        [B, kv_heads, L, D] (B sequences of the same padded length, batched prefill); written at 0..T-1."""
        b, t, _ = x.shape
        q, k, v = self._qkv(x, cos, sin)
        if k_cache.dim() == 3:
            k_cache[:, :t].copy_(k[0])
            v_cache[:, :t].copy_(v[0])
        else:
            k_cache[:, :, :t].copy_(k)
            v_cache[:, :, :t].copy_(v)
        keys = k.repeat_interleave(self.groups, dim=1)
        values = v.repeat_interleave(self.groups, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        return self._out(out, b, t)

    def step(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, 1, H]; cos/sin [B, 1, 1, D]; caches [B, kv_heads, L, D]; positions [B] long; mask [B, 1, 1, L]."""
        if self.split_step and x.shape[0] > 1:
            q, k, v = self._qkv(x, cos, sin)
            self._write_step_kv(k_cache, v_cache, k, v, positions)
            return self.attend_out(q, k_cache, v_cache, mask)
        return self.whole_step(x, cos, sin, k_cache, v_cache, positions, mask)

    def _write_step_kv(self, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       positions: torch.Tensor) -> None:
        b = k.shape[0]
        index = positions.view(b, 1, 1, 1).expand(b, self.num_kv_heads, 1, self.head_dim)
        k_cache.scatter_(2, index, k)
        v_cache.scatter_(2, index, v)

    def _step(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        self._write_step_kv(k_cache, v_cache, k, v, positions)
        return self._out(self._grouped_single_query(q, k_cache, v_cache, mask), x.shape[0], 1)

    def _attend_out(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
        """Attention of one query per row over the (already written) caches, then the output projection."""
        b = q.shape[0]
        if self.batched_attention == "reduce":
            out = attend_by_reduction(q, k_cache, v_cache, mask.reshape(b, 1, 1, 1, -1), self.groups)
        else:
            qg = q.reshape(b, self.num_kv_heads, self.groups, self.head_dim)
            out = F.scaled_dot_product_attention(qg, k_cache, v_cache, attn_mask=mask)
            out = out.reshape(b, self.num_heads, 1, self.head_dim)
        return self._out(out, b, 1)

    def static(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, start: int) -> torch.Tensor:
        """x [B, t, H] at positions start..start+t-1 for every row; caches [B, kv_heads, L, D]."""
        b, t, _ = x.shape
        q, k, v = self._qkv(x, cos, sin)
        end = start + t
        k_cache[:, :, start:end].copy_(k)
        v_cache[:, :, start:end].copy_(v)
        keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
        if t == 1:
            return self._out(self._grouped_single_query(q, keys, values, None), b, 1)
        if start != 0:
            raise ValueError("multi-token static attention is only used from position 0")
        keys = keys.repeat_interleave(self.groups, dim=1)
        values = values.repeat_interleave(self.groups, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        return self._out(out, b, t)

    def fixed(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x [B, t, H] at `positions` [t] (long, device) for every row; cos/sin [t, D]; caches [B, kv_heads, L, D];
        key_mask [t, L] bool (True = visible). Attends over the whole cache, so every call has the same shapes."""
        b, t, _ = x.shape
        q, k, v = self._qkv(x, cos, sin)
        k_cache.index_copy_(2, positions, k)
        v_cache.index_copy_(2, positions, v)
        return self._out(attend_by_reduction(q, k_cache, v_cache, key_mask, self.groups), b, t)


class MLP(nn.Module):
    def __init__(self, cfg: StackConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: StackConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def finish(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        h = x + attn_out
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    """`layers` + final `norm`; the three cache modes of `Attention`, applied layer by layer.

    Caches are [num_layers, rows, kv_heads, L, D] tensors (or per-layer views of them)."""

    def __init__(self, cfg: StackConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def prefill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """x [1, T, H] with caches [num_layers, kv_heads, L, D] of one slot, or x [B, T, H] with caches
        [num_layers, B, kv_heads, L, D]. Returns final-normed hidden [B, T, H]."""
        for i, layer in enumerate(cast("Sequence[DecoderLayer]", self.layers)):  # ModuleList: Modules
            a = layer.self_attn.prefill(layer.input_layernorm(x), cos, sin, k_cache[i], v_cache[i])
            x = layer.finish(x, a)
        return self.norm(x)

    def step(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(cast("Sequence[DecoderLayer]", self.layers)):  # ModuleList: Modules
            a = layer.self_attn.step(layer.input_layernorm(x), cos, sin, k_cache[i], v_cache[i], positions, mask)
            x = layer.finish(x, a)
        return self.norm(x)

    def static(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, start: int) -> torch.Tensor:
        for i, layer in enumerate(cast("Sequence[DecoderLayer]", self.layers)):  # ModuleList: Modules
            a = layer.self_attn.static(layer.input_layernorm(x), cos, sin, k_cache[i], v_cache[i], start)
            x = layer.finish(x, a)
        return self.norm(x)

    def fixed(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(cast("Sequence[DecoderLayer]", self.layers)):  # ModuleList: Modules
            a = layer.self_attn.fixed(layer.input_layernorm(x), cos, sin, k_cache[i], v_cache[i], positions, key_mask)
            x = layer.finish(x, a)
        return self.norm(x)
