"""Play a conversation script through a line (the SDK caller, or the page) and record what was played and when.

Contract: `await play_script(line, script, timeline)` plays the items in order and fills `timeline.items` and
`timeline.plays`. A line has `now()` (Unix s), `agent_state`, `activity` (activity.AgentActivity, fed with what
it hears) and `await play(pcm, marks)` (returns the capture time of each marked sample).
- A turn waits for the agent to be done (`wait_for_agent`): after a turn, for its reply to start (up to
  `agent_wait_ms`) and then for `REPLY_DONE_MS` of quiet with the agent not thinking or speaking; after anything
  else, for `SETTLE_MS` of that (a backchannel may get no reply). Then `gap_ms`, then its clips and pauses as one
  buffer, so every pause is exact to the sample.
- A cued item (backchannel, barge-in, noise) counts from the first agent audio heard after the last turn's true
  end (every cued item after one turn counts from the same reply). It is not played, with the reason recorded,
  when that reply does not start within `within_ms`, when its cue has passed by more than `CUE_LATE_MS`
  (an earlier item ran over), or when the agent is not audible at the cue nor `CUE_GRACE_MS` after it (its
  reply ended or was cut; a shorter silence is a dropout in its audio).
- At the end the conductor waits for the agent to be done again (bounded), so the last reply is on record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from lab.convbench.activity import AgentActivity
from lab.convbench.script import Cued, Gap, ItemKind, Script, Turn
from lab.convbench.timeline import ItemRecord, Play, Timeline

POLL_S = 0.01
REPLY_DONE_MS = 1000.0
SETTLE_MS = 4000.0
CUE_LATE_MS = 150.0
CUE_GRACE_MS = 1500.0  # the CPU voice's playout gap under load reached 0.84 s (scripts/test.sh, 2 cores, 2026-11-28)
FINAL_WAIT_MS = 30_000.0
BUSY_STATES = ("thinking", "speaking")


class Line(Protocol):
    activity: AgentActivity
    agent_state: str

    def now(self) -> float: ...

    async def play(self, pcm: np.ndarray, marks: Sequence[int] = ()) -> list[float]: ...


async def _until(line: Line, condition, deadline: float) -> bool:
    while not condition():
        if line.now() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def wait_agent_done(line: Line, after: float, expect_reply: bool, bound_ms: float) -> bool:
    """True once the agent is done with what the caller last said (see the module docstring); False at the bound."""
    deadline = line.now() + bound_ms / 1000.0
    if expect_reply and not await _until(line, lambda: line.activity.onset_after(after) is not None, deadline):
        return False
    settle = (REPLY_DONE_MS if expect_reply else SETTLE_MS) / 1000.0

    def done() -> bool:
        if line.activity.audible() or line.agent_state in BUSY_STATES:
            return False
        return line.now() - max(after, line.activity.quiet_since() or after) >= settle

    return await _until(line, done, deadline)


def turn_audio(turn: Turn) -> tuple[np.ndarray, list[int]]:
    """The turn's clips with their exact pauses as one buffer, and the first/last sample of each clip."""
    parts, marks, at = [], [], 0
    for clip in turn.clips:
        if clip.pause_before is not None:
            silence = np.zeros(int(round(clip.pause_before.ms * 48)), dtype=np.int16)
            parts.append(silence)
            at += len(silence)
        parts.append(clip.pcm)
        marks += [at, at + len(clip.pcm) - 1]
        at += len(clip.pcm)
    return np.concatenate(parts), marks


async def play_script(line: Line, script: Script, timeline: Timeline, final_wait_ms: float = FINAL_WAIT_MS) -> Timeline:
    last_user_end: float | None = None  # the last voiced sample of anything the caller said
    last_kind: ItemKind | None = None
    turn_end: float | None = None  # the last turn's true end
    anchor: float | None = None  # the agent's reply to that turn: its first audio at the caller
    timeline.started = line.now()
    for item in script.items:
        rec = ItemRecord(item_id=item.id, kind=item.kind.value)
        timeline.items.append(rec)
        if isinstance(item, Gap):
            await asyncio.sleep(item.ms / 1000.0)
            rec.played = True
            continue
        if isinstance(item, Turn):
            rec.label = " ".join(c.text for c in item.clips).strip()
            rec.pauses = [{"ms": c.pause_before.ms, "kind": c.pause_before.kind} for c in item.clips[1:]]
            rec.expect_words = list(item.expect_words)
            if item.wait_for_agent and last_user_end is not None:
                began = line.now()
                await wait_agent_done(line, last_user_end, last_kind is ItemKind.TURN, item.agent_wait_ms)
                rec.waited_ms = round((line.now() - began) * 1000.0, 1)
            await asyncio.sleep(item.gap_ms / 1000.0)
            rec.agent_busy_at_start = line.activity.audible() or line.agent_state in BUSY_STATES
            pcm, marks = turn_audio(item)
            stamps = await line.play(pcm, marks)
            for i in range(len(item.clips)):
                timeline.plays.append(Play(item.id, item.kind.value, i, stamps[2 * i], stamps[2 * i + 1]))
            rec.played = True
            last_user_end = turn_end = stamps[-1]
            last_kind, anchor = item.kind, None
            continue
        rec.label = item.label
        if await _cue(line, item, rec, turn_end, anchor):
            anchor = rec.anchor
            stamps = await line.play(item.clip.pcm, [0, len(item.clip.pcm) - 1])
            timeline.plays.append(Play(item.id, item.kind.value, 0, stamps[0], stamps[1]))
            rec.played = True
            last_user_end, last_kind = stamps[1], item.kind
        else:
            anchor = rec.anchor
    if last_user_end is not None:
        await wait_agent_done(line, last_user_end, last_kind is ItemKind.TURN, final_wait_ms)
    timeline.ended = line.now()
    return timeline


async def _cue(line: Line, item: Cued, rec: ItemRecord, turn_end: float | None, anchor: float | None) -> bool:
    """Wait for the item's cue; False (with `rec.reason`) when it is not to be played."""
    assert turn_end is not None  # the script's validation puts a turn before every cued item
    if anchor is None:
        deadline = turn_end + item.within_ms / 1000.0
        await _until(line, lambda: line.activity.onset_after(turn_end) is not None, deadline)
        anchor = line.activity.onset_after(turn_end)
    if anchor is None:
        rec.reason = f"the agent did not start a reply within {item.within_ms} ms of the turn's end"
        return False
    rec.anchor = anchor
    rec.cue = anchor + item.after_agent_audio_ms / 1000.0
    late_ms = (line.now() - rec.cue) * 1000.0
    if late_ms > CUE_LATE_MS:
        rec.reason = f"the cue had passed by {late_ms:.0f} ms when the item came up (an earlier item ran over)"
        return False
    if late_ms < 0:
        await asyncio.sleep(-late_ms / 1000.0)
    if not line.activity.audible():  # a dropout in the agent's audio lasts a moment: give it that moment
        await _until(line, line.activity.audible, line.now() + CUE_GRACE_MS / 1000.0)
    if not line.activity.audible():
        quiet = line.activity.quiet_since()
        since = f" for {(line.now() - quiet) * 1000.0:.0f} ms" if quiet is not None else ""
        rec.reason = f"the agent was not speaking at the cue (silent{since})"
        return False
    return True
