"""Parity of our talker + code predictor with the official qwen-tts-hf implementation (CPU, fp32, tiny checkpoint).

Both load the same random-weight checkpoint in the real layout. Greedy codes (all 16 codebooks) must be
identical for >= 40 frames on several texts/speakers/languages, and the talker and predictor logits must agree
within fp32 rounding. The reference is imported through tests/parity/official_ref.py, which raises (never skips)
when it is missing. Calls follow shared/reference/parity_reference.md §4-5.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.parity.official_ref import load_official
from tts_engine.model.factory import write_talker_weights
from tts_engine.model.loader import LoadedModel, load_model
from tts_engine.runtime.codegen import SamplingParams, generate_codes

pytestmark = pytest.mark.parity

FRAMES = 40  # official: frames = max_new_tokens - 1 when EOS never fires

CASES = [
    # text, speaker, language (official spelling), repetition penalty
    ("hello world", "serena", "English", 1.0),
    ("The quick brown fox jumps over the lazy dog.", "serena", "English", 1.05),
    ("你好，世界。今天天气很好。", "vivian", "Chinese", 1.05),
    ("Good morning, everyone. We stream audio as soon as it exists.", "ryan", "Auto", 1.05),
    ("北京欢迎你。", "dylan", "Chinese", 1.05),  # dialect speaker: language id -> beijing_dialect
    ("北京欢迎你。", "dylan", "Auto", 1.05),  # dialect override for auto as well
    ("Thank you very much for calling.", "dylan", "English", 1.05),  # explicit English: no override
]


@pytest.fixture(scope="module")
def official(tiny_checkpoint: Path) -> Any:
    return load_official(tiny_checkpoint)


@pytest.fixture(scope="module")
def ours(tiny_checkpoint: Path) -> LoadedModel:
    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


def _official_codes(tts: Any, text: str, speaker: str, language: str, penalty: float, frames: int,
                    instruct: str | None = None) -> torch.Tensor:
    input_ids = tts._tokenize_texts([tts._build_assistant_text(text)])
    instruct_ids = [None] if not instruct else [tts._tokenize_texts([tts._build_instruct_text(instruct)])[0]]
    kwargs = tts._merge_generate_kwargs(
        do_sample=False, subtalker_dosample=False, max_new_tokens=frames + 1, repetition_penalty=penalty
    )
    codes_list, _ = tts.model.generate(
        input_ids=input_ids, instruct_ids=instruct_ids, languages=[language], speakers=[speaker],
        non_streaming_mode=True, **kwargs,
    )
    return codes_list[0].cpu()


class _Recorder:
    """Forward hooks that record a Linear's last-position outputs, call by call."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        self.calls: list[list[torch.Tensor]] = [[] for _ in modules]
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(modules)]

    def _hook(self, index: int) -> Any:
        def hook(_module: torch.nn.Module, _inputs: Any, output: torch.Tensor) -> None:
            flat = output.detach().float().reshape(-1, output.shape[-1])
            self.calls[index].append(flat[-1].clone())

        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@pytest.mark.parametrize(("text", "speaker", "language", "penalty"), CASES)
def test_greedy_codes_identical(official: Any, ours: LoadedModel, text: str, speaker: str, language: str,
                                penalty: float) -> None:
    ref = _official_codes(official, text, speaker, language, penalty, FRAMES)
    got = generate_codes(ours, text, speaker, language.lower(), SamplingParams.greedy(penalty), max_frames=FRAMES)
    print(f"\n[parity] {speaker}/{language} penalty={penalty} text={text[:24]!r}: "
          f"official {tuple(ref.shape)} ours {tuple(got.shape)}")
    assert ref.shape == (FRAMES, 16), "the reference stopped early; the test needs >= 40 frames"
    assert got.shape == ref.shape
    mismatch = (got != ref).any(dim=1).nonzero()
    if mismatch.numel():
        first = int(mismatch[0])
        pytest.fail(f"first differing frame {first}: ours {got[first].tolist()} ref {ref[first].tolist()}")
    print(f"[parity] {FRAMES} frames x 16 codebooks identical")


