"""Factory layout/determinism/tokenizer ids; sampling math against the HF logits processors; synthesize CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tts_engine.model.factory import SPECIAL_TOKENS, make_checkpoint
from tts_engine.model.loader import LoadedModel
from tts_engine.model.sampling import choose, process_talker_logits, token_hashes

REAL_FILES = [
    "config.json", "generation_config.json", "model.safetensors", "preprocessor_config.json", "tokenizer_config.json",
    "vocab.json", "merges.txt", "speech_tokenizer/config.json", "speech_tokenizer/configuration.json",
    "speech_tokenizer/model.safetensors", "speech_tokenizer/preprocessor_config.json",
]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_real_layout_and_deterministic(tiny_checkpoint: Path, tmp_path: Path) -> None:
    for name in REAL_FILES:
        assert (tiny_checkpoint / name).is_file(), name
    cfg = json.loads((tiny_checkpoint / "config.json").read_text())
    talker = cfg["talker_config"]
    assert talker["rope_scaling"] == {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"}
    assert "rope_parameters" not in talker and talker["spk_is_dialect"]["dylan"] == "beijing_dialect"
    assert cfg["tts_model_size"] == "0b6" and cfg["tts_model_type"] == "custom_voice"
    again = make_checkpoint("tiny", tmp_path / "again", seed=0)
    assert _sha(again / "model.safetensors") == _sha(tiny_checkpoint / "model.safetensors")
    other = make_checkpoint("tiny", tmp_path / "other", seed=1)
    assert _sha(other / "model.safetensors") != _sha(tiny_checkpoint / "model.safetensors")


def test_tokenizer_carries_real_ids(tiny_model: LoadedModel) -> None:
    ids = tiny_model.tokenizer.encode("<|im_start|>assistant\nhello world<|im_end|>\n<|im_start|>assistant\n")
    assert ids[:3] == [151644, 77091, 198] and ids[-5:] == [151645, 198, 151644, 77091, 198]
    for token, real_id in SPECIAL_TOKENS.items():
        assert tiny_model.tokenizer.encode(token) == [real_id]
    assert tiny_model.tokenizer.encode("<|im_start|>user\n")[:2] == [151644, 872]


def test_unknown_preset(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allowed presets: tiny, 0.6b, 1.7b"):
        make_checkpoint("3b", tmp_path)


def test_talker_processors_match_hf() -> None:
    from transformers.generation.logits_process import (
        MinNewTokensLengthLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
        SuppressTokensLogitsProcessor,
    )

    gen = torch.Generator().manual_seed(0)
    vocab, eos = 3072, 2150
    logits = torch.randn(3, vocab, generator=gen) * 3
    history = torch.randint(0, 2048, (3, 5), generator=gen)
    suppress_ids = [i for i in range(2048, 3072) if i != eos]
    hf = RepetitionPenaltyLogitsProcessor(1.05)(history, logits.clone())
    hf = SuppressTokensLogitsProcessor(suppress_ids)(history, hf)
    seen = torch.zeros(3, vocab, dtype=torch.bool).scatter_(1, history, True)
    suppress = torch.zeros(vocab, dtype=torch.bool)
    suppress[suppress_ids] = True
    ours = process_talker_logits(logits, seen, torch.full((3,), 1.05), torch.full((3,), 5), eos, suppress)
    assert torch.equal(ours, hf)
    # first frames: EOS masked like HF min_new_tokens=2 (prompt length 0 since the prompt is embeddings)
    hf_min = MinNewTokensLengthLogitsProcessor(0, 2, eos)(history[:, :1], logits.clone())
    early = process_talker_logits(logits, torch.zeros_like(seen), torch.ones(3), torch.ones(3, dtype=torch.long),
                                  eos, torch.zeros(vocab, dtype=torch.bool))
    assert torch.equal(early, hf_min)


@pytest.mark.parametrize(("top_k", "top_p"), [(50, 1.0), (0, 0.8), (10, 0.5), (1, 1.0)])
def test_kept_set_matches_hf_warpers(top_k: int, top_p: float) -> None:
    """Across many seeds, every sampled token lies in HF's kept set and the kept set is reached."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 64, generator=gen) * 2
    hf = logits / 0.9
    if top_k > 0:
        hf = TopKLogitsWarper(top_k)(None, hf)
    if top_p < 1.0:
        hf = TopPLogitsWarper(top_p)(None, hf)
    kept = set(torch.isfinite(hf[0]).nonzero().flatten().tolist())
    rows = 400
    picked = choose(
        logits.expand(rows, -1), torch.ones(rows, dtype=torch.bool), torch.full((rows,), 0.9),
        torch.full((rows,), top_k), torch.full((rows,), top_p), torch.full((rows,), 7), torch.arange(rows), 0,
        token_hashes(64, torch.device("cpu")),
    )
    assert set(picked.tolist()) <= kept
    assert len(set(picked.tolist())) >= min(len(kept), 3)


def test_gumbel_sampling_follows_softmax() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    rows = 20000
    no_top_k = torch.zeros(rows, dtype=torch.long)
    picked = choose(
        logits.expand(rows, -1), torch.ones(rows, dtype=torch.bool), torch.ones(rows), no_top_k, torch.ones(rows),
        torch.arange(rows), torch.zeros(rows, dtype=torch.long), 3, token_hashes(4, torch.device("cpu")),
    )
    freq = torch.bincount(picked, minlength=4).float() / rows
    expected = logits.softmax(-1)[0]
    assert torch.allclose(freq, expected, atol=0.015), (freq, expected)


def test_synthesize_cli_writes_frames_times_1920(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from tts_engine.__main__ import main
    from tts_engine.runtime.wav import read_wav

    out = tmp_path / "out.wav"
    rc = main(["synthesize", "--model", str(tiny_checkpoint), "--text", "hello world", "--speaker", "serena",
               "--language", "english", "--out", str(out), "--device", "cpu", "--max-frames", "30"])
    assert rc == 0
    samples, rate = read_wav(out)
    assert rate == 24000 and samples.shape[0] == 30 * 1920
    assert np.abs(samples.astype(np.float32)).max() > 100  # not silence
