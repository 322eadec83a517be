"""The worker's streaming-text rows (runtime/text_rows.py) with a fake code generator and feeds: which rows step, and
that a step's rows and caps go out in one batched write."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from tts_engine.runtime.metrics import EngineCounters
from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.slots import SlotState, SlotTable
from tts_engine.runtime.text_rows import TextRows
from tts_engine.runtime.text_track import TextTrack

H = 4


class Feed:
    """The TextFeed surface a track reads: token ids known so far, closed or not."""

    def __init__(self, n_ids: int, closed: bool = False) -> None:
        self.n_ids, self.closed = n_ids, closed

    def trailing_kind(self, k: int) -> str | None:
        if k + 1 < self.n_ids:
            return "text"
        if not self.closed:
            return None
        return "eos" if k + 1 == self.n_ids else "pad"

    def ids_from(self, start: int) -> list[int]:
        return list(range(start, self.n_ids))

    def budget(self, scale: float = 1.0) -> int:
        return 20 + 2 * self.n_ids


class CodeGen:
    cap_scale = 1.0

    def __init__(self) -> None:
        self.tts_pad = torch.zeros(H)
        self.prompts = SimpleNamespace(tts_eos=torch.full((H,), -1.0), project_many=self.project_many)
        self.projected: list[list[list[int]]] = []
        self.writes: list[tuple[list[int], torch.Tensor, list[int]]] = []

    def project_many(self, pieces: list[list[int]]) -> list[torch.Tensor]:
        self.projected.append(pieces)
        return [torch.tensor(piece, dtype=torch.float32)[:, None].expand(-1, H) for piece in pieces]

    def cap(self, frames: int, prompt_len: int) -> int:
        return frames

    def set_stream_rows(self, slots: list[int], rows: torch.Tensor, caps: list[int]) -> None:
        self.writes.append((slots, rows.clone(), caps))


def _rows(feeds: dict[str, Feed | None]) -> tuple[TextRows, dict[str, int], CodeGen, EngineCounters]:
    table = SlotTable(len(feeds), lambda src, dst: None)
    slots = {}
    for slot, (name, feed) in zip(table.claim(len(feeds)), feeds.items(), strict=True):
        channel = SimpleNamespace(request=SimpleNamespace(metrics=SimpleNamespace(slot=None, request_id=name)),
                                  cancel_requested=False)
        state = SlotState(channel, Packetizer(1, 1), max_frames=100)
        state.text = TextTrack(feed, prompt_len=9, fixed_cap=None) if feed is not None else None
        table.occupy(slot, state)
        slots[name] = slot
    codegen, counters = CodeGen(), EngineCounters()
    return TextRows(table, codegen, counters), slots, codegen, counters


def test_a_step_holds_the_dry_streams_and_writes_the_others_rows_at_once() -> None:
    feeds = {"a": Feed(3), "b": Feed(1), "c": Feed(2, closed=True), "d": Feed(4), "whole": None}
    rows, slot, codegen, counters = _rows(feeds)
    live = rows.prepare_step()
    assert live is not None and [bool(live[slot[n]]) for n in feeds] == [True, False, True, True, True]
    assert rows.waiting == 1 and counters.snapshot()["text_waits"] == 1
    assert len(codegen.projected) == 1  # every stream's new tokens in one projection batch
    assert sorted(len(piece) for piece in codegen.projected[0]) == [1, 2, 3]
    (slots, written, caps), = codegen.writes  # one write for the step; the whole-text and the held rows not in it
    by_slot = {s: (float(row[0]), cap) for s, row, cap in zip(slots, written, caps, strict=True)}
    assert by_slot == {slot["a"]: (1.0, 26), slot["c"]: (1.0, 24), slot["d"]: (1.0, 28)}  # token 1, caps per text
    live = rows.prepare_step()  # frame 1: "a" token 2, "c" its tts_eos, "d" token 2; "b" still waits (counted once)
    slots, written, _ = codegen.writes[-1]
    assert {s: float(r[0]) for s, r in zip(slots, written, strict=True)} == {
        slot["a"]: 2.0, slot["c"]: -1.0, slot["d"]: 2.0}
    assert counters.snapshot()["text_waits"] == 1
    feeds["b"].n_ids = 2
    assert rows.prepare_step()[slot["b"]]  # its text came: it steps (frame 0)
    assert codegen.writes[-1][0].count(slot["b"]) == 1


def test_no_row_can_step_until_text_comes() -> None:
    feed = Feed(1)
    rows, _, codegen, _ = _rows({"new": feed})
    assert not rows.poll() and rows.waiting == 1 and rows.prepare_step() is None and not codegen.writes
    feed.n_ids = 2
    assert rows.poll() and rows.waiting == 0 and rows.prepare_step() is not None
