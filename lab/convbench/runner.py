"""Run conversation scripts through the local stack with the SDK caller: one room per script, one script at a time.

Contract: `await run_scripts(stack, scripts, thresholds, progress)` warms the stack up (one unscored exchange: the
first STT and TTS of a fresh worker are slow), then plays each script in its own room and returns one `Timeline`
per script with the worker's traces of that room attached. A script that fails (the agent never joins, a caller
error) is recorded with its error and the run goes on.

One room per script, not one per run: every script starts with a fresh agent session (no chat history carried
from another speaker's conversation, the prompt stays short), a script that breaks a call cannot spoil the next
one, and every room is dispatched its own job as a real call is. The cost is a join per script (about 2 s).
`STACK_ENV` keeps each reply some seconds long (token cap, no continuation, no one-word answers): long enough for
the cues (up to 3 s into a reply) and the stop/resume windows after them, short enough that a corpus run takes
half an hour, not an hour.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from lab.callbench.speech import speak
from lab.callbench.stack import LocalStack, room_traces
from lab.convbench.activity import Thresholds
from lab.convbench.caller import ScriptedCaller
from lab.convbench.conductor import play_script, wait_agent_done
from lab.convbench.script import Script
from lab.convbench.timeline import Timeline

STACK_ENV = {
    "LLM_MAX_TOKENS": "12",  # SmolLM2 answers at length: 12 tokens are about 8 s of the random-weight voice
    "ENABLE_CONTINUATION": "0",
    "AGENT_MAX_SESSIONS": "2",  # a script's call still winding down must not hold the next one back (one at a time)
    # never a one-word answer (a reply shorter than its cue leaves the cued item unplayed); the LLM's words do
    # not change how the agent takes turns
    "AGENT_INSTRUCTIONS": "You are a friendly voice assistant. Answer every message in two or three full spoken "
                          "sentences, without markdown, lists or emoji.",
}
JOIN_TIMEOUT_S = 90.0
TRACE_SETTLE_S = 1.5  # a turn's trace is written when its reply ends or is cut: read them a moment after leaving
WARMUP_TEXT = "Hello, can you hear me?"


def read_traces(folder: Path) -> list[dict]:
    """Every trace record under `folder` (a stack's traces/, after the run)."""
    records = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


async def warm_up(page_url: str, thresholds: Thresholds, tag: str) -> None:
    caller = await ScriptedCaller.join(page_url, f"cb-{tag}-warmup", thresholds=thresholds)
    try:
        await caller.ready(JOIN_TIMEOUT_S)
        pcm = speak(WARMUP_TEXT)
        end = (await caller.play(pcm, [len(pcm) - 1]))[0]
        await wait_agent_done(caller, end, expect_reply=True, bound_ms=30_000)
    finally:
        await caller.aclose()


async def call_script(page_url: str, script: Script, room: str, thresholds: Thresholds) -> Timeline:
    tl = Timeline(script=script.name, room=room, speaker=dict(script.speaker))
    caller = await ScriptedCaller.join(page_url, room, thresholds=thresholds)
    try:
        await caller.ready(JOIN_TIMEOUT_S)
        await play_script(caller, script, tl)
    except Exception as exc:  # noqa: BLE001 -- one broken call is recorded, the run goes on
        tl.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        caller.record_into(tl)
        await caller.aclose()
    return tl


async def run_scripts(
    stack: LocalStack, scripts: list[Script], thresholds: Thresholds, progress: Callable[[str], None] = print
) -> list[Timeline]:
    tag = secrets.token_hex(3)
    began = time.monotonic()
    await warm_up(stack.page_url, thresholds, tag)
    progress(f"[convbench] warmed up in {time.monotonic() - began:.0f} s")
    timelines = []
    for i, script in enumerate(scripts, start=1):
        t = time.monotonic()
        room = f"cb-{tag}-{i:02d}-{script.name}"[:64]
        tl = await call_script(stack.page_url, script, room, thresholds)
        await asyncio.sleep(TRACE_SETTLE_S)
        tl.traces = room_traces(stack, room)
        timelines.append(tl)
        played = sum(r.played for r in tl.items)
        errors = f", errors: {tl.errors}" if tl.errors else ""
        progress(f"[convbench] {i}/{len(scripts)} {script.name}: {played}/{len(tl.items)} items played, "
                 f"{len(tl.traces)} traced turns, {time.monotonic() - t:.0f} s{errors}")  # fmt: skip
    return timelines
