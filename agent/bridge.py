"""TextBridge: cut streaming LLM text into speakable segments for the TTS engine.

Contract: `push(text)` returns the segments that became ready; `flush()` returns the rest at end of
input. Concatenating all segments gives back the input's speakable text (whitespace normalised at
the cuts; segments with no letter or digit, e.g. a lone "...", are dropped since they make no sound).

Policy (DESIGN.md §5, and why):
- Starter segment first, to cut time-to-first-audio: the first clause if it comes early, else the
  first 2-6 CJK characters / 1-3 Latin words.
- Then flush at sentence punctuation (CJK and Latin) and at clause punctuation (CJK at once; Latin
  once the segment has `latin_clause_min` chars, so commas do not make choppy 1-word segments).
- With no punctuation: flush at `cjk_flush_chars` (12) CJK characters or `latin_flush_words` words;
  never more than `max_chars` (60).
- Never cut inside a number ("3.14", "1,000", "12:30"), a URL or a word: Latin punctuation only counts
  as a boundary when whitespace follows it (so a "." at the very end of the buffer waits for the next
  token), and length cuts land on whitespace or between CJK characters outside any ASCII run.
"""

from __future__ import annotations

from dataclasses import dataclass

_CJK_SENTENCE = set("。！？；…\n")
_CJK_CLAUSE = set("，、：")
_LATIN_SENTENCE = set(".!?;")
_LATIN_CLAUSE = set(",:")
_CLOSERS = set("\"')]}”’」』）】")
_ABBREVIATIONS = ("e.g.", "i.e.", "mr.", "mrs.", "ms.", "dr.", "vs.", "etc.", "st.", "no.")


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


def _speakable(text: str) -> bool:
    return any(ch.isalnum() or is_cjk(ch) for ch in text)


def _word_count(text: str) -> int:
    return len([w for w in text.split() if any(c.isalnum() for c in w) and not any(is_cjk(c) for c in w)])


def _cjk_count(text: str) -> int:
    return sum(1 for ch in text if is_cjk(ch))


@dataclass(frozen=True)
class BridgeOptions:
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
                raise ValueError(f"BridgeOptions.{name}={value} is out of range (allowed: {lo}..{hi})")


class TextBridge:
    def __init__(self, options: BridgeOptions | None = None) -> None:
        self.options = options or BridgeOptions()
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
        if _speakable(segment):
            out.append(segment)
            self._emitted += 1

    def _boundaries(self) -> list[tuple[int, str]]:
        """(cut index, kind) for each punctuation boundary in the buffer; kind is sentence|clause."""
        buf, found = self._buf, []
        n = len(buf)
        for i, ch in enumerate(buf):
            if ch in _CJK_SENTENCE or ch in _CJK_CLAUSE:
                j = i + 1
                while j < n and buf[j] in _CLOSERS:
                    j += 1
                found.append((j, "sentence" if ch in _CJK_SENTENCE else "clause"))
            elif ch in _LATIN_SENTENCE or ch in _LATIN_CLAUSE:
                j = i + 1
                while j < n and (buf[j] in _CLOSERS or buf[j] in _LATIN_SENTENCE):
                    j += 1
                if j >= n:
                    continue  # next char unknown yet: could be "3.14" or "example.com"
                nxt = buf[j]
                if not (nxt.isspace() or is_cjk(nxt)):
                    continue  # inside a number, URL, "e.g" or a word
                if ch == "." and buf[: i + 1].lower().endswith(_ABBREVIATIONS):
                    continue
                found.append((j, "sentence" if ch in _LATIN_SENTENCE else "clause"))
        return found

    def _next_cut(self) -> int | None:
        opts, buf = self.options, self._buf
        if not buf.strip():
            return None
        starter = self._emitted == 0
        for cut, kind in self._boundaries():
            head = buf[:cut]
            if not _speakable(head):
                continue
            cjk, words = _cjk_count(head), _word_count(head)
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
                    return i + 1
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
                return last_safe
        return None
