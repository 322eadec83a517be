"""The codec decoder's sliding-window pre-transformer, streaming with a fixed-size key/value window.

Contract: `PreTransformer.forward(x [B, n, latent], kv_k, kv_v, positions [B]) -> [B, n, latent]` runs n new time
steps of every layer for each row, whose first new step sits at absolute position `positions[b]`:
- Layers: RMSNorm(eps) -> attention (no q/k norm, RoPE theta over head_dim, scale head_dim^-0.5) -> LayerScale ->
  residual; RMSNorm -> SwiGLU -> LayerScale -> residual. Final RMSNorm, Linear in/out (latent <-> hidden).
- Sliding window W (72): the query at position q sees keys at positions (q-W, q], i.e. itself and W-1 past ones.
  The stream keeps the W-1 most recent rotated keys/values per layer (`kv_k`/`kv_v` [layers, B, kv_heads, W-1,
  head_dim], oldest first) and shifts the new ones in place. Ring entry m holds position `positions - (W-1) + m`;
  entries before position 0 (fresh or reset rows) are masked out, so a zeroed state is a fresh stream.
- The mask is built on the device from `positions`: fixed shapes for fixed n, no host syncs.
A single pass is the same computation on a zeroed window with positions 0 (the window is then fully masked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from tts_engine.model.codec_config import CodecConfig
from tts_engine.model.codec_layers import Weights, store


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class PreTransformerLayer(nn.Module):
    """One layer's weights, as buffers named after `PreTransformer`'s table (q_b..o_b only with attention_bias)."""

    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    ln1: torch.Tensor
    ln2: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    attn_scale: torch.Tensor
    mlp_scale: torch.Tensor


class PreTransformer(nn.Module):
    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    in_w: torch.Tensor
    in_b: torch.Tensor
    out_w: torch.Tensor
    out_b: torch.Tensor
    norm_w: torch.Tensor
    inv_freq: torch.Tensor

    def __init__(self, get: Weights, prefix: str, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.window_past = cfg.sliding_window - 1
        self.scaling = cfg.head_dim**-0.5
        self.register_buffer("in_w", get(f"{prefix}.input_proj.weight"))
        self.register_buffer("in_b", get(f"{prefix}.input_proj.bias"))
        self.register_buffer("out_w", get(f"{prefix}.output_proj.weight"))
        self.register_buffer("out_b", get(f"{prefix}.output_proj.bias"))
        self.register_buffer("norm_w", get(f"{prefix}.norm.weight"))
        exponent = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim
        # computed on the CPU like the reference, then moved next to the weights (was left on the CPU)
        self.register_buffer("inv_freq", (1.0 / (cfg.rope_theta**exponent)).to(self.in_w.device))
        names = {
            "ln1": "input_layernorm.weight",
            "ln2": "post_attention_layernorm.weight",
            "q": "self_attn.q_proj.weight",
            "k": "self_attn.k_proj.weight",
            "v": "self_attn.v_proj.weight",
            "o": "self_attn.o_proj.weight",
            "gate": "mlp.gate_proj.weight",
            "up": "mlp.up_proj.weight",
            "down": "mlp.down_proj.weight",
            "attn_scale": "self_attn_layer_scale.scale",
            "mlp_scale": "mlp_layer_scale.scale",
        }
        if cfg.attention_bias:
            names.update({f"{p}_b": f"self_attn.{p}_proj.bias" for p in ("q", "k", "v", "o")})
        self.layers = nn.ModuleList()
        for i in range(cfg.num_hidden_layers):
            layer = PreTransformerLayer()
            for attr, name in names.items():
                layer.register_buffer(attr, get(f"{prefix}.layers.{i}.{name}"))
            self.layers.append(layer)

    def kv_shape(self, batch: int) -> tuple[int, ...]:
        cfg = self.cfg
        return (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, self.window_past, cfg.head_dim)

    def _rope(self, positions: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = (positions[:, None] + torch.arange(n, device=positions.device)).float()  # [B, n]
        freqs = pos[..., None] * self.inv_freq  # [B, n, head_dim/2], fp32
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, n, head_dim]

    def _mask(self, positions: torch.Tensor, n: int) -> torch.Tensor:
        # key column c (0..R+n-1) holds position positions - R + c; query i holds positions + i.
        past = self.window_past
        q = torch.arange(n, device=positions.device)[:, None]
        c = torch.arange(past + n, device=positions.device)[None, :]
        in_window = (c >= q) & (c <= q + past)  # causal and within W keys, independent of the row
        started = c[None] >= (past - positions)[:, None, None]  # no keys before position 0
        return (in_window[None] & started)[:, None]  # [B, 1, n, R+n]

    def forward(self, x: torch.Tensor, kv_k: torch.Tensor, kv_v: torch.Tensor, positions: torch.Tensor,
                live: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.cfg
        batch, n, _ = x.shape
        cos, sin = self._rope(positions, n)
        mask = self._mask(positions, n)
        groups = cfg.num_attention_heads // cfg.num_key_value_heads
        h = F.linear(x, self.in_w, self.in_b)
        for index, layer in enumerate(cast("Sequence[PreTransformerLayer]", self.layers)):  # ModuleList: Modules
            a = rms_norm(h, layer.ln1, cfg.rms_norm_eps)
            q = F.linear(a, layer.q, getattr(layer, "q_b", None)).view(batch, n, -1, cfg.head_dim).transpose(1, 2)
            k = F.linear(a, layer.k, getattr(layer, "k_b", None)).view(batch, n, -1, cfg.head_dim).transpose(1, 2)
            v = F.linear(a, layer.v, getattr(layer, "v_b", None)).view(batch, n, -1, cfg.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            keys = torch.cat((kv_k[index], k), dim=2)
            values = torch.cat((kv_v[index], v), dim=2)
            store(kv_k[index], keys[:, :, -self.window_past :], live)  # only the live rows' windows move
            store(kv_v[index], values[:, :, -self.window_past :], live)
            if groups > 1:
                keys = keys.repeat_interleave(groups, dim=1)
                values = values.repeat_interleave(groups, dim=1)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling)
            att = F.linear(att.transpose(1, 2).reshape(batch, n, -1), layer.o, getattr(layer, "o_b", None))
            h = h + layer.attn_scale * att
            m = rms_norm(h, layer.ln2, cfg.rms_norm_eps)
            m = F.linear(F.silu(F.linear(m, layer.gate)) * F.linear(m, layer.up), layer.down)
            h = h + layer.mlp_scale * m
        return F.linear(rms_norm(h, self.norm_w, cfg.rms_norm_eps), self.out_w, self.out_b)
