"""The 12 Hz codec decoder (speech tokenizer v2): codes [B, 16, T] -> 24 kHz PCM [B, T*1920], fp32.

Contract (docs/codec.md):
- `CodecDecoder.from_pretrained(speech_tokenizer_dir, device)` reads `config.json` and the `decoder.*` tensors of
  `model.safetensors` by their real names; any problem raises `CheckpointError` naming the file, the tensor and
  the expected shape. The encoder (`encoder.*`, voice cloning only) is not read. Always fp32.
- `forward(codes)`: one unchunked pass (the official `decoder(codes)`, not its 300-frame `chunked_decode`).
  Codes < 0 (padding) count as 0, as in the official decode; codes >= codebook_size are refused.
- `new_state(batch)` / `step(codes [B,16,n], state)`: exact streaming. Stepping T frames in pieces of any n gives
  the same samples as `forward` on all T (fp32 rounding aside), because every stage is causal with no look-ahead
  and the state carries exactly the context each stage reads: conv tails, transposed-conv columns, the 71 most
  recent keys/values per transformer layer and a per-row position counter (device tensor). No host syncs and no
  data-dependent Python branches in `step`; shapes are fixed for a fixed n (CUDA-graph capturable).
  `step` does not check code ranges (that would sync); it clamps them into [0, codebook_size).
- With `state.live` set, a step advances the live rows only: the others' context and position stay as they were
  (their output is garbage), so a batched step may run rows that must not advance.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from tts_engine.errors import CheckpointError
from tts_engine.model.codec_config import RESIDUAL_DILATIONS, CodecConfig, decoder_tensor_shapes
from tts_engine.model.codec_layers import (
    CausalConv,
    CausalTransposedConv,
    ConvNeXtBlock,
    DecoderBlock,
    SnakeBeta,
    StatefulModule,
    StreamContext,
    Weights,
)
from tts_engine.model.codec_transformer import PreTransformer
from tts_engine.model.layout import CONFIG_FILE, WEIGHTS_FILE
from tts_engine.model.weights_io import read_checked_tensors


@dataclass
class CodecState:
    """Per-stream decoder context; row b belongs to stream slot b. Tensors only."""

    tails: list[torch.Tensor]  # one [B, C, context] tensor per stateful conv, in decoder order
    kv_k: torch.Tensor  # [layers, B, kv_heads, window-1, head_dim]
    kv_v: torch.Tensor
    positions: torch.Tensor  # [B] int64: frames decoded so far per row
    # [B] bool: the rows a step advances; the others read their context and keep it (the engine shares this tensor
    # with its code generator). None: every row advances.
    live: torch.Tensor | None = None

    def reset_(self, rows: torch.Tensor | slice | int) -> None:
        """Zero the selected batch rows so their next step starts a fresh stream (slot reuse)."""
        for tail in self.tails:
            tail[rows] = 0
        self.kv_k[:, rows] = 0
        self.kv_v[:, rows] = 0
        self.positions[rows] = 0

    def move_(self, src: int, dst: int) -> None:
        """Copy row `src`'s context into row `dst` (slot compaction); `src` keeps its values until reset."""
        for tail in self.tails:
            tail[dst].copy_(tail[src])
        self.kv_k[:, dst].copy_(self.kv_k[:, src])
        self.kv_v[:, dst].copy_(self.kv_v[:, src])
        self.positions[dst].copy_(self.positions[src])


class Dequantizer(nn.Module):
    """codes [B, Q, T] -> [B, codebook_dim, T]: first codebook and the sum of the rest, each with its 1x1 projection."""

    # buffers (register_buffer): declared here so that they type as tensors, not `Tensor | Module`
    tables: torch.Tensor
    proj_first: torch.Tensor
    proj_rest: torch.Tensor

    def __init__(self, get: Weights, cfg: CodecConfig) -> None:
        super().__init__()
        tables = []
        for group, count in (("rvq_first", 1), ("rvq_rest", cfg.num_quantizers - 1)):
            for i in range(count):
                base = f"decoder.quantizer.{group}.vq.layers.{i}._codebook"
                usage = get(f"{base}.cluster_usage").clamp(min=1e-5)
                tables.append(get(f"{base}.embedding_sum") / usage[:, None])  # EMA sums -> code vectors
        self.register_buffer("tables", torch.stack(tables))  # [Q, codebook_size, vq_dim]
        self.register_buffer("proj_first", get("decoder.quantizer.rvq_first.output_proj.weight"))
        self.register_buffer("proj_rest", get("decoder.quantizer.rvq_rest.output_proj.weight"))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        first = F.embedding(codes[:, 0], self.tables[0]).transpose(1, 2)
        rest = F.embedding(codes[:, 1], self.tables[1]).transpose(1, 2)
        for q in range(2, codes.shape[1]):  # summed in codebook order, as the reference does
            rest = rest + F.embedding(codes[:, q], self.tables[q]).transpose(1, 2)
        return F.conv1d(first, self.proj_first) + F.conv1d(rest, self.proj_rest)


