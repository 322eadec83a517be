"""The design's TextBridge, `tts_engine.StreamSegmenter` (the agent uses it through tts_engine's public names):
starter segment, punctuation (CJK and Latin), length flush, nothing split inside numbers, URLs or words, and the
same result however the text is chunked."""

from __future__ import annotations

import pytest

from tts_engine import SegmenterOptions as BridgeOptions
from tts_engine import StreamSegmenter as TextBridge


def segments(text: str, step: int = 1, options: BridgeOptions | None = None) -> list[str]:
    bridge, out = TextBridge(options), []
    for i in range(0, len(text), step):
        out += bridge.push(text[i : i + step])
    return out + bridge.flush()


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_latin_starter_then_sentences(step: int) -> None:
    text = "Sure, I can help with that. It is sunny today! Anything else?"
    assert segments(text, step) == ["Sure,", "I can help with that.", "It is sunny today!", "Anything else?"]


def test_latin_starter_without_punctuation_is_three_words() -> None:
    assert segments("The capital of France is Paris.")[0] == "The capital of"


def test_cjk_starter_and_punctuation() -> None:
    text = "你好，我是你的语音助手。今天天气很好！"
    assert segments(text) == ["你好，", "我是你的语音助手。", "今天天气很好！"]


def test_cjk_starter_length_cut_is_six_chars() -> None:
    assert segments("这是一个没有任何标点的句子")[0] == "这是一个没有"


def test_cjk_length_flush_without_punctuation() -> None:
    segs = segments("好的。" + "我" * 30)
    assert segs[0] == "好的。"
    assert [len(s) for s in segs[1:]] == [12, 12, 6]


@pytest.mark.parametrize(
    "text, kept",
    [
        ("Pi is 3.14 and that is fine. Next.", "3.14"),
        ("It costs 1,000 dollars, roughly. Next.", "1,000"),
        ("We meet at 12:30 today. Next.", "12:30"),
        ("Open https://example.com/a.b?x=1,2 now. Next.", "https://example.com/a.b?x=1,2"),
        ("价格是12.5元。然后", "12.5"),
    ],
)
def test_never_splits_numbers_or_urls(text: str, kept: str) -> None:
    for step in (1, 2, 5):
        segs = segments(text, step)
        assert any(kept in s for s in segs), segs


def test_long_latin_without_punctuation_cuts_on_word_boundaries() -> None:
    words = [f"word{i}" for i in range(40)]
    segs = segments(" ".join(words))
    assert " ".join(segs).split() == words  # no word was cut
    assert all(len(s) <= 60 for s in segs)
    assert segs[0] == "word0 word1 word2"


def test_a_very_long_word_is_never_split() -> None:
    long_word = "x" * 100
    assert segments(f"Hello {long_word} there") == ["Hello", long_word, "there"]


def test_clause_comma_merges_short_latin_clauses() -> None:
    segs = segments("Well, yes, no, maybe, I think so, and then we go home together.")
    assert segs[0] == "Well,"
    assert segs[1].startswith("yes, no, maybe,")


def test_abbreviation_is_not_a_sentence_end() -> None:
    assert "Dr. Smith said so." in segments("Hello there. Dr. Smith said so.")


def test_punctuation_only_segments_are_dropped() -> None:
    assert segments("... !!! ") == []
    assert segments("Hi... ") == ["Hi..."]


def test_flush_returns_the_rest_and_resets() -> None:
    bridge = TextBridge()
    assert bridge.push("Hello there my friend") == ["Hello there my"]
    assert bridge.flush() == ["friend"]
    assert bridge.flush() == []
    assert bridge.segments_emitted == 2


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match="starter_cjk_min"):
        BridgeOptions(starter_cjk_min=9, starter_cjk_max=6)


CLOSER_TEXTS = [
    "他说：“你好。”第1章开始了。然后呢？",
    "她问（真的吗？）我们走吧。好的！」下一句",
    'He said "Hi." Then he left. She said (yes!) and smiled.',
]


@pytest.mark.parametrize("text", CLOSER_TEXTS)
def test_closing_quotes_and_brackets_stay_with_their_sentence(text: str) -> None:
    """A chunk boundary between "。" and "”" used to start the next segment with a stray closer (2.5% of segments
    in a corpus run): every cut position of every chunking must keep closers with the sentence before them."""
    closers = "\"')]}”’」』）】"
    for step in range(1, 8):
        segs = segments(text, step)
        assert not any(s[0] in closers for s in segs), (step, segs)
        assert "".join(segs).replace(" ", "") == text.replace(" ", "")
    for cut in range(1, len(text)):  # every two-chunk split, e.g. "…你好。" | "”第1章…"
        bridge = TextBridge()
        segs = bridge.push(text[:cut]) + bridge.push(text[cut:]) + bridge.flush()
        assert not any(s[0] in closers for s in segs), (cut, segs)
