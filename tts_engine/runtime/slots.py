"""The slot table: which stream sits in which cache row, stepped or parked.

Contract (everything runs on the engine's worker thread):
- A slot is one row of every per-stream buffer (talker KV, code-generator counters, decoder state). A stream holds
  one from its admission to its end; `max_slots` streams fit at once.
- Running streams occupy rows 0..n-1, the rows one frame step computes (`CodeGenerator.step(n)`). Parked streams
  (streaming text waiting for its next token) keep their slot at n or above, so they are not stepped and hold no
  one else back. The other slots are free.
- Moving a stream to another row (`CodeGenerator.move` + `CodecState.move_`: device copies, no host sync) goes
  through this table only, which keeps each occupant's `metrics.slot` true. One extra row past `max_slots` (the
  scratch row) lets two occupied rows swap when no slot is free, so every slot can hold a stream.
- `claim(k)`: the rows n..n+k-1 for k admissions (parked streams in them are moved out first); `occupy(slot,
  state)` then seats each new stream. `compact()` fills the holes that ended streams left below the highest running
  row. `park(slot)` takes a running stream out of the stepped rows; `unpark(slot)` brings a parked one back as row
  n. `vacate(slot)` removes a stream (running or parked) for good. `room()` is how many more streams fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tts_engine.audio_format import SAMPLE_RATE
from tts_engine.runtime.admission import Playout
from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.stream import StreamChannel

if TYPE_CHECKING:
    from tts_engine.runtime.text_rows import TextTrack


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

    def due(self) -> float | None:
        """perf_counter time at which this stream's listener runs out of audio (None before its first packet)."""
        return None if self.t_first is None else self.t_first + self.emitted_samples / SAMPLE_RATE


class SlotTable:
    def __init__(self, max_slots: int, rows: int, move: Callable[[int, int], None]) -> None:
        """`rows` physical rows (at least max_slots + 1: the last one is the scratch row); `move(src, dst)` copies a
        stream's whole per-row state from row src to the free row dst."""
        if rows <= max_slots:
            raise ValueError(f"the slot table needs a scratch row: {rows} rows for {max_slots} slots")
        self.max_slots = max_slots
        self.scratch = max_slots
        self._move_rows = move
        self.running: dict[int, SlotState] = {}
        self.parked: dict[int, SlotState] = {}
        self.moves = 0

    # ---- reading -------------------------------------------------------------------------------------------------
    @property
    def n_running(self) -> int:
        return len(self.running)

    def room(self) -> int:
        return self.max_slots - len(self.running) - len(self.parked)

    def free(self) -> list[int]:
        return [s for s in range(self.max_slots) if s not in self.running and s not in self.parked]

    def all_states(self) -> list[tuple[int, SlotState]]:
        return [*self.running.items(), *self.parked.items()]

    # ---- seating and leaving -------------------------------------------------------------------------------------
    def claim(self, k: int) -> list[int]:
        """Rows n..n+k-1 for k admissions, emptied of parked streams (moved to free slots above)."""
        self.compact()
        n = len(self.running)
        targets = list(range(n, n + k))
        spare = [slot for slot in self.free() if slot >= n + k]
        for slot in targets:
            if slot in self.parked:
                self._relocate(self.parked, slot, spare.pop(0))
        return targets

    def occupy(self, slot: int, state: SlotState) -> None:
        self.running[slot] = state
        self._seat(self.running, slot)

    def vacate(self, slot: int) -> SlotState:
        """Take the stream in `slot` (running or parked) out of the table; its row is free from now on."""
        return self.running.pop(slot) if slot in self.running else self.parked.pop(slot)

    def compact(self) -> None:
        """Move the highest running streams into the free rows below them, so rows 0..n-1 are the running ones."""
        while self.running:
            top = max(self.running)
            if top < len(self.running):
                return
            # parked streams all lie above the running rows (claim, park and unpark keep it so): the hole is free
            self._relocate(self.running, top, min(set(range(top)) - self.running.keys()))

    # ---- parking -------------------------------------------------------------------------------------------------
    def park(self, slot: int) -> int:
        """Take a running stream out of the stepped rows (the highest running one takes its row). Rows must be
        compact. Returns the slot it is parked in."""
        top = len(self.running) - 1
        if slot != top:
            free = self.free()  # all above the running rows, which are compact
            if free:  # two moves: the stream to a free slot, the top row into its place
                self._relocate(self.running, slot, free[0])
                self.parked[free[0]] = self.running.pop(free[0])
                self._relocate(self.running, top, slot)
                return free[0]
            self._swap(slot, top)  # no free slot: swap through the scratch row
            self.running[slot], self.running[top] = self.running[top], self.running[slot]
            self._seat(self.running, slot)
            slot = top
        self.parked[slot] = self.running.pop(slot)
        self._seat(self.parked, slot)
        return slot

    def unpark(self, slot: int) -> int:
        """Bring a parked stream back as row n (rows must be compact). Returns n."""
        n = len(self.running)
        if slot != n:
            if n in self.parked:  # another parked stream sits at n
                self._swap(slot, n)
                self.parked[slot], self.parked[n] = self.parked[n], self.parked[slot]
                self._seat(self.parked, slot)
            else:
                self._relocate(self.parked, slot, n)
        self.running[n] = self.parked.pop(n)
        self._seat(self.running, n)
        return n

    # ---- row copies ----------------------------------------------------------------------------------------------
    def _relocate(self, table: dict[int, SlotState], src: int, dst: int) -> None:
        self._move(src, dst)
        table[dst] = table.pop(src)
        self._seat(table, dst)

    def _swap(self, a: int, b: int) -> None:
        self._move(a, self.scratch)
        self._move(b, a)
        self._move(self.scratch, b)

    def _move(self, src: int, dst: int) -> None:
        self._move_rows(src, dst)
        self.moves += 1

    @staticmethod
    def _seat(table: dict[int, SlotState], slot: int) -> None:
        state = table[slot]
        state.slot = state.channel.request.metrics.slot = slot
