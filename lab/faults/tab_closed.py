"""A caller closes the tab mid-reply without Leave, and the next caller joins at once, on a one-call worker (issue 43).

One try, in real browsers (headless Chromium, their microphones a WAV that asks one question every ~14 s): the
first caller joins a new room; once the agent speaks, their page is closed (no Leave: the page leaves the room on
`pagehide`); the next caller's page, already loaded, joins another new room right after. Measured on one monotonic
clock:
- `freed_ms`: from the close until the worker runs no job (its `GET /worker`): the closed call has ended;
- `agent_ms`: from the next caller pressing Join until their page has an agent present: the target (2 s);
- `answered_ms`: from that agent's arrival until the next caller's page measured an answered turn (a row in its
  latency table), or None within `answer_s`;
- `guard`: what the token server's agent guard said about the next caller's room (its dispatch, "full" when a
  dispatch was not taken).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import worker_jobs
from lab.callbench.stack import LocalStack

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
PRESENT_JS = "() => window.voiceCall.agent?.presence === 'present'"
TURNS_JS = "() => window.voiceCall.log.filter((r) => r.type === 'turn').length"
#: the one-call worker of the issue's case (the drill's stack env adds it)
STACK_ENV = {"AGENT_MAX_SESSIONS": "1"}


def _ms(t0: float, t: float | None) -> float | None:
    return None if t is None else round((t - t0) * 1000.0)


def closed_try(stack: LocalStack, wav: Path, *, index: int, answer_s: float = 60.0) -> dict[str, Any]:
    port = stack.ports["AGENT_HTTP_PORT"]
    first_room, next_room = (f"tab-{index}-{who}-{secrets.token_hex(3)}" for who in ("first", "next"))
    result: dict[str, Any] = {"try": index, "rooms": [first_room, next_room]}
    # Playwright's sync API runs one instance per thread: the next caller's browser starts once the first is closed
    with BrowserCall(stack.page_url, wav) as first:
        first.join(first_room)
        first.wait_for(SPEAKING_JS, 120)
        first.page.close()  # the tab, closed mid-reply: no Leave
        closed = time.monotonic()
    with BrowserCall(stack.page_url, wav) as nxt:
        result["next_loaded_ms"] = _ms(closed, time.monotonic())  # a browser start on this box; the join follows
        joined = time.monotonic()  # Join pressed
        nxt.join(next_room)
        freed = agent = answered = None
        deadline = joined + answer_s
        while time.monotonic() < deadline and (agent is None or answered is None or freed is None):
            now = time.monotonic()
            if freed is None and worker_jobs(port) == 0:
                freed = now
            if agent is None and nxt.page.evaluate(PRESENT_JS):
                agent = now
            if agent is not None and answered is None and nxt.page.evaluate(TURNS_JS) > 0:
                answered = now
            time.sleep(0.05)
        result.update(freed_ms=_ms(closed, freed), joined_after_close_ms=_ms(closed, joined),
                      agent_ms=_ms(joined, agent), answered_ms=None if agent is None else _ms(agent, answered))
        result["problems"] = list(nxt.problems)[:5]
    result["guard"] = [line.split("agent_guard: ", 1)[-1][:200] for line in
                       stack.log("token").read_text(errors="replace").splitlines() if next_room in line][:4]
    return result


def passed(r: dict[str, Any], target_s: float) -> bool:
    return r["agent_ms"] is not None and r["agent_ms"] <= target_s * 1000.0 and r["answered_ms"] is not None


def run(stack: LocalStack, wav: Path, *, tries: int, target_s: float) -> dict[str, Any]:
    results = []
    for i in range(1, tries + 1):
        r = closed_try(stack, wav, index=i)
        r["ok"] = passed(r, target_s)
        results.append(r)
        print(f"[faults] tab-closed try {i}/{tries}: worker free {r['freed_ms']} ms after the close; next caller "
              f"joined at {r['joined_after_close_ms']} ms, agent {r['agent_ms']} ms after the join, answered "
              f"{r['answered_ms']} ms after that; {'ok' if r['ok'] else 'FAIL'}", flush=True)  # fmt: skip
        # the next caller's page closed at the end of the try: its call ends before the next try starts
        end = time.monotonic() + 30
        while worker_jobs(stack.ports["AGENT_HTTP_PORT"]) > 0 and time.monotonic() < end:
            time.sleep(0.2)
    return {"tries": tries, "target_ms": target_s * 1000.0, "results": results,
            "passed": sum(r["ok"] for r in results)}  # fmt: skip
