"""Streaming text input (the official `non_streaming_mode=False` layout) against the official implementation (CPU,
fp32, tiny checkpoint): greedy codes of all 16 codebooks identical for >= 40 frames, whatever the cuts of the text
into pushed pieces (whole, per character, per 3 characters, per word, random cuts)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.parity.official_ref import load_official
from tts_engine.model.loader import LoadedModel, load_model
from tts_engine.model.prompt import ROLE_TOKENS, SUFFIX_TOKENS, assistant_text
from tts_engine.runtime.codegen import SamplingParams, generate_codes
from tts_engine.runtime.text_feed import IncrementalTokens, generate_codes_streaming

pytestmark = pytest.mark.parity

FRAMES = 40
CASES = [
    ("hello world, this is streaming text.", "serena", "English", 1.05),
    ("你好，世界。今天天气很好，我们出去走走吧。", "vivian", "Chinese", 1.05),
    ("It costs 3.14 dollars, i.e. not much! Don't you think so?", "ryan", "Auto", 1.0),
    ("北京欢迎你。", "dylan", "Chinese", 1.05),
]


def cuts(text: str) -> dict[str, list[str]]:
    rng = random.Random(7)
    points = sorted(rng.sample(range(1, len(text)), min(6, len(text) - 1)))
    words, current = [], ""
    for ch in text:
        if ch == " " and current:
            words.append(current)
            current = ""
        current += ch
    words.append(current)
    return {
        "whole": [text],
        "chars": list(text),
        "threes": [text[i : i + 3] for i in range(0, len(text), 3)],
        "words": words,
        "random": [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)],
    }


@pytest.fixture(scope="module")
def official(tiny_checkpoint: Path) -> Any:
    return load_official(tiny_checkpoint)


@pytest.fixture(scope="module")
def ours(tiny_checkpoint: Path) -> LoadedModel:
    return load_model(tiny_checkpoint, device="cpu", dtype="float32")


def _official_streaming_codes(tts: Any, text: str, speaker: str, language: str, penalty: float) -> torch.Tensor:
    input_ids = tts._tokenize_texts([tts._build_assistant_text(text)])
    kwargs = tts._merge_generate_kwargs(
        do_sample=False, subtalker_dosample=False, max_new_tokens=FRAMES + 1, repetition_penalty=penalty
    )
    codes_list, _ = tts.model.generate(
        input_ids=input_ids, instruct_ids=[None], languages=[language], speakers=[speaker],
        non_streaming_mode=False, **kwargs,
    )
    return codes_list[0].cpu()


@pytest.mark.parametrize(("text", "speaker", "language", "penalty"), CASES)
def test_streaming_text_codes_identical_for_every_cut(official: Any, ours: LoadedModel, text: str, speaker: str,
                                                      language: str, penalty: float) -> None:
    ref = _official_streaming_codes(official, text, speaker, language, penalty)
    assert ref.shape == (FRAMES, 16), "the reference stopped early; the test needs >= 40 frames"
    whole = generate_codes(ours, text, speaker, language.lower(), SamplingParams.greedy(penalty), max_frames=FRAMES)
    assert not torch.equal(whole, ref), "the two layouts gave the same codes: the test would not see a wrong layout"
    for name, pieces in cuts(text).items():
        got = generate_codes_streaming(ours, pieces, speaker, language.lower(), SamplingParams.greedy(penalty),
                                       max_frames=FRAMES)
        assert got.shape == ref.shape, name
        mismatch = (got != ref).any(dim=1).nonzero()
        if mismatch.numel():
            first = int(mismatch[0])
            pytest.fail(f"{name}: first differing frame {first}: ours {got[first].tolist()} ref {ref[first].tolist()}")
    print(f"\n[parity] streaming text {speaker}/{language} {text[:20]!r}: {FRAMES} frames identical for "
          f"{len(cuts(text))} ways of cutting")


@pytest.mark.parametrize("text", [c[0] for c in CASES] + ["a  b\nc", "it's 1,000.5 ok", "  lead and trail  "])
def test_incremental_tokens_equal_the_whole_text_tokens(ours: LoadedModel, text: str) -> None:
    whole = ours.tokenizer.encode(assistant_text(text.strip()))[ROLE_TOKENS:-SUFFIX_TOKENS]
    for name, pieces in cuts(text).items():
        tokens = IncrementalTokens(ours.tokenizer)
        ids = [i for piece in pieces for i in tokens.push(piece)] + tokens.close()
        assert ids == whole, name
