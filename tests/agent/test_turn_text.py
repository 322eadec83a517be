"""agent/turn/words.py: whether a transcript's words read as a finished turn, and what words over the agent were."""

from __future__ import annotations

import pytest

from agent.turn.words import Completeness, OverlapKind, barge_in_cue, completeness, overlap_kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So I was thinking and", Completeness.UNFINISHED),  # a conjunction
        ("Can you tell me about the", Completeness.UNFINISHED),  # an article
        ("I'd like to...", Completeness.UNFINISHED),  # the transcriber heard it trail off
        ("I want to order um", Completeness.UNFINISHED),  # a filler
        ("The delivery goes to,", Completeness.UNFINISHED),
        ("My number is 555.", Completeness.UNFINISHED),  # a phone number too short to be whole
        ("My phone number is five five five", Completeness.UNFINISHED),
        ("You can reach me at 8th 1-2.", Completeness.UNFINISHED),
        ("I live at 22.", Completeness.UNFINISHED),  # a house number, no street yet
        ("My number is 555 123 4567.", Completeness.NEUTRAL),
        ("I would like to book a table.", Completeness.NEUTRAL),  # a full stop decides nothing
        ("What is the capital of France?", Completeness.FINISHED),
        ("Can you tell me about that?", Completeness.FINISHED),
        ("", Completeness.NEUTRAL),
    ],
)
def test_completeness(text: str, expected: Completeness) -> None:
    assert completeness(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mm-hmm.", OverlapKind.BACKCHANNEL),
        ("Yeah", OverlapKind.BACKCHANNEL),
        ("Right.", OverlapKind.BACKCHANNEL),
        ("Okay.", OverlapKind.BACKCHANNEL),
        ("Uh-huh.", OverlapKind.BACKCHANNEL),
        ("I see.", OverlapKind.BACKCHANNEL),
        ("Makes sense.", OverlapKind.BACKCHANNEL),  # an acknowledgement phrase
        ("Yeah, that makes sense.", OverlapKind.BACKCHANNEL),  # tokens and phrases together
        ("Mhm, okay.", OverlapKind.BACKCHANNEL),
        ("Okay okay okay okay.", OverlapKind.REQUEST),  # four listener tokens: more than a listener says in passing
        ("I know what you mean but", OverlapKind.REQUEST),  # a phrase at the start of something said
        ("Stop.", OverlapKind.REQUEST),
        ("Wait, no.", OverlapKind.REQUEST),
        ("Actually, make it five people.", OverlapKind.REQUEST),
        ("Okay, stop.", OverlapKind.REQUEST),  # a cue word wins over a listener token
        ("What about Tuesday instead", OverlapKind.REQUEST),
        ("", OverlapKind.EMPTY),
        ("(coughs)", OverlapKind.EMPTY),  # a transcriber's note, not words
        ("you", OverlapKind.EMPTY),  # one stray word: what a transcriber makes of a door
    ],
)
def test_overlap_kind(text: str, expected: OverlapKind) -> None:
    assert overlap_kind(text) is expected


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        ("Stop.", True), ("Wait", True), ("Actually,", True), ("Sorry, I meant", True), ("No, stop.", True),
        ("Hold on", True), ("Mm-hmm.", False), ("Yeah.", False), ("I see.", False), ("(coughs)", False),
        ("[Music]", False), ("", False), ("Thank you.", False), ("Okay", False),
    ],
)  # fmt: skip
def test_barge_in_cue(text: str, cue: bool) -> None:
    """What turn/overlap_words.py cuts on before the speech over the agent has ended: a cue, never a listener token."""
    assert barge_in_cue(text) is cue
