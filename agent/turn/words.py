"""What a transcript's words say about turn-taking: does the turn read as finished, is an overlap a backchannel.

- `completeness(text)`: `UNFINISHED` when the words stop where speech does not (a trailing conjunction,
  article, preposition, filler or auxiliary; a trailing "...", comma or dash; a phone number or house number
  that is still too short), `FINISHED` when they end a question or exclamation, else `NEUTRAL` (a transcriber
  puts a full stop after a fragment as readily as after a sentence, so "." decides nothing).
- `barge_in_cue(text)`: the words hold a barge-in cue ("stop", "wait", "no", "actually" ...): what
  agent/turn/overlap_words.py acts on before the caller's speech over the agent has ended.
- `overlap_kind(text)`: what the caller said over the agent: `REQUEST` (a barge-in cue such as "stop", "wait",
  "no", or two words or more that are not all listener tokens), `BACKCHANNEL` (a few listener tokens and
  acknowledgements: "mm-hmm", "yeah", "okay", "makes sense" ...) or `EMPTY` (nothing, a transcriber's note such as
  "(coughs)", or one stray word: what a transcriber makes of a cough or a door).
English word lists: other languages read NEUTRAL / REQUEST, so a non-English caller gets the audio model's judgement
and the safe side of interruptions (a cut, never an ignored request).
"""

from __future__ import annotations

import enum
import re


class Completeness(enum.Enum):
    UNFINISHED = "unfinished"
    NEUTRAL = "neutral"
    FINISHED = "finished"


class OverlapKind(enum.Enum):
    EMPTY = "empty"
    BACKCHANNEL = "backchannel"
    REQUEST = "request"


# words after which an English sentence cannot end
_CONTINUES = frozenset(
    """a an the and or but nor so because since if unless although though whether to of for with at in on by
    from into onto about as than like my your his her its our their is are was were am be been being do does
    did have has had can could will would shall should may might must um uh er erm hmm uhm ah eh""".split()
)
# what a listener says to keep the speaker going (whisper spells the hums several ways)
_BACKCHANNEL = frozenset(
    """mm mhm mmhm mmhmm mm-hmm mm-mm hmm hm uh-huh uhhuh uh-uh yeah yep yup yes ya right okay ok alright sure
    got it i see oh ah aha cool nice wow great really true exactly indeed totally gotcha""".split()
)
# acknowledgements beyond single tokens (a transcriber also writes "make sense"), longest first ("that makes sense")
_BACKCHANNEL_PHRASES = tuple(sorted(
    {"got it", "i see", "all right", "uh huh", "mm hmm", "that's right", "oh okay", "makes sense", "make sense",
     "that makes sense", "sounds good", "fair enough", "of course", "i know", "i understand", "got you"},
    key=lambda p: (-len(p), p)))  # fmt: skip
_BACKCHANNEL_MAX_WORDS = 5  # longer than this is something said, whatever its words
# words that make an utterance over the agent a request, however short ("stop", "wait", "no, ...")
_BARGE_IN_CUES = frozenset(
    "stop wait no hold hang sorry excuse actually but listen what pardon please cancel enough quiet".split()
)
_NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty sixty "
    "seventy eighty ninety hundred double".split()
)
_PHONE_CUES = ("number", "phone", "call me", "reach me")
_ADDRESS_CUES = ("live at", "address", "located at", "i'm at", "im at", "at number")
_ANNOTATION = re.compile(r"[\[(][^\])]*[\])]")  # "[Music]", "(coughs)": a transcriber's note, not words
_WORD = re.compile(r"[a-z0-9']+(?:-[a-z0-9']+)*")
_PHONE_DIGITS = 7  # fewer digits than a local phone number: the number goes on


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _trailing_digits(words: list[str]) -> int:
    """How many digits the run of numbers at the end of `words` holds ("555" = 3, "five five five" = 3, "1-2" = 2)."""
    digits = 0
    for word in reversed(words):
        if any(c.isdigit() for c in word):
            digits += sum(c.isdigit() for c in word)
        elif word in _NUMBER_WORDS:
            digits += 2 if word == "double" else 1
        else:
            break
    return digits


def completeness(text: str) -> Completeness:
    """Does `text` (the turn's transcript so far) read as a finished turn?"""
    stripped = text.strip()
    if not stripped:
        return Completeness.NEUTRAL
    if stripped.endswith(("...", "…", ",", "-", "—", ";", ":")):
        return Completeness.UNFINISHED
    words = _words(stripped)
    if not words:
        return Completeness.NEUTRAL
    if words[-1] in _CONTINUES:
        return Completeness.UNFINISHED
    lowered = stripped.lower()
    digits = _trailing_digits(words)
    if digits:
        if any(cue in lowered for cue in _PHONE_CUES) and digits < _PHONE_DIGITS:
            return Completeness.UNFINISHED
        if any(cue in lowered for cue in _ADDRESS_CUES):
            return Completeness.UNFINISHED  # "I live at 22": a house number with no street after it
    return Completeness.FINISHED if stripped.endswith(("?", "!")) else Completeness.NEUTRAL


def _spoken(text: str) -> list[str]:
    """The words of a transcript, a transcriber's notes such as "(coughs)" left out."""
    return _words(_ANNOTATION.sub(" ", text))


def _has_cue(words: list[str]) -> bool:
    return any(w in _BARGE_IN_CUES for w in words)


def barge_in_cue(text: str) -> bool:
    """The words hold a barge-in cue."""
    return _has_cue(_spoken(text))


def _listener_only(words: list[str]) -> bool:
    """Short, and nothing but listener tokens and phrases ("mhm okay", "yeah makes sense", "oh I see")."""
    if len(words) > _BACKCHANNEL_MAX_WORDS:
        return False
    joined = f" {' '.join(words)} "
    for phrase in _BACKCHANNEL_PHRASES:
        joined = joined.replace(f" {phrase} ", " mm ")
    return len(tokens := joined.split()) <= 3 and all(w in _BACKCHANNEL for w in tokens)


def overlap_kind(text: str) -> OverlapKind:
    """What the caller's words over the agent's speech were."""
    words = _spoken(text)
    if _has_cue(words):
        return OverlapKind.REQUEST
    if words and _listener_only(words):
        return OverlapKind.BACKCHANNEL
    # nothing, or one stray word: what a transcriber makes of a cough or a door ("you", "them")
    return OverlapKind.REQUEST if len(words) >= 2 else OverlapKind.EMPTY
