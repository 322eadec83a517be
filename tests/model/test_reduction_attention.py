"""The attention variants the CUDA fusion switches on compute the same function as the SDPA paths (CPU, fp32).

- `attend_by_reduction` == `scaled_dot_product_attention` with GQA and a key mask.
- The code predictor's fixed-position passes (`use_fixed_positions`) give the same logits, pass by pass, as the
  static passes, and the same greedy codes frame after frame.
- A talker step with `reduce_attention` gives the same logits as with SDPA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tts_engine.model.layers import attend_by_reduction
from tts_engine.model.loader import load_model
from tts_engine.runtime.codegen import CodeGenerator, SamplingParams


def test_attend_by_reduction_matches_sdpa_with_gqa_and_mask() -> None:
    gen = torch.Generator().manual_seed(0)
    b, kv, groups, t, length, d = 3, 2, 4, 2, 11, 16
    q = torch.randn(b, kv * groups, t, d, generator=gen)
    keys = torch.randn(b, kv, length, d, generator=gen)
    values = torch.randn(b, kv, length, d, generator=gen)
    visible = torch.rand(b, 1, 1, t, length, generator=gen) > 0.3
    visible[..., 0] = True  # every query sees at least one key
    ref = F.scaled_dot_product_attention(
        q, keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1),
        attn_mask=visible[:, 0, 0][:, None].expand(b, kv * groups, t, length),
    )
    got = attend_by_reduction(q, keys, values, visible, groups)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.fixture()
def fresh_model(tiny_checkpoint: Path) -> Any:
    return load_model(tiny_checkpoint, device="cpu", dtype="float32")  # mutated by the tests below


def _frames(model: Any, n: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = CodeGenerator(model, max_slots=2)
    prompt = gen.prepare("Fixed positions must not change the function.", model.speakers[0], "auto", max_frames=n)
    gen.admit(0, prompt, SamplingParams.greedy())
    gen.admit(1, prompt, SamplingParams.greedy())
    codes, logits = [], []
    for _ in range(n):
        c, _ = gen.step(2)
        codes.append(c.clone())
        logits.append(gen.logits[:2].clone())
    return torch.stack(codes), logits


def test_fixed_position_predictor_and_reduction_talker_match_the_sdpa_paths(fresh_model: Any) -> None:
    ref_codes, ref_logits = _frames(fresh_model, 12)
    fresh_model.predictor.use_fixed_positions(fresh_model.device)
    for module in fresh_model.talker.model.modules():
        if hasattr(module, "reduce_attention"):
            module.reduce_attention = True
    got_codes, got_logits = _frames(fresh_model, 12)
    assert torch.equal(ref_codes, got_codes)
    for ref, got in zip(ref_logits, got_logits, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_fixed_position_passes_match_static_passes_logit_by_logit(fresh_model: Any) -> None:
    gen = CodeGenerator(fresh_model, max_slots=1)
    prompt = gen.prepare("Pass by pass.", fresh_model.speakers[0], "auto", max_frames=4)
    gen.admit(0, prompt, SamplingParams.greedy())
    forced = torch.randint(0, fresh_model.config.predictor.vocab_size, (16,),
                           generator=torch.Generator().manual_seed(3))
    c0_embed = gen.talker.embed_codec(forced[:1])
    seen: dict[bool, list[torch.Tensor]] = {False: [], True: []}
    for fixed in (False, True):
        if fixed:
            fresh_model.predictor.use_fixed_positions(fresh_model.device)

        def sample(pass_index: int, logits: torch.Tensor, out: list[torch.Tensor] = seen[fixed]) -> torch.Tensor:
            out.append(logits.clone())
            return forced[pass_index : pass_index + 1]

        gen.pk_cache.normal_()  # stale values from another frame must be masked out, never read
        gen.predictor.generate(gen.past_hidden[:1], c0_embed, gen.pk_cache[:, :1], gen.pv_cache[:, :1],
                               gen.pcos, gen.psin, sample)
    assert len(seen[True]) == len(seen[False]) == fresh_model.config.num_code_groups - 1
    for ref, got in zip(seen[False], seen[True], strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batched_attention", ["sdpa", "reduce"])
def test_split_batched_talker_step_matches_the_whole_step(fresh_model: Any, batched_attention: str) -> None:
    """Many rows with `split_step` (cache written outside `attend_out`, as the CUDA fusion sets it) compute the
    same logits and codes as the single-function step."""
    ref_codes, ref_logits = _frames(fresh_model, 12)
    for module in fresh_model.talker.model.modules():
        if hasattr(module, "split_step"):
            module.split_step = True
            module.batched_attention = batched_attention
    got_codes, got_logits = _frames(fresh_model, 12)
    assert torch.equal(ref_codes, got_codes)
    for ref, got in zip(ref_logits, got_logits, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
