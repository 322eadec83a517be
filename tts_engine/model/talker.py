"""The talker: text embedding + projection, codec embedding, Qwen3 decoder stack, codebook-0 head.

Contract: module and parameter names mirror the checkpoint (`talker.model.*`, `talker.text_projection.*`,
`talker.codec_head.*`, `talker.code_predictor.*`; docs/model.md, "Checkpoint compatibility"), so
`TTSWeights(cfg).load_state_dict(safetensors)` loads a real file. Inference only; the talker's interleaved
M-RoPE with three identical position rows equals plain rotate-half RoPE (theta from config), which
`layers.DecoderStack` implements. Caching policy and sampling live with the caller.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tts_engine.model.config import ModelConfig
from tts_engine.model.layers import DecoderStack
from tts_engine.model.predictor import CodePredictor


class TextProjection(nn.Module):
    """Two-layer SiLU MLP text_hidden -> text_hidden -> talker hidden, both Linear with bias."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerModel(DecoderStack):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.talker)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)
        self.codec_embedding = nn.Embedding(cfg.talker.vocab_size, cfg.talker.hidden_size)


class Talker(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.talker.hidden_size)
        self.codec_head = nn.Linear(cfg.talker.hidden_size, cfg.talker.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text-token ids [..., T] -> projected embeddings [..., T, H] on the projection's device. The embedding
        table may live in CPU memory (the loader keeps it there on CUDA): rows are looked up where it is."""
        table = self.model.text_embedding.weight
        rows = F.embedding(ids.to(table.device), table)
        return self.text_projection(rows.to(self.text_projection.linear_fc1.weight.device))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.codec_embedding(ids)


class TTSWeights(nn.Module):
    """Root of the checkpoint's module tree: everything in model.safetensors lives under `talker.`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.talker = Talker(cfg)
