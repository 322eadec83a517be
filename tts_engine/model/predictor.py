"""The code predictor ("sub-talker"): 15 codebooks after codebook 0, one frame at a time.

Contract: parameter names mirror the checkpoint (`talker.code_predictor.model.{codec_embedding.i, layers, norm}`,
`lm_head.i`, and on the 1.7B `small_to_mtp_projection`). `generate()` runs one frame for a batch of rows with
a fresh 16-position KV cache: a 2-token prefill (talker's final-normed hidden, embedding of c0 by the talker's
codec table) picks c1 with lm_head[0]; step j embeds c_j with codec_embedding[j-1] and picks c_{j+1} with
lm_head[j]. Every pass has a fixed shape and Python-int positions, so the loop is CUDA-graph capturable.
Which token is picked is the caller's `sample(pass_index, logits_fp32)` (pass 1..15).
After `use_fixed_positions(device)` (the CUDA fusion calls it) the passes run `DecoderStack.fixed`: positions and
key masks are device tensors and every pass attends over all 16 cache positions under its mask, so all 14
single-token passes share one shape (and one set of compiled kernels). Same function, fp32 attention math.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tts_engine.model.config import ModelConfig
from tts_engine.model.layers import DecoderStack

#: positions used per frame: talker hidden, c0, c1..c14 (c15 is only predicted)
PREDICTOR_POSITIONS = 16


class PredictorModel(DecoderStack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.predictor)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.predictor.vocab_size, cfg.talker.hidden_size) for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_code_groups = cfg.num_code_groups
        self.model = PredictorModel(cfg)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.predictor.hidden_size, cfg.predictor.vocab_size, bias=False)
            for _ in range(cfg.num_code_groups - 1)
        )
        if cfg.predictor.hidden_size != cfg.talker.hidden_size:
            self.small_to_mtp_projection: nn.Module = nn.Linear(
                cfg.talker.hidden_size, cfg.predictor.hidden_size, bias=True
            )
        else:
            self.small_to_mtp_projection = nn.Identity()
        self._fixed: tuple[torch.Tensor, torch.Tensor] | None = None  # (positions [16], causal mask [16, 16])

    def use_fixed_positions(self, device: torch.device) -> None:
        positions = torch.arange(PREDICTOR_POSITIONS, device=device)
        self._fixed = (positions, positions[None, :] <= positions[:, None])

    def _pass(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, start: int) -> torch.Tensor:
        """Hidden states of the tokens x [B, t, H] at positions start..start+t-1."""
        end = start + x.shape[1]
        if self._fixed is None:
            return self.model.static(x, cos[start:end], sin[start:end], k_cache, v_cache, start)
        positions, causal = self._fixed
        return self.model.fixed(x, cos[start:end], sin[start:end], k_cache, v_cache, positions[start:end],
                                causal[start:end])

    def generate(self, past_hidden: torch.Tensor, c0_embed: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 sample: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """past_hidden, c0_embed [B, H_talker]; caches [layers, B, kv, 16, D]; cos/sin [16, D] in the model dtype.

        Returns codes [B, num_code_groups-1] (c1..c15)."""
        x = self.small_to_mtp_projection(torch.stack((past_hidden, c0_embed), dim=1))
        h = self._pass(x, cos, sin, k_cache, v_cache, 0)
        codes = [sample(1, self.lm_head[0](h[:, -1]).float())]
        for j in range(1, self.num_code_groups - 1):
            x = self.small_to_mtp_projection(self.model.codec_embedding[j - 1](codes[-1])[:, None])
            h = self._pass(x, cos, sin, k_cache, v_cache, j + 1)
            codes.append(sample(j + 1, self.lm_head[j](h[:, -1]).float()))
        return torch.stack(codes, dim=1)

    def feedback_embedding(self, c0_embed: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Sum of the talker's c0 embedding and the 15 predictor embeddings: the talker's next input (before text)."""
        parts = [c0_embed] + [self.model.codec_embedding[i](codes[:, i]) for i in range(self.num_code_groups - 1)]
        return torch.stack(parts, dim=1).sum(dim=1)
