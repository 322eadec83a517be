"""How many codec frames a text may take to say: the runaway guard's budget, sized from the text.

Contract:
- `speech_frames(text)` sums a per-character allowance: CJK, kana and hangul characters (one syllable each) 5
  frames, digits 8 (a digit grows into words: "1,234,567" is about 4 s of speech), symbols, emoji and the marks
  said as words 6 ("%" is "percent", "&" "and"), anything else (Latin letters, spaces, punctuation) 1.5.
  `frame_budget(text, scale)` is `FLOOR_FRAMES + ceil(scale * speech_frames(text))`: the floor covers a very short
  text ("Hi.").
- The allowances are about twice what measured speech needs at a normal pace and above what it needs at a slow one
  (docs/model.md, "Runaway cap", has the measurement), so real speech ends by EOS well before the budget, and a
  model that never emits EOS (random weights) stops about where real speech would have.
- `SpeechBudget` adds pieces of a growing text (streaming text) one at a time; its total equals
  `speech_frames` of the concatenated text, however the text was cut.
Pure Python; no model, tokenizer or device involved.
"""

from __future__ import annotations

import math
import unicodedata

from tts_engine.text.segment import is_cjk

FLOOR_FRAMES = 20  # 1.6 s
FRAMES_CJK = 5.0  # 0.4 s per character (slow Mandarin is about 3 characters per second)
FRAMES_DIGIT = 8.0
FRAMES_SYMBOL = 6.0
FRAMES_OTHER = 1.5  # 0.12 s per character (slow English is about 9-10 characters per second)
SAID_AS_WORDS = frozenset("%‰&@#*/\\§°")  # punctuation by Unicode category, but spoken as a word


def char_frames(ch: str) -> float:
    if is_cjk(ch):
        return FRAMES_CJK
    if ch.isdigit():
        return FRAMES_DIGIT
    if ch in SAID_AS_WORDS or unicodedata.category(ch).startswith("S"):  # symbols: math, currency, emoji...
        return FRAMES_SYMBOL
    return FRAMES_OTHER


def speech_frames(text: str) -> float:
    return sum(char_frames(ch) for ch in text)


def frame_budget(text: str, scale: float = 1.0) -> int:
    """The most frames `text` may take: FLOOR_FRAMES + scale x its per-character allowance."""
    return budget_from(speech_frames(text), scale)


def budget_from(frames: float, scale: float = 1.0) -> int:
    return FLOOR_FRAMES + math.ceil(scale * frames)


class SpeechBudget:
    """The allowance of a text that grows piece by piece."""

    def __init__(self) -> None:
        self.frames = 0.0

    def add(self, piece: str) -> None:
        self.frames += speech_frames(piece)

    def budget(self, scale: float = 1.0) -> int:
        return budget_from(self.frames, scale)
