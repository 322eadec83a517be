"""TextBridge: cut streaming LLM text into speakable segments for the TTS engine.

Contract: `push(text)` returns the segments that became ready; `flush()` returns the rest at end of
input. Concatenating all segments gives back the input's speakable text (whitespace normalised at
the cuts; segments with no letter or digit, e.g. a lone "...", are dropped since they make no sound).

The cutting itself is `tts_engine.text.segment.StreamSegmenter`, the one copy the engine's own text paths
(long text, the WebSocket route) use too; this module keeps the agent's names for it and its policy knobs
(docs/agent.md): a starter segment first (first clause, else 2-6 CJK characters / 1-3 Latin words) to cut
time-to-first-audio; then cuts at sentence and clause punctuation (CJK and Latin; Latin clauses once the
segment has `latin_clause_min` chars); with no punctuation, at `cjk_flush_chars` CJK characters or
`latin_flush_words` words, never more than `max_chars`; never inside a number ("3.14", "1,000", "12:30"),
a URL or a word, and closing quotes/brackets stay with the sentence they close.
"""

from __future__ import annotations

from tts_engine.text.segment import SegmenterOptions, StreamSegmenter, is_cjk

__all__ = ["BridgeOptions", "TextBridge", "is_cjk"]


class BridgeOptions(SegmenterOptions):
    """The segmenter's policy knobs under the agent's name (same fields, same checks)."""


class TextBridge(StreamSegmenter):
    def __init__(self, options: SegmenterOptions | None = None) -> None:
        super().__init__(options or BridgeOptions())