def test_logits_within_fp32_rounding(official: Any, ours: LoadedModel) -> None:
    text, speaker, language = "The quick brown fox jumps over the lazy dog.", "vivian", "English"
    ref_talker = official.model.talker
    off_rec = _Recorder([ref_talker.codec_head, *ref_talker.code_predictor.lm_head])
    try:
        ref_codes = _official_codes(official, text, speaker, language, 1.05, FRAMES)
    finally:
        off_rec.close()
    our_rec = _Recorder([ours.talker.codec_head, *ours.predictor.lm_head])
    try:
        codes = generate_codes(ours, text, speaker, language.lower(), SamplingParams.greedy(1.05), max_frames=FRAMES)
    finally:
        our_rec.close()
    assert torch.equal(codes, ref_codes)
    # talker: prefill + one call per frame; ours runs the same number (the last one feeds a frame never made)
    n_talker = min(len(off_rec.calls[0]), len(our_rec.calls[0]))
    assert n_talker >= FRAMES
    worst_talker = max(float((a - b).abs().max()) for a, b in zip(off_rec.calls[0], our_rec.calls[0], strict=False))
    worst_pred = 0.0
    n_pred = 0
    for j in range(1, 16):
        assert len(our_rec.calls[j]) >= FRAMES and len(off_rec.calls[j]) >= FRAMES
        for a, b in zip(off_rec.calls[j][:FRAMES], our_rec.calls[j][:FRAMES], strict=True):
            worst_pred = max(worst_pred, float((a - b).abs().max()))
            n_pred += 1
    scale = float(torch.stack(off_rec.calls[0]).abs().max())
    print(f"\n[parity] talker logits: {n_talker} calls, max |diff| {worst_talker:.3g} (max |logit| {scale:.3g}); "
          f"predictor logits: {n_pred} calls, max |diff| {worst_pred:.3g}")
    for a, b in zip(off_rec.calls[0], our_rec.calls[0], strict=False):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for j in range(1, 16):
        for a, b in zip(off_rec.calls[j][:FRAMES], our_rec.calls[j][:FRAMES], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_1b7_structure_projection_and_instruct(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A 1.7B-shaped tiny model: talker hidden (96) != predictor hidden (64), so `small_to_mtp_projection` exists
    and the predictor embeddings have talker width; tts_model_size "1b7" prepends the instruction."""
    model_dir = tmp_path / "tiny_1b7"
    shutil.copytree(tiny_checkpoint, model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["tts_model_size"] = "1b7"
    cfg["talker_config"]["hidden_size"] = 96
    cfg["speaker_encoder_config"]["enc_dim"] = 96
    (model_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    write_talker_weights(cfg, model_dir / "model.safetensors", torch.float32, seed=3, progress=False)
    tts = load_official(model_dir)
    model = load_model(model_dir, device="cpu", dtype="float32")
    assert isinstance(model.predictor.small_to_mtp_projection, torch.nn.Linear)
    instruct = "Speak slowly and warmly."
    ref = _official_codes(tts, "hello world", "serena", "English", 1.05, FRAMES, instruct=instruct)
    got = generate_codes(model, "hello world", "serena", "english", SamplingParams.greedy(1.05), max_frames=FRAMES,
                         instruct=instruct)
    plain = generate_codes(model, "hello world", "serena", "english", SamplingParams.greedy(1.05), max_frames=FRAMES)
    print(f"\n[parity] 1.7B structure (projection 96->64) with instruct: {got.shape[0]} frames compared")
    assert ref.shape == (FRAMES, 16)
    assert torch.equal(got, ref)
    assert not torch.equal(got, plain), "the instruction had no effect on the 1b7 layout"
