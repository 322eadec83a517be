"""The token server down when a fresh page presses Join, then back (issue 43), in Chromium on the whole local stack.

One try: a fresh page loads (from the token server, which also serves the page); the token server is stopped
(`start_all.sh stop token`); Join must fail with a clear notice; the token server is started again; Join again,
without a reload, must connect and get an agent. Measured:
- `notice`: what the page said while the token server was down;
- `rejoined`: the second Join connected, on the same page (no reload);
- `agent_ms`: from the second Join until an agent is present.
Each try ends with Leave, and the next starts once the worker runs no job.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import until_no_jobs
from lab.callbench.stack import LocalStack
from lab.faults.report import markdown, verdict
from lab.faults.tries import repeat

NOTICE_JS = "() => document.getElementById('notice').textContent"
ERROR_JS = "() => document.querySelector('#notice.error') !== null && !document.getElementById('join').disabled"
CONNECTED_JS = "() => document.getElementById('status').textContent.startsWith('connected')"
PRESENT_JS = "() => window.voiceCall.agent?.presence === 'present'"


def down_try(stack: LocalStack, wav: Path, *, index: int) -> dict[str, Any]:
    room = f"token-down-{index}-{secrets.token_hex(3)}"
    result: dict[str, Any] = {"try": index, "room": room}
    with BrowserCall(stack.page_url, wav) as call:
        call.page.fill("#room-input", room)
        stopped = stack._start_all("stop", "token", timeout=60)
        result["stopped"] = stopped.returncode == 0
        try:
            call.page.click("#join")
            call.wait_for(ERROR_JS, 30)
            result["notice"] = call.page.evaluate(NOTICE_JS)
        finally:
            started = stack._start_all("start", "token", timeout=120)
            result["restarted"] = started.returncode == 0
        joined = time.monotonic()
        call.page.click("#join")
        try:
            call.wait_for(CONNECTED_JS, 30)
            call.wait_for(PRESENT_JS, 30)
            result["rejoined"] = True
            result["agent_ms"] = round((time.monotonic() - joined) * 1000.0)
        except Exception as exc:  # noqa: BLE001 - a failed try is recorded with what the page said, not raised
            said = call.page.evaluate(NOTICE_JS)
            result.update(rejoined=False, agent_ms=None, failure=f"{type(exc).__name__}: the page says {said!r}")
        result["problems"] = [p for p in call.problems if "ERR_CONNECTION_REFUSED" not in p][:5]
        if result["rejoined"]:
            call.leave()
    until_no_jobs(stack.ports["AGENT_HTTP_PORT"])  # the call ends before the next try
    return result


def passed(r: dict[str, Any]) -> bool:
    return bool(r["stopped"] and r["restarted"] and r.get("notice", "").startswith("Token server unreachable")
                and r["rejoined"])  # fmt: skip


def describe(r: dict[str, Any]) -> str:
    return (f"said {r.get('notice', '')[:60]!r}; Join again without reload: {r['rejoined']}, agent {r['agent_ms']} ms "
            f"after it")


def run(stack: LocalStack, wav: Path, *, tries: int) -> dict[str, Any]:
    return repeat("token-down", tries, lambda i: down_try(stack, wav, index=i), passed, describe)


def table(report: dict[str, Any]) -> str:
    return markdown(
        f"The token server down when a fresh page presses Join, then back, in Chromium; target: a clear notice, then "
        f"Join works without a reload. {report['passed']}/{report['tries']} passed.",
        ["try", "the page said", "Join again without reload", "agent after it (ms)", "ok"],
        ([r["try"], r.get("notice", "").split(":")[0], r["rejoined"], r["agent_ms"], verdict(r)]
         for r in report["results"]))
