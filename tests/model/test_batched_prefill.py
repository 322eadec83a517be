"""Batched prefill (runtime/prefill_graphs.py, the CUDA admission path) computes the same prompts' caches and first
logits as one-by-one prefills: run here on the CPU in fp32, without graphs, through the same hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tts_engine.model.loader import load_model
from tts_engine.runtime.codegen import CodeGenerator, SamplingParams
from tts_engine.runtime.cuda_graphs import GraphStats
from tts_engine.runtime.prefill_graphs import PrefillGraphs

TEXTS = ["Short.", "A somewhat longer sentence to make another prompt length.", "Third one, in between."]


def test_admit_many_with_the_batched_hook_matches_single_admissions(tiny_checkpoint: Path) -> None:
    model: Any = load_model(tiny_checkpoint, device="cpu", dtype="float32")
    plain = CodeGenerator(model, max_slots=4, max_seq_len=512)
    batched = CodeGenerator(model, max_slots=4, max_seq_len=512)
    stats = GraphStats()
    PrefillGraphs(batched, torch.device("cpu"), 4, stats)  # installs prefill_hook + prefill_many_hook
    assert batched.prefill_many_hook is not None
    prompts = [plain.prepare(t, model.speakers[0], "auto", max_frames=10) for t in TEXTS]
    params = [SamplingParams.greedy()] * 3
    for slot, prompt in zip([1, 2, 3], prompts, strict=True):
        plain.admit(slot, prompt, SamplingParams.greedy())
    batched.admit_many([1, 2, 3], prompts, params)
    for slot, prompt in zip([1, 2, 3], prompts, strict=True):
        n = prompt.embeds.shape[0]
        torch.testing.assert_close(batched.logits[slot], plain.logits[slot], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(batched.k_cache[:, slot, :, :n], plain.k_cache[:, slot, :, :n], rtol=1e-4,
                                   atol=1e-4)
        assert int(batched.positions[slot]) == n
    assert stats.eager_steps > 0  # no graphs here: the eager path, counted
    for _ in range(6):  # and the streams go on to the same codes
        a, _ = plain.step(4)
        b, _ = batched.step(4)
        assert torch.equal(a[1:], b[1:])