class CodecDecoder(nn.Module):
    def __init__(self, get: Weights, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.samples_per_frame = cfg.total_upsample
        self.dequantizer = Dequantizer(get, cfg)
        self.pre_conv = CausalConv(get, "decoder.pre_conv")
        self.pre_transformer = PreTransformer(get, "decoder.pre_transformer", cfg)
        self.upsample = nn.ModuleList()
        for i, factor in enumerate(cfg.upsampling_ratios):
            stage = nn.ModuleList(
                [
                    CausalTransposedConv(get, f"decoder.upsample.{i}.0", stride=factor),
                    ConvNeXtBlock(get, f"decoder.upsample.{i}.1"),
                ]
            )
            self.upsample.append(stage)
        self.input_conv = CausalConv(get, "decoder.decoder.0")
        self.blocks = nn.ModuleList(
            DecoderBlock(get, f"decoder.decoder.{b + 1}", rate, RESIDUAL_DILATIONS)
            for b, rate in enumerate(cfg.upsample_rates)
        )
        n = len(cfg.upsample_rates)
        self.output_act = SnakeBeta(get, f"decoder.decoder.{n + 1}")
        self.output_conv = CausalConv(get, f"decoder.decoder.{n + 2}")
        self._stateful = [m for m in self.modules() if isinstance(m, StatefulModule) and m.tail_shape()[1] > 0]
        for slot, module in enumerate(self._stateful):
            module.slot = slot

    # ---- loading ---------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, speech_tokenizer_dir: Path | str, device: torch.device | str = "cpu") -> CodecDecoder:
        folder = Path(speech_tokenizer_dir)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: speech tokenizer folder not found (expected <model>/speech_tokenizer/)")
        config_path = folder / CONFIG_FILE
        try:
            config = json.loads(config_path.read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{config_path}: file missing") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{config_path}: not readable JSON ({exc})") from None
        cfg = CodecConfig.from_json(config, source=str(config_path))
        weights_path = folder / WEIGHTS_FILE
        if not weights_path.is_file():
            raise CheckpointError(f"{weights_path}: file missing")
        expected = decoder_tensor_shapes(cfg)
        tensors = read_checked_tensors(weights_path, expected, device, torch.float32)
        with torch.no_grad():
            model = cls(tensors.__getitem__, cfg)
        return model.eval()

    # ---- decoding --------------------------------------------------------------------------------------------
    def new_state(self, batch: int) -> CodecState:
        device = self.pre_conv.weight.device
        tails = [torch.zeros(batch, *m.tail_shape(), device=device) for m in self._stateful]
        kv_shape = self.pre_transformer.kv_shape(batch)
        return CodecState(
            tails=tails,
            kv_k=torch.zeros(kv_shape, device=device),
            kv_v=torch.zeros(kv_shape, device=device),
            positions=torch.zeros(batch, dtype=torch.int64, device=device),
        )

    def _check_codes(self, codes: torch.Tensor) -> None:
        if codes.dim() != 3 or codes.shape[1] != self.cfg.num_quantizers or codes.shape[2] < 1:
            raise ValueError(
                f"codes has shape {list(codes.shape)}; expected [batch, {self.cfg.num_quantizers}, frames>=1]"
            )
        if codes.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"codes has dtype {codes.dtype}; expected an integer (int64) tensor")

    @torch.no_grad()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        self._check_codes(codes)
        top = int(codes.max())
        if top >= self.cfg.codebook_size:
            raise ValueError(f"codes contains {top}; valid codes are 0..{self.cfg.codebook_size - 1} (<0 = padding)")
        return self.step(codes, self.new_state(codes.shape[0]))

    @torch.no_grad()
    def step(self, codes: torch.Tensor, state: CodecState) -> torch.Tensor:
        self._check_codes(codes)
        n = codes.shape[2]
        live = state.live
        tails = StreamContext(state.tails, live)
        latent = self.pre_conv(self.dequantizer(codes.long().clamp(0, self.cfg.codebook_size - 1)), tails)
        hidden = self.pre_transformer(latent.transpose(1, 2), state.kv_k, state.kv_v, state.positions, live)
        state.positions.add_(n if live is None else live.long() * n)
        x = hidden.transpose(1, 2)
        # ModuleList: Modules to a type checker; each stage is (transposed conv, ConvNeXt block)
        for up, convnext in cast("Sequence[tuple[CausalTransposedConv, ConvNeXtBlock]]", self.upsample):
            x = convnext(up(x, tails), tails)
        x = self.input_conv(x, tails)
        for block in self.blocks:
            x = block(x, tails)
        wav = self.output_conv(self.output_act(x), tails)
        return wav.clamp(-1.0, 1.0).squeeze(1)

    # ---- intermediate outputs (parity tests) -----------------------------------------------------------------
    @torch.no_grad()
    def dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 16, T] -> quantizer output [B, codebook_dim, T]."""
        return self.dequantizer(codes.long().clamp(min=0))

    @torch.no_grad()
    def transformer_output(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 16, T] -> pre-transformer output [B, T, latent_dim] of a single pass."""
        state = self.new_state(codes.shape[0])
        latent = self.pre_conv(self.dequantize(codes), StreamContext(state.tails))
        return self.pre_transformer(latent.transpose(1, 2), state.kv_k, state.kv_v, state.positions)
