"""The slot table: which stream sits in which cache row.

Contract (everything runs on the engine's worker thread):
- A slot is one row of every per-stream buffer (talker KV, code-generator counters, decoder state). A stream holds
  one from its admission to its end; `max_slots` streams fit at once.
- Streams occupy rows 0..n-1, the rows one frame step computes (`CodeGenerator.step(n)`). When streams end,
  `compact()` moves the highest ones into the holes (`CodeGenerator.move` + `CodecState.move_`: device copies, no
  host sync, through this table only, which keeps each occupant's `slot` and `metrics.slot` true).
- `claim(k)`: the rows n..n+k-1 for k admissions; `occupy(slot, state)` seats each new stream there. `vacate(slot)`
  removes one for good. `room()` is how many more streams fit.
A streaming-text stream waiting for its text keeps its row; the step leaves it unchanged (runtime/text_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.audio_format import SAMPLE_RATE
from tts_engine.runtime.admission import Playout
from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.stream import StreamChannel

if TYPE_CHECKING:
    from tts_engine.runtime.text_track import TextTrack


@dataclass
class SlotState:
    """What the worker keeps for the stream in a slot."""

    channel: StreamChannel
    packetizer: Packetizer
    max_frames: int
    slot: int = -1  # the row it sits in now (kept true by the slot table, like metrics.slot)
    frames: int = 0
    t_first: float | None = None  # the first packet's t_ready (its listener's playout starts then)
    emitted_samples: int = 0
    text: TextTrack | None = None  # a streaming-text stream's text track; None for whole text

    def playout(self) -> Playout:
        return Playout(self.t_first, self.emitted_samples / SAMPLE_RATE,
                       max(1, self.packetizer.next_packet_frames - self.packetizer.pending_frames))


class SlotTable:
    def __init__(self, max_slots: int, move: Callable[[int, int], None]) -> None:
        """`move(src, dst)` copies a stream's whole per-row state from row src to the free row dst."""
        self.max_slots = max_slots
        self._move = move
        self.running: dict[int, SlotState] = {}

    def room(self) -> int:
        return self.max_slots - len(self.running)

    def claim(self, k: int) -> list[int]:
        """Rows n..n+k-1 for k admissions (the running rows compacted first)."""
        self.compact()
        n = len(self.running)
        return list(range(n, n + k))

    def occupy(self, slot: int, state: SlotState) -> None:
        self.running[slot] = state
        self._seat(slot)

    def vacate(self, slot: int) -> SlotState:
        """Take the stream in `slot` out of the table; its row is free from now on."""
        return self.running.pop(slot)

    def compact(self) -> None:
        """Move the highest streams into the free rows below them, so rows 0..n-1 are the occupied ones."""
        while self.running:
            top = max(self.running)
            if top < len(self.running):
                return
            hole = min(set(range(top)) - self.running.keys())
            self._move(top, hole)
            self.running[hole] = self.running.pop(top)
            self._seat(hole)

    def _seat(self, slot: int) -> None:
        state = self.running[slot]
        state.slot = state.channel.request.metrics.slot = slot
