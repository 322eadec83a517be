"""A caller closes the tab mid-reply without Leave, and the next caller joins at once, on a one-call worker (issue 43).

One try, in real browsers (headless Chromium, their microphones a WAV that asks one question every ~14 s): the
first caller joins a new room; once the agent speaks, their page is closed (no Leave: the page leaves the room on
`pagehide`); the next caller's browser starts and joins another new room, listens `listen_s`, then leaves.
- `freed_ms`: from the close until the worker logged the closed call's end ("call ... closed in"): its slot free;
- `agent_ms`: from the next caller pressing Join until their page has an agent present: the target (2 s);
- `answered_ms`: from the Join until the worker's first answered turn in that room went out (its trace's first
  frame); `first_question_answered`: sooner than the WAV asks again, so the question said at Join was heard.
  The page does not use LiveKit's pre-connect audio: a question said before the agent joined is lost, and the
  agent's "go ahead" (the guard's `no_agent` line) asks for it again;
- `guard`: what the token server's agent guard said about the next caller's room.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import until_no_jobs
from lab.callbench.stack import LocalStack
from lab.faults.report import markdown, measured, p50, top, verdict
from lab.faults.tries import repeat

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
PRESENT_JS = "() => window.voiceCall.agent?.presence === 'present'"
TURNS_JS = "() => window.voiceCall.log.filter((r) => r.type === 'turn').length"
#: the one-call worker of the issue's case (the drill's stack env adds it)
STACK_ENV = {"AGENT_MAX_SESSIONS": "1"}
#: the caller's WAV asks again this long after its first question (lab/faults/__main__.py `question`: ~1.5 s of
#: speech, then 12 s of silence): an answer sooner than that answers the first one
QUESTION_LOOP_S = 13.0
ANSWERS = ("answered", "interrupted")  # agent/tracing.py Outcome: an answer went out (to its end, or cut)


def _ms(t0: float, t: float | None) -> float | None:
    return None if t is None else round((t - t0) * 1000.0)


def _answered_at(stack: LocalStack, room: str) -> float | None:
    """Unix time of the first answer the worker traced in `room` (its first frame out; one cut later by the caller's
    next question counts too), or None. A turn's record is written when the next one opens or the call ends: read
    it after the call."""
    times = [float(r["wall_t0"]) + float(r["points"]["first_frame_published"]) for r in stack.traces()
             if str(r.get("session_id", "")).startswith(f"{room}-") and r.get("outcome") in ANSWERS
             and "first_frame_published" in (r.get("points") or {})]  # fmt: skip
    return min(times, default=None)


def _closed_at(stack: LocalStack, room: str) -> float | None:
    """Unix time of the worker's "call <room>-... closed in" line: the call's slot is free from then on."""
    for line in stack.log("agent").read_text(errors="replace").splitlines():
        if f'"call {room}-' in line and " closed in " in line:
            stamp = json.loads(line).get("timestamp")
            return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    return None


def closed_try(stack: LocalStack, wav: Path, *, index: int, listen_s: float = 20.0) -> dict[str, Any]:
    first_room, next_room = (f"tab-{index}-{who}-{secrets.token_hex(3)}" for who in ("first", "next"))
    result: dict[str, Any] = {"try": index, "rooms": [first_room, next_room]}
    # Playwright's sync API runs one instance per thread: the next caller's browser starts once the first is closed
    with BrowserCall(stack.page_url, wav) as first:
        first.join(first_room)
        first.wait_for(SPEAKING_JS, 120)
        first.page.close()  # the tab, closed mid-reply: no Leave
        closed, closed_unix = time.monotonic(), time.time()
    with BrowserCall(stack.page_url, wav) as nxt:
        joined, joined_unix = time.monotonic(), time.time()  # Join pressed; the WAV asks its question at once
        nxt.join(next_room)
        agent = None
        while time.monotonic() - joined < listen_s:  # the first question's answer comes within it, or not at all
            if agent is None and nxt.page.evaluate(PRESENT_JS):
                agent = time.monotonic()
            time.sleep(0.05)
        result["problems"] = list(nxt.problems)[:5]
        nxt.leave()
    until_no_jobs(stack.ports["AGENT_HTTP_PORT"])  # the next caller's call ends: its records are written
    freed_unix, answered_unix = _closed_at(stack, first_room), _answered_at(stack, next_room)
    unix_ms = lambda t0, t: None if t is None else round((t - t0) * 1000.0)  # noqa: E731 - a one-line conversion
    result.update(freed_ms=unix_ms(closed_unix, freed_unix), joined_after_close_ms=_ms(closed, joined),
                  agent_ms=_ms(joined, agent), answered_ms=unix_ms(joined_unix, answered_unix))
    result["first_question_answered"] = result["answered_ms"] is not None and result["answered_ms"] < \
        QUESTION_LOOP_S * 1000.0  # fmt: skip
    result["guard"] = [line.split("agent_guard: ", 1)[-1][:200] for line in
                       stack.log("token").read_text(errors="replace").splitlines() if next_room in line][:4]
    return result


def passed(r: dict[str, Any], target_s: float) -> bool:
    return r["agent_ms"] is not None and r["agent_ms"] <= target_s * 1000.0 and r["first_question_answered"]


def describe(r: dict[str, Any]) -> str:
    return (f"worker free {r['freed_ms']} ms after the close; next caller joined at {r['joined_after_close_ms']} ms, "
            f"agent {r['agent_ms']} ms after the join, first answer {r['answered_ms']} ms after the join")


def run(stack: LocalStack, wav: Path, *, tries: int, target_s: float) -> dict[str, Any]:
    report = repeat("tab-closed", tries, lambda i: closed_try(stack, wav, index=i), lambda r: passed(r, target_s),
                    describe)  # fmt: skip
    return {**report, "target_ms": target_s * 1000.0, "summary": summary(report["results"])}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    agent, freed = measured(rows, "agent_ms"), measured(rows, "freed_ms")
    return {"agent_p50_ms": p50(agent), "agent_max_ms": top(agent), "freed_p50_ms": p50(freed),
            "freed_max_ms": top(freed), "first_answered": sum(r["first_question_answered"] for r in rows)}


def table(report: dict[str, Any]) -> str:
    s = report["summary"]
    return markdown(
        f"A caller closes the tab mid-reply, the next joins at once; one-call worker, both in Chromium. Target: the "
        f"next caller's agent within {report['target_ms'] / 1000:g} s of Join, their question answered. "
        f"{report['passed']}/{report['tries']} passed.",
        ["try", "worker free after the close (ms)", "next caller's Join after the close (ms)", "agent after Join (ms)",
         "first answer after Join (ms)", "first question answered", "ok"],
        ([r["try"], r["freed_ms"], r["joined_after_close_ms"], r["agent_ms"], r["answered_ms"],
          r["first_question_answered"], verdict(r)] for r in report["results"]),
        f"agent after Join: P50 {s['agent_p50_ms']} ms, max {s['agent_max_ms']} ms; worker free: P50 "
        f"{s['freed_p50_ms']} ms, max {s['freed_max_ms']} ms; first question answered "
        f"{s['first_answered']}/{report['tries']}")
