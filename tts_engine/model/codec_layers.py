"""Convolutional building blocks of the 12 Hz codec decoder, written for exact streaming.

Contract: every block maps `x [B, C, n]` (n new time steps at its rate) to its output for exactly those steps,
given the per-stream context it needs, and updates that context in place:
- `CausalConv`: a stride-1 conv with left padding (k-1)*d. Its context is the last (k-1)*d input samples
  ("tail", [B, C_in, (k-1)*d]); a zero tail is the zero padding of a fresh stream.
- `CausalTransposedConv`: ConvTranspose1d(k, s) right-trimmed by k-s so L inputs give L*s outputs. Output sample o
  depends on inputs floor(o/s) - ceil(k/s) + 1 .. floor(o/s), so it keeps the last ceil(k/s)-1 input columns
  (none for k == s, one for k == 2s) and cuts the n*s samples that belong to the new columns.
- `SnakeBeta`, LayerNorm, 1x1 convs, linear layers: pointwise in time, no context.
Tails live in a caller-owned list (`tails[module.slot]`, in a `StreamContext`), so the same code runs a fresh single
pass (zero tails) and a stream step, and a CUDA graph can capture it (fixed shapes, in-place writes, no host syncs).
A batched step updates only the live rows' context (`StreamContext.live`): other rows read theirs and keep it.

Weights are bound by the real checkpoint names (see codec_config.decoder_tensor_shapes); everything is fp32.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Weights = Callable[[str], torch.Tensor]  # real tensor name -> tensor


def store(dst: torch.Tensor, new: torch.Tensor, live: torch.Tensor | None) -> None:
    """`dst[:] = new` for the live rows (dim 0) only; every row when `live` is None. One kernel either way."""
    if live is None:
        dst.copy_(new)
    else:
        torch.where(live.view(-1, *([1] * (new.dim() - 1))), new, dst, out=dst)


class StreamContext:
    """Every stateful module's context of one batched stream state (`tensors[module.slot]`, [B, C, context]), and the
    rows allowed to update theirs (`live` [B] bool; None: all)."""

    def __init__(self, tensors: list[torch.Tensor], live: torch.Tensor | None = None) -> None:
        self.tensors, self.live = tensors, live

    def extend(self, slot: int, x: torch.Tensor, context: int) -> torch.Tensor:
        """`x` [B, C, n] with its context prepended; the context becomes its last `context` samples."""
        tail = self.tensors[slot]
        x = torch.cat((tail, x), dim=-1)
        store(tail, x[..., -context:], self.live)
        return x


class StatefulModule(nn.Module):
    """A module owning one context tensor in the stream state; `slot` is its index there."""

    slot: int = -1

    def tail_shape(self) -> tuple[int, int]:  # (channels, length)
        raise NotImplementedError


class CausalConv(StatefulModule):
    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(self, get: Weights, prefix: str, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.register_buffer("weight", get(f"{prefix}.conv.weight"))
        self.register_buffer("bias", get(f"{prefix}.conv.bias"))
        self.dilation = dilation
        self.groups = groups
        self.context = (self.weight.shape[-1] - 1) * dilation

    def tail_shape(self) -> tuple[int, int]:
        return self.weight.shape[1] * self.groups, self.context

    def forward(self, x: torch.Tensor, tails: StreamContext) -> torch.Tensor:
        if self.context:
            x = tails.extend(self.slot, x, self.context)
        return F.conv1d(x, self.weight, self.bias, dilation=self.dilation, groups=self.groups)


class CausalTransposedConv(StatefulModule):
    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(self, get: Weights, prefix: str, stride: int) -> None:
        super().__init__()
        self.register_buffer("weight", get(f"{prefix}.conv.weight"))  # [in, out, k]
        self.register_buffer("bias", get(f"{prefix}.conv.bias"))
        self.stride = stride
        self.context = math.ceil(self.weight.shape[-1] / stride) - 1  # input columns carried over

    def tail_shape(self) -> tuple[int, int]:
        return self.weight.shape[0], self.context

    def forward(self, x: torch.Tensor, tails: StreamContext) -> torch.Tensor:
        n = x.shape[-1]
        if self.context:
            x = tails.extend(self.slot, x, self.context)
        y = F.conv_transpose1d(x, self.weight, self.bias, stride=self.stride)
        start = self.context * self.stride
        return y[..., start : start + n * self.stride]


def snake(x: torch.Tensor, freq: torch.Tensor, inv_mag: torch.Tensor) -> torch.Tensor:
    """The SnakeBeta activation with precomputed per-channel frequency and 1/magnitude."""
    return x + inv_mag * torch.pow(torch.sin(x * freq), 2)


class SnakeBeta(nn.Module):
    """x + sin(x * e^alpha)^2 / (e^beta + 1e-9); alpha, beta are stored in log space per channel.
    `activation` is `snake`, or its compiled (one fused kernel) version on CUDA (runtime/fusion.py)."""

    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    freq: torch.Tensor
    inv_mag: torch.Tensor

    def __init__(self, get: Weights, prefix: str) -> None:
        super().__init__()
        self.register_buffer("freq", torch.exp(get(f"{prefix}.alpha"))[None, :, None])
        self.register_buffer("inv_mag", 1.0 / (torch.exp(get(f"{prefix}.beta"))[None, :, None] + 1e-9))
        self.activation = snake

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(x, self.freq, self.inv_mag)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv k7 -> LayerNorm(1e-6) -> Linear 4x -> GELU(erf) -> Linear -> gamma -> residual."""

    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    norm_weight: torch.Tensor
    norm_bias: torch.Tensor
    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor
    gamma: torch.Tensor

    def __init__(self, get: Weights, prefix: str) -> None:
        super().__init__()
        channels = get(f"{prefix}.gamma").shape[0]
        self.dwconv = CausalConv(get, f"{prefix}.dwconv", groups=channels)
        self.register_buffer("norm_weight", get(f"{prefix}.norm.weight"))
        self.register_buffer("norm_bias", get(f"{prefix}.norm.bias"))
        self.register_buffer("w1", get(f"{prefix}.pwconv1.weight"))
        self.register_buffer("b1", get(f"{prefix}.pwconv1.bias"))
        self.register_buffer("w2", get(f"{prefix}.pwconv2.weight"))
        self.register_buffer("b2", get(f"{prefix}.pwconv2.bias"))
        self.register_buffer("gamma", get(f"{prefix}.gamma"))

    def forward(self, x: torch.Tensor, tails: StreamContext) -> torch.Tensor:
        h = self.dwconv(x, tails).transpose(1, 2)
        h = F.layer_norm(h, (h.shape[-1],), self.norm_weight, self.norm_bias, eps=1e-6)
        h = F.linear(F.gelu(F.linear(h, self.w1, self.b1)), self.w2, self.b2)
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, get: Weights, prefix: str, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(get, f"{prefix}.act1")
        self.conv1 = CausalConv(get, f"{prefix}.conv1", dilation=dilation)
        self.act2 = SnakeBeta(get, f"{prefix}.act2")
        self.conv2 = CausalConv(get, f"{prefix}.conv2")

    def forward(self, x: torch.Tensor, tails: StreamContext) -> torch.Tensor:
        h = self.conv1(self.act1(x), tails)
        return x + self.conv2(self.act2(h), tails)


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal transposed conv (k=2r, s=r) -> residual units with dilations 1, 3, 9."""

    def __init__(self, get: Weights, prefix: str, rate: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.act = SnakeBeta(get, f"{prefix}.block.0")
        self.up = CausalTransposedConv(get, f"{prefix}.block.1", stride=rate)
        self.units = nn.ModuleList(
            ResidualUnit(get, f"{prefix}.block.{i + 2}", dilation) for i, dilation in enumerate(dilations)
        )

    def forward(self, x: torch.Tensor, tails: StreamContext) -> torch.Tensor:
        x = self.up(self.act(x), tails)
        for unit in self.units:
            x = unit(x, tails)
        return x
