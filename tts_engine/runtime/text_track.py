"""TextTrack: one streaming-text stream's progress on the worker thread (what its slot keeps of its text).

- `k` frames stepped so far; `rows` the text rows of its tokens 1.. projected so far (runtime/text_rows.py projects
  them in batches); `kind()` what frame k's feedback adds ("text", "eos", "pad", or None: not known yet);
  `cap()` its frame cap, which follows the text pushed so far unless `max_frames` fixed it.
- It reads its text only through `TextSource` (runtime/stream.py), the seam between the caller's side
  (runtime/text_feed.py) and the worker's.
"""

from __future__ import annotations

import torch

from tts_engine.runtime.codegen import CodeGenerator
from tts_engine.runtime.stream import TextSource


class TextTrack:
    """One streaming-text stream's progress: frames stepped, its text rows projected so far, its cap."""

    def __init__(self, feed: TextSource, prompt_len: int, fixed_cap: int | None) -> None:
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
