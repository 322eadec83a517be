"""One streaming-text stream's progress on the engine's worker: the slot table keeps it, text_rows.py steps it.

Contract: `TextTrack(feed, prompt_len, fixed_cap)` holds the frames stepped so far (`k`), the text rows projected so
far (`rows`, on the worker thread) and whether the stream is waiting for its text. `kind()` is what frame k's step
needs (runtime/text_feed.py `trailing_kind`: "text", "eos", "pad" or None to wait); `missing_ids()` the final tokens
whose rows are not projected yet; `cap(codegen)` the frame cap (fixed by an explicit max_frames, else following the
text pushed so far); `row(codegen, kind)` the text row frame k adds.
"""

from __future__ import annotations

import torch

from tts_engine.runtime.codegen import CodeGenerator
from tts_engine.runtime.text_feed import TextFeed


class TextTrack:
    """One streaming-text stream's progress: frames stepped, its text rows projected so far, its cap."""

    def __init__(self, feed: TextFeed, prompt_len: int, fixed_cap: int | None) -> None:
        self.feed = feed
        self.prompt_len = prompt_len
        self.fixed_cap = fixed_cap  # an explicit max_frames: the cap does not follow the text
        self.k = 0  # frames stepped so far (frame k adds trailing[k])
        self.rows: list[torch.Tensor] = []  # text rows of tokens 1.., projected on the worker thread
        self.waiting = False

    def kind(self) -> str | None:
        return self.feed.trailing_kind(self.k)

    def missing_ids(self) -> list[int]:
        """Final token ids whose text rows are not projected yet (tokens 1.. of the text)."""
        return self.feed.ids_from(len(self.rows) + 1) if len(self.rows) <= self.k else []

    def cap(self, codegen: CodeGenerator) -> int:
        if self.fixed_cap is not None:
            return self.fixed_cap
        return codegen.cap(self.feed.budget(codegen.cap_scale), self.prompt_len)

    def row(self, codegen: CodeGenerator, kind: str) -> torch.Tensor:
        if kind == "text":
            return self.rows[self.k]
        return codegen.prompts.tts_eos if kind == "eos" else codegen.tts_pad
