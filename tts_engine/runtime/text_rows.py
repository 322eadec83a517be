"""The worker's side of streaming-text streams: their text row per step, and parking a stream whose text ran dry.

Why: in the streaming-text layout (runtime/text_feed.py) frame k needs text token k+1 (or the text's end). When it
has not arrived, the stream must not step (a step would speak without its text), must not spend GPU steps, and must
not hold back the other streams. The scheduler steps rows 0..n-1 of its running streams in one batch, so a waiting
stream is **parked**: it keeps its slot (talker KV, decoder state, counters) but leaves the stepped range, and comes
back when its next text row is known.

Contract (what `Scheduler` calls, all on the worker thread):
- Slots: running streams occupy 0..n-1, parked ones lie at n or above. `claim(k)` returns the k slots new streams
  are admitted into (n..n+k-1), first moving parked streams out of them; `slot_room()` is how many more streams the
  slots hold, keeping one slot spare while any streaming-text stream exists (parking and unparking move a stream
  through a free slot). Moves are `CodeGenerator.move` + `CodecState.move_` (device copies only).
- `admitted(slot, channel, prompt)` starts a stream's `TextTrack`; `step_ready()` (just before each step) gives
  every running streaming-text row its text row for this step (codegen.set_text) and parks those whose row is not
  known; `unpark_ready()` (between steps) brings back parked streams whose text arrived; `any_ready()` tells the
  worker whether a parked stream can go on (else, with nothing else to do, it sleeps until `Scheduler.wake()`).
- `drop_cancelled()` ends parked streams whose consumer left; `shutdown(error)` ends all parked streams.
Whole-text streams have no track and are never parked.
"""

from __future__ import annotations

from typing import Any

import torch


class TextTrack:
    """One streaming-text stream's progress: frames stepped, its text rows projected so far, its cap."""

    def __init__(self, feed: Any, prompt_len: int, fixed_cap: bool = False) -> None:
        self.feed = feed
        self.prompt_len = prompt_len
        self.fixed_cap = fixed_cap  # an explicit max_frames: the cap does not follow the text
        self.k = 0  # frames stepped so far (frame k adds trailing[k])
        self.rows: list[torch.Tensor] = []  # text rows of tokens 1.., projected on the worker thread
        self._cap_tokens = 0
        self._cap_closed = False

    def ready(self) -> bool:
        return self.feed.trailing_kind(self.k) is not None

    def set_row(self, codegen: Any, slot: int) -> bool:
        """Give this step's text row to the slot; False (nothing set) when it is not known yet."""
        kind = self.feed.trailing_kind(self.k)
        if kind is None:
            return False
        n_ids, closed = self.feed.n_ids, self.feed.closed
        # the runaway cap grows with the text (unless an explicit max_frames fixed it)
        if not self.fixed_cap and (n_ids, closed) != (self._cap_tokens, self._cap_closed):
            codegen.set_cap(slot, n_ids, self.prompt_len)
            self._cap_tokens, self._cap_closed = n_ids, closed
        if kind == "text":
            if len(self.rows) <= self.k:
                self.rows.extend(codegen.prompts.project(self.feed.ids_from(len(self.rows) + 1)).unbind(0))
            codegen.set_text(slot, self.rows[self.k])
        else:
            codegen.set_text(slot, codegen.prompts.tts_eos if kind == "eos" else codegen.tts_pad)
        self.k += 1
        return True


