"""Token selection on the device, per row, in the Hugging Face order; graph-safe, counter-based randomness.

Contract:
- `process_talker_logits`: repetition penalty on the codebook-0 history (a [rows, vocab] seen-mask; HF's
  `score<0 ? score*p : score/p`), EOS masked while fewer than `min_new_tokens` frames exist, control ids
  suppressed (a [vocab] mask). Same order as HF `generate` (penalty -> min_new_tokens -> suppress).
- `choose`: greedy rows take argmax of the processed logits; sampling rows apply temperature -> top-k -> top-p
  (HF semantics: top_k <= 0 off, top_p >= 1 off) and pick by Gumbel-max. The Gumbel noise is a pure function of
  (seed, counter, pass, token id) through an integer hash, never the global RNG: a stream's draws do not
  depend on which other rows share the batch, and the function has no host syncs or data-dependent shapes.
  It samples exactly from softmax(logits/T) restricted to the kept set, like HF's multinomial (not bitwise).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF


def _mul32(h: torch.Tensor, const: int) -> torch.Tensor:
    """(h * const) mod 2**32 for int64 h in [0, 2**32) without signed overflow (split the constant in halves)."""
    lo, hi = const & 0xFFFF, const >> 16
    return (h * lo + (((h * hi) & 0xFFFF) << 16)) & _M32


def mix32(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche hash (lowbias32 constants) on int64 tensors holding values in [0, 2**32)."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x7FEB352D)
    h = h ^ (h >> 15)
    h = _mul32(h, 0x846CA68B)
    return h ^ (h >> 16)


def gumbel_noise(seed: torch.Tensor, counter: torch.Tensor, pass_index: int, token_hash: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise [rows, vocab] from (seed [rows], counter [rows], pass, token) -> float32."""
    key = mix32((counter & _M32) ^ ((pass_index * 0x9E3779B9) & _M32))
    key = mix32(key ^ (seed & _M32))
    key = mix32(key ^ ((seed >> 32) & _M32))
    bits = mix32(key[:, None] ^ token_hash[None, :])
    u = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))  # in (0, 1), never 0 or 1
    return -torch.log(-torch.log(u))


def token_hashes(vocab: int, device: torch.device) -> torch.Tensor:
    """Per-token salt for `gumbel_noise`, computed once per vocabulary."""
    return mix32(torch.arange(vocab, dtype=torch.int64, device=device) + 0x632BE5AB)


def process_talker_logits(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor, frame: torch.Tensor,
                          eos_id: int, suppress: torch.Tensor, min_new_tokens: int = 2) -> torch.Tensor:
    """logits fp32 [B, V]; seen bool [B, V]; penalty fp32 [B]; frame long [B] (frames made so far); suppress [V]."""
    p = penalty[:, None]
    logits = torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)
    eos_col = torch.where(frame < min_new_tokens, torch.full_like(logits[:, eos_id], float("-inf")), logits[:, eos_id])
    logits = logits.masked_fill(suppress[None, :], float("-inf"))
    return torch.cat((logits[:, :eos_id], eos_col[:, None], logits[:, eos_id + 1 :]), dim=1)


def choose(logits: torch.Tensor, do_sample: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
           top_p: torch.Tensor, seed: torch.Tensor, counter: torch.Tensor, pass_index: int,
           token_hash: torch.Tensor) -> torch.Tensor:
    """logits fp32 [B, V] (already processed) -> token ids [B] (long). Per-row parameters are [B] tensors."""
    vocab = logits.shape[-1]
    greedy = logits.argmax(dim=-1)
    x = logits / temperature[:, None]
    ordered, _ = x.sort(dim=-1, descending=True)
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    rank = torch.arange(vocab, device=logits.device)[None, :]
    in_top_k = rank < k[:, None]
    ordered = ordered.masked_fill(~in_top_k, float("-inf"))
    probs = ordered.softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs
    keep = in_top_k & ((mass_above < top_p[:, None]) | (top_p[:, None] >= 1.0))
    keep[:, 0] = True
    n_keep = keep.sum(dim=-1, keepdim=True)
    threshold = ordered.gather(1, n_keep - 1)
    x = x.masked_fill(x < threshold, float("-inf"))
    sampled = (x + gumbel_noise(seed, counter, pass_index, token_hash)).argmax(dim=-1)
    return torch.where(do_sample, sampled, greedy)
