"""The slot table (runtime/slots.py) over a fake row store: every move lands where the table says, and the streams
always sit in rows 0..n-1 after a compaction, whatever ends when."""

from __future__ import annotations

import random
from types import SimpleNamespace

from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.slots import SlotState, SlotTable


class Rows:
    """What the device rows hold: a stream name per row, moved only into free rows (as CodeGenerator.move checks)."""

    def __init__(self, n: int) -> None:
        self.held: list[str | None] = [None] * n

    def move(self, src: int, dst: int) -> None:
        assert self.held[src] is not None and self.held[dst] is None, (src, dst, self.held)
        self.held[dst], self.held[src] = self.held[src], None


def _state(name: str) -> SlotState:
    metrics = SimpleNamespace(slot=None, request_id=name)
    channel = SimpleNamespace(request=SimpleNamespace(metrics=metrics), cancel_requested=False)
    return SlotState(channel, Packetizer(1, 1), max_frames=10)


def test_random_admissions_and_ends_keep_the_table_true() -> None:
    rng = random.Random(5)
    rows = Rows(8)
    table = SlotTable(8, rows.move)
    names = iter(f"s{i}" for i in range(10_000))
    for _ in range(3_000):
        if rng.random() < 0.5 and table.room():
            for slot in table.claim(rng.randint(1, table.room())):
                assert rows.held[slot] is None
                rows.held[slot] = name = next(names)
                table.occupy(slot, _state(name))
        elif table.running:
            slot = rng.choice(sorted(table.running))
            table.vacate(slot)
            rows.held[slot] = None  # released: its row is free
        table.compact()
        assert sorted(table.running) == list(range(len(table.running)))
        for slot, state in table.running.items():
            assert rows.held[slot] == state.channel.request.metrics.request_id
            assert state.slot == slot and state.channel.request.metrics.slot == slot
        assert table.room() == 8 - len(table.running)
