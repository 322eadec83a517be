"""Sentence and segment cutting for speech, CJK and Latin: the one copy the engine and the agent share.

Contract:
- `find_boundaries(buf, final)` lists the punctuation cuts of a buffer as (cut index, "sentence" | "clause").
  A cut never falls inside a number ("3.14", "1,000", "12:30"), a URL ("example.com/a.b") or a word: Latin
  punctuation counts only when whitespace or a CJK character follows it, and abbreviations ("e.g.", "Dr.") are
  not sentence ends. Closing quotes and brackets (”」）…) and repeated marks ("?!", "……") stay with the sentence
  before them. With `final=False` the buffer may still grow, so a mark whose follower has not arrived yet is
  undecided (the next piece could be "”", or "14" after "3."): it waits, it is not cut.
- `split_sentences(text)` cuts a complete text into sentences; `split_to_fit(text, count, limit)` packs
  sentences into as few pieces as a cost limit allows (e.g. text tokens that fit one stream; the first piece is
  the first sentence alone, so speech starts after a short prefill); a sentence over the limit is cut at clauses,
  then between words or CJK characters, and only a single unbroken run longer than the limit (a 5,000-character
  URL) is cut inside itself.
- `StreamSegmenter` cuts streaming text (LLM tokens, WebSocket pieces) into speakable segments: `push(text)`
  returns the segments that became ready, `flush()` the rest. Its policy (docs/engine.md, "Any length"): a short starter
  segment first (first clause, else 2-6 CJK characters / 1-3 Latin words), then cuts at sentence punctuation
  and clause punctuation (CJK at once, Latin once the segment has `latin_clause_min` characters), else a
  length cut at `cjk_flush_chars` CJK characters / `latin_flush_words` words, never past `max_chars` unless a
  single word is longer. Joining the segments gives back the speakable input (whitespace normalised at the cuts;
  segments with no letter or digit, e.g. a lone "...", are dropped since they make no sound). The result does not
  depend on how the text was cut into pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

CJK_SENTENCE = frozenset("。！？；…\n")
CJK_CLAUSE = frozenset("，、：")
LATIN_SENTENCE = frozenset(".!?;")
LATIN_CLAUSE = frozenset(",:")
CLOSERS = frozenset("\"')]}”’」』）】》〉")
ABBREVIATIONS = ("e.g.", "i.e.", "mr.", "mrs.", "ms.", "dr.", "vs.", "etc.", "st.", "no.")


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x3040 <= cp <= 0x30FF  # kana
        or 0xAC00 <= cp <= 0xD7AF  # hangul
        or 0xF900 <= cp <= 0xFAFF
        or 0x20000 <= cp <= 0x2FFFF
    )


def speakable(text: str) -> bool:
    """True when the text has something to say (a letter, digit or CJK character)."""
    return any(ch.isalnum() or is_cjk(ch) for ch in text)


def word_count(text: str) -> int:
    return len([w for w in text.split() if any(c.isalnum() for c in w) and not any(is_cjk(c) for c in w)])


def cjk_count(text: str) -> int:
    return sum(1 for ch in text if is_cjk(ch))


def _end_of_mark(buf: str, j: int) -> int:
    """Index past the closers and repeated sentence marks that follow a mark ending at j."""
    n = len(buf)
    while j < n and (buf[j] in CLOSERS or buf[j] in LATIN_SENTENCE or buf[j] in CJK_SENTENCE and buf[j] != "\n"):
        j += 1
    return j


def find_boundaries(buf: str, final: bool = True) -> list[tuple[int, str]]:
    """(cut index, kind) of every punctuation boundary; kind is "sentence" or "clause" (see the module doc)."""
    return list(iter_boundaries(buf, final))


def iter_boundaries(buf: str, final: bool = True) -> Iterator[tuple[int, str]]:
    """`find_boundaries`, one cut at a time: a caller that needs only the first cuts scans only that far."""
    n = len(buf)
    i = 0
    while i < n:
        ch = buf[i]
        cjk_mark = ch in CJK_SENTENCE or ch in CJK_CLAUSE
        if not (cjk_mark or ch in LATIN_SENTENCE or ch in LATIN_CLAUSE):
            i += 1
            continue
        j = _end_of_mark(buf, i + 1)
        marks = buf[i:j]
        kind = "sentence" if any(c in CJK_SENTENCE or c in LATIN_SENTENCE for c in marks) else "clause"
        if j >= n:
            if final:
                yield n, kind
            return  # not final: a closer, or a digit after "3.", may still come
        if not cjk_mark:  # Latin: only before whitespace or CJK, and not after an abbreviation
            nxt = buf[j]
            if not (nxt.isspace() or is_cjk(nxt)) or (ch == "." and buf[: i + 1].lower().endswith(ABBREVIATIONS)):
                i = j
                continue  # inside a number, URL, "e.g" or a word
        yield j, kind
        i = j


def safe_cuts(buf: str) -> list[int]:
    """Positions where a length cut cannot break a word, number or URL: at whitespace, after a CJK character, and
    between a CJK character and a following non-CJK run."""
    cuts = []
    for i, ch in enumerate(buf):
        if ch.isspace():
            cuts.append(i)
        elif is_cjk(ch):
            cuts.append(i + 1)
        elif i > 0 and is_cjk(buf[i - 1]):
            cuts.append(i)
    return sorted(set(c for c in cuts if 0 < c < len(buf)))


def split_sentences(text: str) -> list[str]:
    """The sentences of a complete text, stripped, closers attached, unspeakable pieces kept with a neighbour."""
    return list(_iter_sentences(text))


def _iter_sentences(text: str) -> Iterator[str]:
    return _iter_pieces(text, (cut for cut, kind in iter_boundaries(text, final=True) if kind == "sentence"))


def _pieces(text: str, cuts: list[int]) -> list[str]:
    return list(_iter_pieces(text, cuts))


def _iter_pieces(text: str, cuts: Iterable[int]) -> Iterator[str]:
    """The stripped pieces between cuts; a piece with nothing to say joins its neighbour. A piece is yielded once
    the next one is known, since only the last piece can still change."""
    last: str | None = None
    start = 0
    for cut in chain(cuts, [len(text)]):
        piece = text[start:cut].strip()
        start = cut
        if not piece:
            continue
        if last is not None and not speakable(piece):
            last = f"{last}{piece}"  # a lone "..." or "”" joins the sentence before it
        elif last is not None and not speakable(last):
            last = f"{last} {piece}"
        else:
            if last is not None:
                yield last
            last = piece
    if last is not None:
        yield last


def _join(a: str, b: str) -> str:
    if not a:
        return b
    glue = "" if is_cjk(a[-1]) or is_cjk(b[0]) or a[-1] in CJK_SENTENCE or a[-1] in CJK_CLAUSE else " "
    return f"{a}{glue}{b}"


def _longest_prefix(text: str, count: Callable[[str], int], limit: int) -> int:
    """Length of the longest prefix of `text` that counts <= limit (at least 1 character)."""
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _units(text: str, count: Callable[[str], int], limit: int, groups: list[int],
           level: int = 1) -> list[tuple[str, int, int]]:
    """(piece, cost, group) units of one sentence, each within `limit`: the text itself, else its clauses (level 1),
    words / CJK characters (2), and last raw characters (3). Units from one split share a group (`groups[0]` is the
    last number taken), and only units of one group are packed together later (a clause fragment never joins the
    next clause)."""
    cost = count(text)
    if cost <= limit:
        return [(text, cost, groups[0])]
    groups[0] += 1
    group = groups[0]
    if level == 1:
        parts = _pieces(text, [cut for cut, _ in find_boundaries(text, final=True)])
    elif level == 2:
        parts = _pieces(text, safe_cuts(text))
    else:
        parts, rest = [], text
        while rest:
            cut = _longest_prefix(rest, count, limit)
            parts.append(rest[:cut])
            rest = rest[cut:]
        return [(p, count(p), group) for p in parts]
    if len(parts) <= 1:
        return _units(text, count, limit, groups, level + 1)
    out: list[tuple[str, int, int]] = []
    for part in parts:
        part_cost = count(part)
        if part_cost <= limit:
            out.append((part, part_cost, group))
        else:
            out.extend(_units(part, count, limit, groups, level + 1))
    return out


# Text longer than this many characters per unit of `limit` is not counted whole before it is split: no natural
# text packs 8 characters into one token, and counting a 20,000-character text costs milliseconds before first audio.
MAX_CHARS_PER_COST = 8


def split_to_fit(text: str, count: Callable[[str], int], limit: int, join_cost: int = 1) -> list[str]:
    """Pieces of `text` whose `count` (e.g. text tokens) stays within `limit`, cut at sentence boundaries (see the
    module doc). A text that fits whole comes back as one piece. Each unit is counted once and a packed piece is
    costed as the sum of its units plus `join_cost` per join, so a margin in `limit` covers tokenizer merges
    across a join."""
    return list(iter_split_to_fit(text, count, limit, join_cost))


def iter_split_to_fit(text: str, count: Callable[[str], int], limit: int, join_cost: int = 1) -> Iterator[str]:
    """`split_to_fit`, lazily: each piece is cut when it is asked for, so the first piece of a long text is ready
    after reading its first sentences, not the whole text. A text over `MAX_CHARS_PER_COST * limit` characters is
    split at its sentences without being counted whole (it cannot fit: see the constant)."""
    text = text.strip()
    if not text:
        return
    if len(text) <= MAX_CHARS_PER_COST * limit:
        cost = count(text)
        if cost <= limit:
            yield text
            return
    groups = [1]  # the sentences are group 1; each deeper split takes the next number (see _units)
    sentences = _iter_sentences(text)
    first = next(sentences)
    rest = next(sentences, None)
    if rest is None:  # one sentence over the limit: clauses, words, then characters
        units: Iterable[tuple[str, int, int]] = _units(text, count, limit, groups)
    else:
        units = _sentence_units(chain([first, rest], sentences), count, limit, groups)
    current: tuple[str, int, int] | None = None
    for index, (unit, cost, group) in enumerate(units):
        if current and index != 1 and current[2] == group and current[1] + join_cost + cost <= limit:
            current = (_join(current[0], unit), current[1] + join_cost + cost, group)
        else:
            if current is not None:
                yield current[0]
            current = (unit, cost, group)
    if current is not None:
        yield current[0]


def _sentence_units(sentences: Iterable[str], count: Callable[[str], int], limit: int,
                    groups: list[int]) -> Iterator[tuple[str, int, int]]:
    for sentence in sentences:
        cost = count(sentence)
        if cost <= limit:
            yield sentence, cost, 1
        else:
            yield from _units(sentence, count, limit, groups)


@dataclass(frozen=True)
class SegmenterOptions:
    starter_cjk_min: int = 2
    starter_cjk_max: int = 6
    starter_words_max: int = 3
    cjk_flush_chars: int = 12
    latin_flush_words: int = 8
    latin_clause_min: int = 20
    max_chars: int = 60

    def __post_init__(self) -> None:
        checks = {
            "starter_cjk_min": (1, self.starter_cjk_max),
            "cjk_flush_chars": (2, 40),
            "starter_words_max": (1, 20),
            "latin_flush_words": (1, 40),
            "max_chars": (max(self.cjk_flush_chars, 20), 1000),
        }
        for name, (lo, hi) in checks.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"{type(self).__name__}.{name}={value} is out of range (allowed: {lo}..{hi})")


class StreamSegmenter:
    """Cuts streaming text into speakable segments (policy in the module doc)."""

    def __init__(self, options: SegmenterOptions | None = None) -> None:
        self.options = options or SegmenterOptions()
        self._buf = ""
        self._emitted = 0

    @property
    def segments_emitted(self) -> int:
        return self._emitted

    def push(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        while True:
            cut = self._next_cut()
            if cut is None:
                break
            self._take(cut, out)
        return out

    def flush(self) -> list[str]:
        out: list[str] = []
        if self._buf:
            self._take(len(self._buf), out)
        return out

    # -- internals ---------------------------------------------------------------------------
    def _take(self, cut: int, out: list[str]) -> None:
        segment, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip()
        if speakable(segment):
            out.append(segment)
            self._emitted += 1

    def _next_cut(self) -> int | None:
        opts, buf = self.options, self._buf
        if not buf.strip():
            return None
        starter = self._emitted == 0
        for cut, kind in find_boundaries(buf, final=False):
            head = buf[:cut]
            if not speakable(head):
                continue
            cjk, words = cjk_count(head), word_count(head)
            if starter:
                if cjk >= opts.starter_cjk_min or words >= 1:
                    return cut
                continue
            if kind == "sentence" or cjk > 0 or len(head.strip()) >= opts.latin_clause_min:
                return cut
        return self._length_cut(starter)

    def _length_cut(self, starter: bool) -> int | None:
        """A cut when no punctuation came soon enough, on a safe position; None to keep waiting."""
        opts, buf = self.options, self._buf
        cjk_limit = opts.starter_cjk_max if starter else opts.cjk_flush_chars
        word_limit = opts.starter_words_max if starter else opts.latin_flush_words
        cjk_seen = 0
        words_done = 0
        last_safe = None
        in_word = False
        for i, ch in enumerate(buf):
            if is_cjk(ch):
                cjk_seen += 1
                in_word = False
                last_safe = i + 1
                if cjk_seen >= cjk_limit:
                    return self._past_closers(i + 1)
            elif ch.isspace():
                if in_word:
                    words_done += 1
                    in_word = False
                    if words_done >= word_limit:
                        return i
                last_safe = i
            else:
                if not in_word and i > 0 and is_cjk(buf[i - 1]):
                    last_safe = i  # between a CJK char and an ASCII run
                in_word = True
            if i + 1 >= opts.max_chars and last_safe:
                return self._past_closers(last_safe)
        return None

    def _past_closers(self, cut: int) -> int | None:
        """Move a length cut past closers that follow it; None (wait) while the next character is unknown."""
        buf = self._buf
        while cut < len(buf) and buf[cut] in CLOSERS:
            cut += 1
        return cut if cut < len(buf) else None
