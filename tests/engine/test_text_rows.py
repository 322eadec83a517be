"""The worker's streaming-text rows (runtime/text_rows.py) with a fake code generator, feeds and clock: which streams
park, which come back when, and that a step's rows and caps go out in one batched write."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tts_engine.audio_format import SAMPLE_RATE
from tts_engine.runtime.metrics import EngineCounters
from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.slots import SlotState, SlotTable
from tts_engine.runtime.text_rows import RESUME_FRAMES, RESUME_LEAD_MIN_MS, TextRows, TextTrack

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


def _state(name: str, feed: Feed | None, t_first: float | None = None, emitted_s: float = 0.0) -> SlotState:
    channel = SimpleNamespace(request=SimpleNamespace(metrics=SimpleNamespace(slot=None, request_id=name)),
                              cancel_requested=False)
    state = SlotState(channel, Packetizer(1, 1), max_frames=100, t_first=t_first,  # type: ignore[arg-type]
                      emitted_samples=int(emitted_s * SAMPLE_RATE))
    state.text = TextTrack(feed, prompt_len=9, fixed_cap=None) if feed is not None else None  # type: ignore[arg-type]
    return state


def _rows(states: list[SlotState], step_ms: float = 10.0) -> tuple[TextRows, SlotTable, CodeGen, EngineCounters]:
    table = SlotTable(len(states) + 2, len(states) + 3, lambda src, dst: None)
    for slot, state in zip(table.claim(len(states)), states, strict=True):
        table.occupy(slot, state)
    codegen, counters = CodeGen(), EngineCounters()
    return TextRows(table, codegen, counters, lambda rows: step_ms), table, codegen, counters  # type: ignore[arg-type]


def _names(table: dict[int, SlotState]) -> set[str]:
    return {s.channel.request.metrics.request_id for s in table.values()}


def test_a_step_parks_the_dry_streams_and_writes_the_others_rows_at_once() -> None:
    feeds = {"a": Feed(3), "b": Feed(1), "c": Feed(2, closed=True), "d": Feed(4)}
    states = [_state(name, feed) for name, feed in feeds.items()] + [_state("whole", None)]
    rows, table, codegen, counters = _rows(states)
    rows.prepare_step()
    assert _names(table.parked) == {"b"} and counters.snapshot()["text_waits"] == 1
    assert len(codegen.projected) == 1  # every stream's new tokens in one projection batch
    assert sorted(len(piece) for piece in codegen.projected[0]) == [1, 2, 3]
    (slots, written, caps), = codegen.writes  # one write for the step, the whole-text stream not in it
    by_name = {table.running[s].channel.request.metrics.request_id: (row, cap)
               for s, row, cap in zip(slots, written, caps, strict=True)}
    assert set(by_name) == {"a", "c", "d"}
    assert by_name["a"][0][0] == 1 and by_name["d"][0][0] == 1  # token 1's row for frame 0
    assert by_name["a"][1] == 26 and by_name["d"][1] == 28  # caps follow each text's budget
    assert all(states[i].text.k == 1 for i in (0, 2, 3))  # type: ignore[union-attr]
    rows.prepare_step()  # frame 1: "a" needs token 2 (known), "c" its tts_eos, "d" token 2
    slots, written, _ = codegen.writes[-1]
    kinds = {table.running[s].channel.request.metrics.request_id: float(r[0])
             for s, r in zip(slots, written, strict=True)}
    assert kinds == {"a": 2.0, "c": -1.0, "d": 2.0}


def test_a_parked_stream_returns_at_once_before_its_first_packet() -> None:
    feed = Feed(1)
    rows, table, _, _ = _rows([_state("new", feed)])
    rows.prepare_step()
    assert _names(table.parked) == {"new"}
    assert rows.next_wake(0.0) is None  # nothing to wait for: its text is not there
    feed.n_ids = 2
    assert rows.next_wake(0.0) == 0.0
    rows.unpark(0.0, rows_free=4)
    assert _names(table.running) == {"new"}


def test_a_stream_ahead_of_its_listener_waits_for_more_text_or_its_deadline() -> None:
    feed = Feed(1)
    # first packet at t=0, 2 s of audio handed out: its listener runs dry at t=2 s
    rows, table, _, _ = _rows([_state("ahead", feed, t_first=0.0, emitted_s=2.0)], step_ms=10.0)
    rows.prepare_step()
    feed.n_ids = 3  # text for two more frames: not enough to come back with time to spare
    lead_s = max(RESUME_LEAD_MIN_MS, 4 * 10.0) / 1000.0
    rows.unpark(0.5, rows_free=4)
    assert _names(table.parked) == {"ahead"}
    assert abs(rows.next_wake(0.5) - (2.0 - lead_s - 0.5)) < 1e-9  # an idle worker sleeps until then
    rows.unpark(2.0 - lead_s, rows_free=4)  # its deadline minus the lead: back
    assert _names(table.running) == {"ahead"}


def test_enough_text_or_its_end_brings_a_stream_back_early_and_the_most_urgent_goes_first() -> None:
    many, closed, urgent = Feed(1), Feed(1), Feed(1)
    states = [_state("many", many, t_first=0.0, emitted_s=5.0), _state("closed", closed, t_first=0.0, emitted_s=5.0),
              _state("urgent", urgent, t_first=0.0, emitted_s=0.35)]
    rows, table, _, _ = _rows(states)
    rows.prepare_step()
    assert len(table.parked) == 3
    many.n_ids = 1 + RESUME_FRAMES + 1
    closed.closed = True
    urgent.n_ids = 2
    rows.unpark(0.2, rows_free=1)  # room for one: the one whose listener runs dry first
    assert _names(table.running) == {"urgent"}
    rows.unpark(0.2, rows_free=2)
    assert _names(table.running) == {"urgent", "many", "closed"}


def test_a_cancelled_parked_stream_wakes_the_worker() -> None:
    state: Any = _state("gone", Feed(1), t_first=0.0, emitted_s=5.0)
    rows, table, _, _ = _rows([state])
    rows.prepare_step()
    assert rows.next_wake(0.0) is None
    state.channel.cancel_requested = True
    assert rows.next_wake(0.0) == 0.0
