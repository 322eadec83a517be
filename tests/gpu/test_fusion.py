"""On a CUDA GPU: the fused (torch.compile'd) model computes the same function as the plain model.

Graph == eager tests cannot catch a fusion bug (both paths use the fused model), so this compares the fused
model against a plain load of the same checkpoint: talker prefill, the 15 predictor passes and a talker step
along one forced token path, each within bf16 rounding, and the codec decoder with its fused activations.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint: Path) -> str:
    return os.environ.get("TTS_GPU_TEST_MODEL_DIR") or str(tiny_checkpoint)


@pytest.fixture(scope="module")
def models(model_dir: str) -> tuple[object, object]:
    from tts_engine.model.loader import load_model
    from tts_engine.runtime.fusion import fuse_model

    plain = load_model(model_dir, device="cuda")
    fused = load_model(model_dir, device="cuda")
    assert fuse_model(fused).startswith("on")
    return plain, fused


def _rel(ref: object, got: object) -> float:
    return float((ref - got).float().norm() / ref.float().norm())


def test_fused_talker_and_predictor_match_within_bf16(models: tuple[object, object]) -> None:
    """Both models follow one fixed token path, so an argmax flip cannot hide or fake a difference."""
    import torch

    from tts_engine.runtime.codegen import CodeGenerator, SamplingParams

    gen_tokens = torch.Generator().manual_seed(1)
    forced = torch.randint(0, 2048, (16,), generator=gen_tokens).tolist()
    results = []
    for model in models:
        gen = CodeGenerator(model, max_slots=1)
        prompt = gen.prepare("Fusion must not change the function.", model.speakers[0], "auto", max_frames=8)
        gen.admit(0, prompt, SamplingParams.greedy())
        after_prefill = gen.logits[0].clone()
        c0 = torch.tensor([forced[0]], device="cuda")
        c0_embed = gen.talker.embed_codec(c0)
        seen: list[torch.Tensor] = []

        def sample(pass_index: int, logits: torch.Tensor, seen: list[torch.Tensor] = seen) -> torch.Tensor:
            seen.append(logits.clone())
            return torch.tensor([forced[pass_index]], device="cuda")

        rest = gen.predictor.generate(gen.past_hidden[:1], c0_embed, gen.pk_cache[:, :1], gen.pv_cache[:, :1],
                                      gen.pcos, gen.psin, sample)
        gen.advance_talker(1, c0, c0_embed, rest)
        results.append((after_prefill, torch.stack(seen), gen.logits[0].clone()))
    (p_prefill, p_passes, p_step), (f_prefill, f_passes, f_step) = results
    assert _rel(p_prefill, f_prefill) < 5e-2
    for i in range(p_passes.shape[0]):
        assert _rel(p_passes[i], f_passes[i]) < 5e-2, f"predictor pass {i + 1}"
    assert _rel(p_step, f_step) < 5e-2


def test_fused_codec_snake_matches_the_plain_decoder(models: tuple[object, object]) -> None:
    """The codec with its SnakeBeta activations compiled (`codec_snake`) decodes the same PCM as the plain codec,
    within fp32 rounding of a different sin implementation, stepping frame by frame over several rows."""
    import torch

    plain, fused = models
    gen = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 2048, (3, 16, 30), generator=gen).cuda()
    outs = []
    for model in (plain, fused):
        state = model.codec.new_state(3)
        outs.append(torch.cat([model.codec.step(codes[:, :, t : t + 1], state) for t in range(30)], dim=-1))
    noise = (outs[0] - outs[1]).double().pow(2).sum()
    snr_db = 10 * torch.log10(outs[0].double().pow(2).sum() / noise.clamp(min=1e-30))
    assert snr_db > 60, f"fused codec SNR vs plain {snr_db:.1f} dB"
