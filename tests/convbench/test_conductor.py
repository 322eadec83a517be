"""The conductor (lab/convbench/conductor.py) against a line with a scripted agent, no LiveKit: pauses are
exact to the sample, a cue counts from the reply's first audio, and an item whose cue cannot be met is recorded as
not played with its reason."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from lab.convbench.activity import AgentActivity
from lab.convbench.audio import RATE
from lab.convbench.conductor import play_script, turn_audio
from lab.convbench.script import FORMAT, load_script
from lab.convbench.timeline import Timeline
from tests.convbench.wavs import tone


class ScriptedAgent:
    """A line whose agent answers every turn: `thinking` after `think_s`, then `reply_s` of audio."""

    def __init__(self, think_s: float = 0.3, reply_s: float = 2.0) -> None:
        self.activity = AgentActivity()
        self.agent_state = "listening"
        self.think_s, self.reply_s = think_s, reply_s
        self.tasks: list[asyncio.Task] = []
        self.replies = 0

    def now(self) -> float:
        return time.time()

    async def play(self, pcm: np.ndarray, marks=()) -> list[float]:
        start = self.now()
        await asyncio.sleep(len(pcm) / RATE)
        if len(marks) > 2 and self.replies == 0:  # a turn (two clips): answer the first one
            self.tasks.append(asyncio.ensure_future(self._reply()))
        return [start + m / RATE for m in marks]

    async def _reply(self) -> None:
        self.replies += 1
        await asyncio.sleep(self.think_s)
        self.agent_state = "speaking"
        end = self.now() + self.reply_s
        while self.now() < end:
            self.activity.update(self.now(), -18.0)
            await asyncio.sleep(0.01)
        self.agent_state = "listening"
        for _ in range(20):
            self.activity.update(self.now(), -100.0)
            await asyncio.sleep(0.01)


def test_turn_audio_places_each_pause_exactly(tmp_path: Path) -> None:
    path = write_script(tmp_path, [])
    turn = load_script(path).items[0]
    pcm, marks = turn_audio(turn)
    a, b = len(turn.clips[0].pcm), len(turn.clips[1].pcm)
    assert marks == [0, a - 1, a + 300 * 48, a + 300 * 48 + b - 1] and len(pcm) == a + 300 * 48 + b
    assert not pcm[a : a + 300 * 48].any()


def write_script(tmp_path: Path, cued: list[dict]) -> Path:
    tone(tmp_path / "a.wav", 0.3)
    tone(tmp_path / "b.wav", 0.2)
    doc = {"format": FORMAT, "items": [
        {"id": "t1", "kind": "turn", "gap_ms": 0, "clips": [
            {"wav": "a.wav"}, {"wav": "b.wav", "pause_before": {"ms": 300, "kind": "mid_clause"}}]},
        *cued,
    ]}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(doc))
    return tmp_path / "s.json"


async def test_cues_count_from_the_reply_s_first_audio_and_unplayable_items_say_why(tmp_path: Path) -> None:
    cued = [
        {"id": "bc", "kind": "backchannel", "wav": "b.wav", "text": "yeah", "at": {"after_agent_audio_ms": 500}},
        {"id": "late", "kind": "noise", "noise": "cough", "wav": "b.wav", "at": {"after_agent_audio_ms": 450}},
        {"id": "after", "kind": "barge_in", "wav": "b.wav", "text": "stop", "at": {"after_agent_audio_ms": 3000}},
    ]
    line = ScriptedAgent(think_s=0.3, reply_s=2.0)
    tl = await play_script(line, load_script(write_script(tmp_path, cued)), Timeline(script="s", room="r"))
    first, second = tl.plays_of("t1")
    assert second.first_voiced - first.last_voiced == pytest.approx(0.3, abs=1 / RATE + 1e-6)
    t1, bc, late, after = tl.items
    assert t1.played and bc.played and bc.anchor == line.activity.onsets[0]
    assert bc.anchor - second.last_voiced == pytest.approx(0.3, abs=0.05)  # the agent's first audio after the end
    (play,) = tl.plays_of("bc")
    assert play.first_voiced - bc.anchor == pytest.approx(0.5, abs=0.03)  # on its cue
    assert not late.played and late.reason.startswith("the cue had passed by")  # the backchannel ran over its cue
    assert not after.played and after.reason.startswith("the agent was not speaking at the cue")
    assert tl.ended >= tl.started


async def test_a_reply_that_never_comes_leaves_the_item_unplayed(tmp_path: Path) -> None:
    cued = [{"id": "bc", "kind": "backchannel", "wav": "b.wav", "text": "yeah", "at": {"after_agent_audio_ms": 0},
             "within_ms": 1000}]  # fmt: skip
    line = ScriptedAgent()
    line.replies = 1  # this agent never answers
    script = load_script(write_script(tmp_path, cued))
    tl = await play_script(line, script, Timeline(script="s", room="r"), final_wait_ms=500)
    assert tl.items[1].reason == "the agent did not start a reply within 1000 ms of the turn's end"