class TextRows:
    def __init__(self, scheduler: Any) -> None:
        self.s = scheduler
        self.parked: dict[int, Any] = {}  # slot -> scheduler._Slot
        self.tracks = 0  # streaming-text streams running or parked

    # ---- slots ------------------------------------------------------------------------------------
    def _free(self) -> list[int]:
        used = self.s._slots.keys() | self.parked.keys()  # noqa: SLF001 - the scheduler's own helper
        return [slot for slot in range(self.s.max_slots) if slot not in used]

    def slot_room(self) -> int:
        spare = 1 if self.tracks else 0
        return self.s.max_slots - len(self.s._slots) - len(self.parked) - spare  # noqa: SLF001

    def _move(self, src: int, dst: int) -> None:
        self.s.codegen.move(src, dst)
        self.s.stepper.state.move_(src, dst)

    def _contiguous(self) -> None:
        """Running streams back to rows 0..n-1 (streams that ended since the last step left holes)."""
        self.s._compact()  # noqa: SLF001

    def claim(self, k: int) -> list[int]:
        """Slots n..n+k-1 for k admissions (free), parked streams in them moved to free slots above."""
        self._contiguous()
        n = len(self.s._slots)  # noqa: SLF001
        targets = list(range(n, n + k))
        spare = [slot for slot in self._free() if slot >= n + k]
        for slot in targets:
            if slot in self.parked:
                dst = spare.pop(0)
                self._move(slot, dst)
                self.parked[dst] = self.parked.pop(slot)
                self.parked[dst].channel.request.metrics.slot = dst
        return targets

    def admitted(self, slot: int, channel: Any, prompt: Any) -> None:
        req = channel.request
        if getattr(req, "text_feed", None) is not None:
            req.text_track = TextTrack(req.text_feed, int(prompt.embeds.shape[0]), req.max_frames is not None)
            self.tracks += 1

    def ended(self, channel: Any) -> None:
        if getattr(channel.request, "text_track", None) is not None:
            channel.request.text_track = None
            self.tracks -= 1

    # ---- per step ---------------------------------------------------------------------------------
    def step_ready(self) -> None:
        """Before a step: text rows for running streaming-text rows; park the ones whose text has not come."""
        self._contiguous()
        slots = self.s._slots  # noqa: SLF001
        for slot in sorted(slots, reverse=True):
            track = getattr(slots[slot].channel.request, "text_track", None)
            if track is not None and not track.set_row(self.s.codegen, slot):
                self._park(slot)

    def _park(self, slot: int) -> None:
        slots = self.s._slots  # noqa: SLF001
        top = len(slots) - 1
        state = slots.pop(slot)
        if slot != top:  # keep the running rows contiguous: the parked stream goes above them
            dst = next(free for free in self._free() if free != slot)  # > top: rows 0..top all ran
            self._move(slot, dst)
            self._move(top, slot)
            slots[slot] = slots.pop(top)
            slots[slot].channel.request.metrics.slot = slot
            slot = dst
        state.channel.request.metrics.slot = slot
        self.parked[slot] = state
        self.s.counters.add("text_waits")

    def any_ready(self) -> bool:
        return any(state.channel.request.text_track.ready() or state.channel.cancel_requested
                   for state in self.parked.values())

    def unpark_ready(self) -> None:
        if not self.parked:
            return
        self._contiguous()
        slots = self.s._slots  # noqa: SLF001
        while len(slots) < self.s.capacity:  # rows full: a ready stream waits like an admission would
            ready = [slot for slot, state in sorted(self.parked.items())
                     if not state.channel.cancel_requested and state.channel.request.text_track.ready()]
            if not ready:
                return
            slot, n = ready[0], len(slots)
            if slot != n:
                if n in self.parked:  # another parked stream sits at n: move it to a free slot
                    dst = self._free()[0]  # the stream coming back still counts as parked: never its own slot
                    self._move(n, dst)
                    self.parked[dst] = self.parked.pop(n)
                    self.parked[dst].channel.request.metrics.slot = dst
                self._move(slot, n)
            state = self.parked.pop(slot)
            state.channel.request.metrics.slot = n
            slots[n] = state

    def drop_cancelled(self) -> None:
        for slot, state in list(self.parked.items()):
            if state.channel.cancel_requested:
                del self.parked[slot]
                self.s._safe_release(slot)  # noqa: SLF001
                self.s._complete(state.channel, "cancelled", None)  # noqa: SLF001

    def shutdown(self, error: BaseException) -> None:
        for slot, state in list(self.parked.items()):
            del self.parked[slot]
            self.s._safe_release(slot)  # noqa: SLF001
            self.s._complete(state.channel, "error", error)  # noqa: SLF001
