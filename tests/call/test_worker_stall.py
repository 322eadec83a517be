"""The worker frozen mid-reply (issue 43: SIGSTOP for 10 s left no log line and a page that said "silent" with no
word why), in a real browser through the whole local stack: the page says the agent stopped mid-reply within a few
seconds of its sound stopping, and takes it back once the worker goes on; the worker logs the stall of its loops
within 2 s of SIGCONT (agent/worker_stats.py), the whole process named as what stopped."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from lab.callbench.browser import BrowserCall
from lab.callbench.stack import LocalStack

pytestmark = [pytest.mark.browser, pytest.mark.call]

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
NOTICE_JS = "(start) => document.getElementById('notice').textContent.startsWith(start)"
STOP_S = 6.0


def stall_lines(log: Path) -> list[dict]:
    lines = []
    for raw in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if str(record.get("message", "")).startswith("event loop stalled"):
            lines.append(record)
    return lines


def test_a_frozen_worker_is_named_on_the_page_and_in_its_log(stack: LocalStack, question_wav: Path) -> None:
    with BrowserCall(stack.page_url, question_wav) as call:
        call.join("worker-stall")
        call.wait_for(SPEAKING_JS, 120)
        pid = stack.worker_pid()
        before = len(stall_lines(stack.log("agent")))
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            call.wait_for(NOTICE_JS, STOP_S, arg="The agent stopped mid-reply")
            noticed_s = time.time() - stopped
        finally:
            time.sleep(max(0.0, STOP_S - (time.time() - stopped)))
            os.kill(pid, signal.SIGCONT)
        continued = time.time()
        deadline = time.monotonic() + 10
        while len(stall_lines(stack.log("agent"))) <= before:
            assert time.monotonic() < deadline, "no stall logged"
            time.sleep(0.1)
        logged_s = time.time() - continued
        stalls = stall_lines(stack.log("agent"))[before:]
        call.wait_for("() => !document.getElementById('notice').textContent.startsWith('The agent stopped')", 60)
    print(f"page notice {noticed_s:.1f} s after SIGSTOP; stall logged {logged_s:.2f} s after SIGCONT: "
          f"{[s['message'] for s in stalls]}")  # fmt: skip
    assert noticed_s < 4.0, noticed_s
    assert logged_s < 2.0, logged_s
    assert any("the whole process ran nothing" in s["message"] for s in stalls), stalls
    assert all(float(s["message"].split("ran nothing for ")[1].split(" s")[0]) >= STOP_S - 1 for s in stalls), stalls
