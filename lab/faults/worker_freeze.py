"""The worker frozen mid-reply (SIGSTOP, the issue's 10 s), the caller in Chromium on the whole local stack (issue 43).

One try: the page joins a new room; once the agent speaks, the worker process gets SIGSTOP, and SIGCONT `stop_s`
later. Measured:
- `noticed_ms`: from SIGSTOP until the page says "The agent stopped mid-reply" (its sound stopped, no other cause);
- `logged_ms`: from SIGCONT until the worker's log has its "event loop stalled" line; `named`: the line says the
  whole process ran nothing (the target: logged within 2 s);
- `cleared_ms`: from SIGCONT until the notice is gone (its sound is back);
- `same_agent`: the agent the page follows at the end is the one it had (nothing was lost).
Each try ends with Leave, and the next starts once the worker runs no job.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import until_no_jobs
from lab.callbench.stack import LocalStack
from lab.faults.report import markdown, verdict
from lab.faults.tries import repeat

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
NOTICE = "The agent stopped mid-reply"  # web/app.js TEXT.stalled's start
NOTICE_JS = "() => document.getElementById('notice').textContent"


def stall_lines(log: Path) -> list[str]:
    out = []
    for raw in log.read_text(errors="replace").splitlines():
        try:
            message = str(json.loads(raw).get("message", ""))
        except ValueError:
            continue
        if message.startswith("event loop stalled"):
            out.append(message)
    return out


def freeze_try(stack: LocalStack, wav: Path, *, index: int, stop_s: float) -> dict[str, Any]:
    room = f"freeze-{index}-{secrets.token_hex(3)}"
    result: dict[str, Any] = {"try": index, "room": room, "stop_s": stop_s}
    with BrowserCall(stack.page_url, wav) as call:
        call.join(room)
        call.wait_for(SPEAKING_JS, 120)
        agent = call.page.evaluate("() => window.voiceCall.agent.identity")
        pid = stack.worker_pid()
        before = len(stall_lines(stack.log("agent")))
        stopped = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        noticed = None
        try:
            while time.monotonic() - stopped < stop_s:
                if noticed is None and call.page.evaluate(NOTICE_JS).startswith(NOTICE):
                    noticed = time.monotonic()
                time.sleep(0.05)
        finally:
            os.kill(pid, signal.SIGCONT)
        continued = time.monotonic()
        logged = cleared = None
        while time.monotonic() - continued < 30 and (logged is None or cleared is None):
            if logged is None and len(stall_lines(stack.log("agent"))) > before:
                logged = time.monotonic()
            if cleared is None and not call.page.evaluate(NOTICE_JS).startswith(NOTICE):
                cleared = time.monotonic()
            time.sleep(0.05)
        ms = lambda t0, t: None if t is None else round((t - t0) * 1000.0)  # noqa: E731 - a one-line conversion
        lines = stall_lines(stack.log("agent"))[before:]
        result.update(noticed_ms=ms(stopped, noticed), logged_ms=ms(continued, logged),
                      cleared_ms=ms(continued, cleared), stall_lines=lines[:3],
                      named=any("the whole process ran nothing" in line for line in lines),
                      same_agent=call.page.evaluate("() => window.voiceCall.agent.identity") == agent)
        result["problems"] = list(call.problems)[:5]
        call.leave()
    until_no_jobs(stack.ports["AGENT_HTTP_PORT"])  # the call ends before the next try
    return result


def passed(r: dict[str, Any]) -> bool:
    return bool(r["noticed_ms"] is not None and r["logged_ms"] is not None and r["logged_ms"] <= 2000
                and r["named"] and r["cleared_ms"] is not None and r["same_agent"])  # fmt: skip


def describe(r: dict[str, Any]) -> str:
    return (f"page notice {r['noticed_ms']} ms after SIGSTOP; stall logged {r['logged_ms']} ms after SIGCONT (whole "
            f"process named: {r['named']}); notice gone {r['cleared_ms']} ms after SIGCONT; same agent "
            f"{r['same_agent']}")


def run(stack: LocalStack, wav: Path, *, tries: int, stop_s: float) -> dict[str, Any]:
    report = repeat("worker-freeze", tries, lambda i: freeze_try(stack, wav, index=i, stop_s=stop_s), passed,
                    describe)  # fmt: skip
    return {**report, "stop_s": stop_s}


def table(report: dict[str, Any]) -> str:
    return markdown(
        f"The worker SIGSTOPped {report['stop_s']:g} s mid-reply, the caller in Chromium; target: the stall logged "
        f"within 2 s of SIGCONT, naming the whole process, a page notice while silent, the same agent after. "
        f"{report['passed']}/{report['tries']} passed.",
        ["try", "page notice after SIGSTOP (ms)", "stall logged after SIGCONT (ms)", "whole process named",
         "notice gone after SIGCONT (ms)", "same agent", "ok"],
        ([r["try"], r["noticed_ms"], r["logged_ms"], r["named"], r["cleared_ms"], r["same_agent"], verdict(r)]
         for r in report["results"]))
