"""The slot table (runtime/slots.py) over a fake row store: every move lands where the table says, running streams
stay rows 0..n-1, parked ones above them, and every slot can hold a stream (the scratch row swaps full tables)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.slots import SlotState, SlotTable


class Rows:
    """What the device rows hold: a stream name per row, moved only into free rows (as CodeGenerator.move checks)."""

    def __init__(self, n: int) -> None:
        self.held: list[str | None] = [None] * n
        self.moves = 0

    def move(self, src: int, dst: int) -> None:
        assert self.held[src] is not None and self.held[dst] is None, (src, dst, self.held)
        self.held[dst], self.held[src] = self.held[src], None
        self.moves += 1


def _state(name: str) -> SlotState:
    metrics = SimpleNamespace(slot=None, request_id=name)
    channel = SimpleNamespace(request=SimpleNamespace(metrics=metrics), cancel_requested=False)
    return SlotState(channel, Packetizer(1, 1), max_frames=10)  # type: ignore[arg-type]


def _table(slots: int) -> tuple[SlotTable, Rows]:
    rows = Rows(slots + 1)
    return SlotTable(slots, slots + 1, rows.move), rows


def _admit(table: SlotTable, rows: Rows, names: list[str]) -> None:
    for slot, name in zip(table.claim(len(names)), names, strict=True):
        assert rows.held[slot] is None
        rows.held[slot] = name
        table.occupy(slot, _state(name))


def _check(table: SlotTable, rows: Rows) -> None:
    """Every occupant sits where the table, its own `slot` and its metrics say, and the device row holds it."""
    for slot, state in table.all_states():
        name = state.channel.request.metrics.request_id
        assert rows.held[slot] == name and state.slot == slot and state.channel.request.metrics.slot == slot
    occupied = {slot for slot, _ in table.all_states()}
    assert all(held is None for i, held in enumerate(rows.held) if i not in occupied)  # scratch row included
    assert table.room() == table.max_slots - len(occupied)


def test_a_full_table_parks_and_unparks_through_the_scratch_row() -> None:
    table, rows = _table(4)
    _admit(table, rows, ["a", "b", "c", "d"])
    assert table.room() == 0  # every slot holds a stream: no spare is kept back
    assert table.park(1) == 3  # "b" leaves the stepped rows; the top row takes its place
    _check(table, rows)
    assert sorted(table.running) == [0, 1, 2] and rows.held[:4] == ["a", "d", "c", "b"]
    table.park(0)
    _check(table, rows)
    assert sorted(table.running) == [0, 1] and set(table.parked) == {2, 3}
    assert table.unpark(3) == 2  # another parked stream sat at row 2: the two swap
    _check(table, rows)
    assert rows.held[2] == "b" and sorted(table.running) == [0, 1, 2]


def test_claim_moves_parked_streams_out_of_the_new_rows() -> None:
    table, rows = _table(6)
    _admit(table, rows, ["a", "b", "c"])
    table.park(0)
    table.park(0)
    assert sorted(table.running) == [0] and sorted(table.parked) == [2, 3]  # each went to the lowest free slot
    _admit(table, rows, ["d", "e"])  # rows 1 and 2 are claimed: the parked streams move above
    _check(table, rows)
    assert sorted(table.running) == [0, 1, 2] and min(table.parked) >= 3


def test_random_operations_keep_the_table_true() -> None:
    rng = random.Random(5)
    table, rows = _table(8)
    names = iter(f"s{i}" for i in range(10_000))
    for _ in range(3_000):
        op = rng.random()
        if op < 0.3 and table.room():
            _admit(table, rows, [next(names) for _ in range(rng.randint(1, table.room()))])
        elif op < 0.5 and table.running:
            table.compact()
            table.park(rng.choice(sorted(table.running)))
        elif op < 0.7 and table.parked:
            table.compact()
            table.unpark(rng.choice(sorted(table.parked)))
        elif op < 0.85 and table.all_states():
            slot, _ = rng.choice(table.all_states())
            table.vacate(slot)
            rows.held[slot] = None
        table.compact()
        _check(table, rows)
        assert sorted(table.running) == list(range(len(table.running)))
        assert all(slot >= len(table.running) for slot in table.parked)


def test_the_table_needs_a_scratch_row() -> None:
    with pytest.raises(ValueError, match="scratch row"):
        SlotTable(4, 4, lambda src, dst: None)
