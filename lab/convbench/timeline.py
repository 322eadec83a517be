"""What happened in one scripted call: the record the scoring reads, written as JSON so a run can be scored again.

All times are Unix seconds on the caller's host (the worker's traces carry `wall_t0` on the same clock).
- `Play`: one clip as published (clips are played from their first to their last voiced sample): the capture
  time of both (the 10 ms frame's capture time plus the sample's place in it).
- `ItemRecord`: every script item, played or not (`reason` says why not), with its cue and anchor.
- `agent_t`/`agent_db`: every received agent audio frame, its arrival time and level; `states`: the agent's
  `lk.agent.state` changes; `transcripts`: `lk.transcription` streams (who, text, final, first chunk's arrival).
- `caller`: the caller's own health (publish pacing lateness, receive-loop lag): a late caller is not the worker.
- `traces`: the worker's trace records of this room (traces/README.md), attached after the call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class Play:
    item_id: str
    kind: str
    clip: int
    first_voiced: float
    last_voiced: float


@dataclass
class ItemRecord:
    item_id: str
    kind: str
    played: bool = False
    reason: str = ""  # why it was not played
    label: str = ""  # the words or the noise's kind
    pauses: list[dict[str, Any]] = field(default_factory=list)  # turns: [{"ms", "kind"}] before clips 1..n
    expect_words: list[str] = field(default_factory=list)
    anchor: float | None = None  # cued items: the agent reply's first audio the cue counts from
    cue: float | None = None  # cued items: when it was due
    waited_ms: float | None = None  # turns: how long the caller waited for the agent to be done
    agent_busy_at_start: bool = False  # turns: the agent was still thinking or talking when the turn began


@dataclass
class Timeline:
    script: str
    room: str
    speaker: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    items: list[ItemRecord] = field(default_factory=list)
    plays: list[Play] = field(default_factory=list)
    agent_t: list[float] = field(default_factory=list)
    agent_db: list[float] = field(default_factory=list)
    states: list[tuple[float, str]] = field(default_factory=list)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    caller: dict[str, Any] = field(default_factory=dict)
    rtc: list[dict[str, Any]] = field(default_factory=list)  # the agent track's inbound-rtp stats, sampled
    traces: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def plays_of(self, item_id: str) -> list[Play]:
        return sorted((p for p in self.plays if p.item_id == item_id), key=lambda p: p.clip)

    def agent_audio(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.agent_t, dtype=np.float64), np.asarray(self.agent_db, dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["agent_t"] = [round(t, 4) for t in self.agent_t]
        out["agent_db"] = [round(d, 1) if np.isfinite(d) else -200.0 for d in self.agent_db]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Timeline:
        obj = dict(obj)
        obj["items"] = [ItemRecord(**i) for i in obj.get("items", [])]
        obj["plays"] = [Play(**p) for p in obj.get("plays", [])]
        obj["states"] = [(float(t), str(s)) for t, s in obj.get("states", [])]
        return cls(**obj)
