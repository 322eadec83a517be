"""The worker's side of streaming-text streams: each step's text rows, and which rows may step at all.

Why: in the streaming-text layout (runtime/text_feed.py) frame k needs text token k+1 (or the text's end). When it
has not arrived the stream must not advance (it would speak without its text) and must not hold back the others.
It keeps its row and the step leaves that row unchanged (`CodeGenerator.set_live`, `CodecState.live`): no state is
copied anywhere, and it goes on with its next frame as soon as its text is there.

Contract (what `Scheduler` calls, on the worker thread, just before a step over rows 0..n-1):
- `prepare_step()` returns the live mask of the step (np.bool_ [n]; None when no row can step): whole-text rows
  always, streaming-text rows whose next row is known. It gives those their text row and frame cap in one batched
  write (`CodeGenerator.set_stream_rows`), projecting the tokens that arrived since the last step for all streams
  together (one projection batch). `waiting` is how many streams it held back; `text_waits` in the counters counts
  each time a stream that was stepping had to wait.
- `poll()`: whether any row could step now (else an idle worker sleeps until text, a request or a cancel arrives:
  `Scheduler.wake`); it also brings `waiting` up to date.
"""

from __future__ import annotations

import numpy as np
import torch

from tts_engine.runtime.codegen import CodeGenerator
from tts_engine.runtime.metrics import EngineCounters
from tts_engine.runtime.slots import SlotState, SlotTable
from tts_engine.runtime.text_track import TextTrack


class TextRows:
    def __init__(self, slots: SlotTable, codegen: CodeGenerator, counters: EngineCounters) -> None:
        self.slots = slots
        self.codegen = codegen
        self.counters = counters
        self.waiting = 0  # streams held back at the last step

    @staticmethod
    def start(state: SlotState, prompt_len: int, max_frames: int) -> None:
        """Give a newly admitted stream its text track (streaming-text streams only)."""
        req = state.channel.request
        if req.text_feed is not None:
            state.text = TextTrack(req.text_feed, prompt_len, max_frames if req.max_frames is not None else None)

    def poll(self) -> bool:
        waiting = [state.text.kind() is None for state in self.slots.running.values() if state.text is not None]
        self.waiting = sum(waiting)
        return len(waiting) < len(self.slots.running) or not all(waiting)

    def prepare_step(self) -> np.ndarray | None:
        slots = self.slots
        slots.compact()
        live = np.ones(len(slots.running), dtype=np.bool_)
        tracks: list[tuple[int, TextTrack, str]] = []
        for slot, state in slots.running.items():
            track = state.text
            if track is None:
                continue
            kind = track.kind()
            if kind is None:  # its next token has not arrived: this step leaves its row as it is
                live[slot] = False
                if not track.waiting:
                    track.waiting = True
                    self.counters.add("text_waits")
                continue
            track.waiting = False
            tracks.append((slot, track, kind))
        self.waiting = int(len(live) - live.sum())
        if not live.any():
            return None
        if tracks:
            self._write_rows(tracks)
        return live

    def _write_rows(self, tracks: list[tuple[int, TextTrack, str]]) -> None:
        missing = [(track, ids) for _, track, _ in tracks if (ids := track.missing_ids())]
        if missing:  # the tokens that arrived since the last step, every stream's in one projection batch
            projected = self.codegen.prompts.project_many([ids for _, ids in missing])
            for (track, _), new_rows in zip(missing, projected, strict=True):
                track.rows.extend(new_rows.unbind(0))
        rows = [track.row(self.codegen, kind) for _, track, kind in tracks]
        caps = [track.cap(self.codegen) for _, track, _ in tracks]
        self.codegen.set_stream_rows([slot for slot, _, _ in tracks], torch.stack(rows), caps)
        for _, track, _ in tracks:
            track.k += 1
