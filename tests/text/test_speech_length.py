"""The runaway guard's frame budget (text/speech_length.py): per-character allowances, the floor, growing text."""

from __future__ import annotations

import random

import pytest

from tts_engine.text.speech_length import (
    FLOOR_FRAMES,
    FRAMES_CJK,
    FRAMES_DIGIT,
    FRAMES_OTHER,
    FRAMES_SYMBOL,
    SpeechBudget,
    frame_budget,
    speech_frames,
)


@pytest.mark.parametrize(("text", "frames"), [
    ("", 0.0),
    ("Hi.", 3 * FRAMES_OTHER),
    ("你好。", 2 * FRAMES_CJK + FRAMES_OTHER),
    ("1,234", 4 * FRAMES_DIGIT + FRAMES_OTHER),
    ("20%", 2 * FRAMES_DIGIT + FRAMES_SYMBOL),
    ("ok 👍", 3 * FRAMES_OTHER + FRAMES_SYMBOL),
    ("こんにちは", 5 * FRAMES_CJK),
])
def test_allowance_per_character(text: str, frames: float) -> None:
    assert speech_frames(text) == frames


def test_budget_is_the_floor_plus_the_allowance() -> None:
    assert frame_budget("") == FLOOR_FRAMES
    assert frame_budget("Hi.") == FLOOR_FRAMES + 5  # 4.5 rounded up: "Hi." may take 2 s, not 4.4 s as before
    # a 50-character reply may take 7.6 s (it took 27.7 s with the old cap of 50 + 8 per token)
    reply = "Sure, I can help with that. Which time suits you?!"
    assert len(reply) == 50 and frame_budget(reply) * 0.08 == pytest.approx(7.6)
    assert frame_budget("Hi.", scale=2.0) == FLOOR_FRAMES + 9


def test_a_growing_text_adds_up_to_the_whole() -> None:
    text = "On 2024-03-15 the 系统 handled 99.9% of calls, Dr. Lee said. 然后呢？" * 3
    rng = random.Random(3)
    for _ in range(20):
        budget, start = SpeechBudget(), 0
        while start < len(text):
            end = min(len(text), start + rng.randint(1, 9))
            budget.add(text[start:end])
            start = end
        assert budget.frames == speech_frames(text) and budget.budget() == frame_budget(text)
