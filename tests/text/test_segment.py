"""tts_engine.text.segment: sentence cuts (CJK and Latin), never inside numbers/URLs/words, closers kept with their
sentence, and packing a long text into pieces under a cost limit."""

from __future__ import annotations

import pytest

from tts_engine.text.segment import CLOSERS, find_boundaries, iter_split_to_fit, split_sentences, split_to_fit


def squash(text: str) -> str:
    return "".join(text.split())


def test_sentences_cjk_and_latin() -> None:
    text = "你好，世界。今天天气很好！It is 3.14 degrees. See https://example.com/a.b?x=1,2 now! 好的？"
    assert split_sentences(text) == [
        "你好，世界。",
        "今天天气很好！",
        "It is 3.14 degrees.",
        "See https://example.com/a.b?x=1,2 now!",
        "好的？",
    ]


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("他说：“你好。”第1章开始了。", ["他说：“你好。”", "第1章开始了。"]),
        ('He said "Hi." Then he left.', ['He said "Hi."', "Then he left."]),
        ("真的吗？！（是的。）好……走吧。", ["真的吗？！", "（是的。）", "好……", "走吧。"]),
        ("It costs 1,000 dollars. Dr. Smith agrees, e.g. here.",
         ["It costs 1,000 dollars.", "Dr. Smith agrees, e.g. here."]),
        ("Wait... what?! Yes.", ["Wait...", "what?!", "Yes."]),
    ],
)
def test_closers_numbers_and_abbreviations(text: str, sentences: list[str]) -> None:
    got = split_sentences(text)
    assert got == sentences
    assert not any(s[0] in CLOSERS for s in got)


def test_an_unfinished_buffer_waits_for_what_follows_a_mark() -> None:
    assert find_boundaries("你好。", final=False) == []  # a "”" may still come
    assert find_boundaries("你好。", final=True) == [(3, "sentence")]
    assert find_boundaries("Pi is 3.", final=False) == []  # "14" may still come
    assert find_boundaries("你好。”第", final=False) == [(4, "sentence")]


MIXED = (
    "第1章：系统在2024年3月15日上线，处理了1,234,567次请求，平均延迟是3.14毫秒。"
    "The server at https://api.example.com/v1.2/speech handled 99.9% of calls; Dr. Lee said: \"It works.\" "
    "然后我们测试了长文本（包括数字12:30和URL）。Everything was fine! 接下来呢？"
)


def test_split_to_fit_packs_sentences_under_the_limit_and_keeps_everything() -> None:
    text = (MIXED * 12)[:2000]
    pieces = split_to_fit(text, len, 120)
    assert len(pieces) > 10
    assert all(len(p) <= 120 for p in pieces)
    assert squash("".join(pieces)) == squash(text)
    assert pieces[0] == split_sentences(text)[0]  # the first sentence alone: a short first prefill
    for kept in ("1,234,567", "3.14", "https://api.example.com/v1.2/speech", "99.9%", "12:30", "Dr. Lee"):
        assert sum(p.count(kept) for p in pieces) == text.count(kept) > 0, kept  # no cut inside any of them


def test_the_first_piece_of_a_long_text_is_cut_without_reading_the_whole_text() -> None:
    text = MIXED * 100  # ~17,000 characters: cutting it all costs milliseconds before first audio (issue 16)
    counted: list[int] = []

    def count(piece: str) -> int:
        counted.append(len(piece))
        return len(piece)

    pieces = iter_split_to_fit(text, count, 120)
    head = [next(pieces), next(pieces)]
    assert sum(counted) < 1_000  # the first sentences only, not the 17,000 characters
    assert head + list(pieces) == split_to_fit(text, len, 120)


def test_a_text_that_fits_stays_whole() -> None:
    assert split_to_fit("  Hello there. How are you?  ", len, 100) == ["Hello there. How are you?"]
    assert split_to_fit("   ", len, 100) == []


def test_long_sentences_are_cut_at_clauses_then_words_then_characters() -> None:
    clauses = "我们先做这个，然后做那个，最后再看看结果怎么样。"
    expected = ["我们先做这个，", "然后做那个，", "最后再看看结果怎", "么样。"]
    assert split_to_fit(clauses, len, 8, join_cost=0) == expected
    words = " ".join(f"word{i}" for i in range(30))
    pieces = split_to_fit(words, len, 20)
    assert all(len(p) <= 20 for p in pieces) and " ".join(pieces).split() == words.split()
    url = "https://example.com/" + "x" * 100
    pieces = split_to_fit(f"Open {url} now.", len, 30)
    assert all(len(p) <= 30 for p in pieces) and squash("".join(pieces)) == squash(f"Open {url} now.")
