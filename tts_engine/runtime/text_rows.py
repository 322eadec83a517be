"""The worker's side of streaming-text streams: each step's text rows, and parking a stream whose text ran dry.

Why: in the streaming-text layout (runtime/text_feed.py) frame k needs text token k+1 (or the text's end). When it
has not arrived the stream must not step (it would speak without its text), must not spend GPU steps and must not
hold back the others, so it is **parked** in the slot table (runtime/slots.py): it keeps its slot but leaves the
stepped rows, and comes back once its text is there.

Contract (what `Scheduler` calls, all on the worker thread):
- `prepare_step()`, just before a step: parks every running streaming-text stream whose next row is not known, then
  gives the others their text row and frame cap in one batched write (`CodeGenerator.set_stream_rows`), projecting
  the text tokens that arrived since the last step for all streams together (one projection batch).
- `unpark(now, rows_free)`, between steps: brings parked streams back, most urgent first, at most `rows_free`. A
  parked stream whose text is there comes back at once before its first packet, once its text is complete, once
  its text is known for `RESUME_FRAMES` frames, or once its listener has less than the resume lead of audio left
  (`resume_lead_ms`: a few steps). Otherwise it waits: text that arrives about as fast as the frames are made would
  park and unpark a stream every step or two, and each round trip copies its slot's state twice (at 256 streams
  on an H100 that took the step past real time: tts_engine/bench/RESULTS.md, "Streaming text at many streams").
  The audio is the same either way; only when it is made changes, always ahead of the listener.
- `next_wake(now)`: seconds until a waiting parked stream is due (0: one is due now; None: none waits), so an
  otherwise idle worker sleeps exactly that long.
Whole-text streams have no track and are never parked. Ending a parked stream (cancel, shutdown) is the
scheduler's (it owns every stream's end).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tts_engine.audio_format import FRAME_MS
from tts_engine.runtime.codegen import CodeGenerator
from tts_engine.runtime.metrics import EngineCounters
from tts_engine.runtime.slots import SlotState, SlotTable
from tts_engine.runtime.text_feed import TextFeed

#: a parked stream whose text is known this many frames ahead comes back even with time to spare
RESUME_FRAMES = 8
#: a parked stream comes back when its listener has less than max(RESUME_LEAD_MIN_MS, RESUME_LEAD_STEPS x the
#: expected step) of audio left
RESUME_LEAD_MIN_MS = 3 * FRAME_MS
RESUME_LEAD_STEPS = 4


class TextTrack:
    """One streaming-text stream's progress: frames stepped, its text rows projected so far, its cap."""

    def __init__(self, feed: TextFeed, prompt_len: int, fixed_cap: int | None) -> None:
        self.feed = feed
        self.prompt_len = prompt_len
        self.fixed_cap = fixed_cap  # an explicit max_frames: the cap does not follow the text
        self.k = 0  # frames stepped so far (frame k adds trailing[k])
        self.rows: list[torch.Tensor] = []  # text rows of tokens 1.., projected on the worker thread

    def kind(self) -> str | None:
        return self.feed.trailing_kind(self.k)

    def ready(self) -> bool:
        return self.kind() is not None

    def frames_known(self) -> int:
        """Frames that can be stepped with the text known now (a large number once the text is closed)."""
        return 1 << 30 if self.feed.closed else max(0, self.feed.n_ids - 1 - self.k)

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


class TextRows:
    def __init__(self, slots: SlotTable, codegen: CodeGenerator, counters: EngineCounters,
                 step_ms: Callable[[int], float]) -> None:
        self.slots = slots
        self.codegen = codegen
        self.counters = counters
        self.step_ms = step_ms  # expected ms of the next step at n rows (runtime/costs.StepCosts.step_ms)

    @staticmethod
    def start(state: SlotState, prompt_len: int, max_frames: int) -> None:
        """Give a newly admitted stream its text track (streaming-text streams only)."""
        req = state.channel.request
        if req.text_feed is not None:
            state.text = TextTrack(req.text_feed, prompt_len, max_frames if req.max_frames is not None else None)

    # ---- before a step -------------------------------------------------------------------------------------------
    def prepare_step(self) -> None:
        slots = self.slots
        slots.compact()
        for slot in sorted(slots.running, reverse=True):  # highest first: a park moves the (visited) top row down
            track = slots.running[slot].text
            if track is not None and not track.ready():
                slots.park(slot)
                self.counters.add("text_waits")
        tracks = [(slot, state.text) for slot, state in sorted(slots.running.items()) if state.text is not None]
        if not tracks:
            return
        missing = [(track, ids) for _, track in tracks if (ids := track.missing_ids())]
        if missing:  # the tokens that arrived since the last step, every stream's in one projection batch
            for (track, _), rows in zip(missing, self.codegen.prompts.project_many([ids for _, ids in missing]),
                                        strict=True):
                track.rows.extend(rows.unbind(0))
        rows, caps = [], []
        for _, track in tracks:
            kind = track.kind()
            assert kind is not None  # parked above otherwise
            rows.append(track.row(self.codegen, kind))
            caps.append(track.cap(self.codegen))
            track.k += 1
        self.codegen.set_stream_rows([slot for slot, _ in tracks], torch.stack(rows), caps)

    # ---- between steps -------------------------------------------------------------------------------------------
    def resume_lead_s(self) -> float:
        return max(RESUME_LEAD_MIN_MS, RESUME_LEAD_STEPS * self.step_ms(self.slots.n_running)) / 1000.0

    @staticmethod
    def _resume(state: SlotState, lead_s: float) -> tuple[float, float] | None:
        """(when a parked stream should come back, its listener's deadline: -inf before its first packet), or None
        (its text is not there, or it was cancelled: the scheduler ends it)."""
        track = state.text
        if state.channel.cancel_requested or track is None or not track.ready():
            return None
        due = state.due()
        if due is None:
            return -math.inf, -math.inf
        if track.frames_known() >= RESUME_FRAMES:
            return -math.inf, due
        return due - lead_s, due

    def unpark(self, now: float, rows_free: int) -> None:
        if not self.slots.parked or rows_free <= 0:
            return
        lead = self.resume_lead_s()
        waiting = []
        for state in self.slots.parked.values():
            resume = self._resume(state, lead)
            if resume is not None and resume[0] <= now:
                waiting.append((resume[1], state.slot, state))
        waiting.sort(key=lambda w: w[:2])
        if not waiting:
            return
        self.slots.compact()
        for _, _, state in waiting[:rows_free]:  # the listener that runs dry first comes back first
            self.slots.unpark(state.slot)  # state.slot, not the slot listed: an unpark may move other parked streams

    def next_wake(self, now: float) -> float | None:
        if any(state.channel.cancel_requested for state in self.slots.parked.values()):
            return 0.0  # the scheduler ends it now
        lead = self.resume_lead_s()
        times = [resume[0] for state in self.slots.parked.values() if (resume := self._resume(state, lead))]
        return max(0.0, min(times) - now) if times else None
