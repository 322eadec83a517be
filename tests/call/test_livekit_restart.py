"""LiveKit restarted mid-call (issue 43), in a real browser through the whole local stack: `start_all.sh restart
livekit` stops LiveKit within seconds (its drain, then SIGKILL) and starts it again; the page and the worker's
agent reconnect to the new server, the agent's session with them (it gives its caller time to come back:
agent/callers.py); the page says nothing was lost; the latency table and the transcript go on: a new answered
turn is measured and transcribed after the restart. Before (issue 43): 22.6 s to restart, "It lost what was said
before" for a session that lost nothing; with the first version of this change, the call ended mid-restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lab.callbench.browser import BrowserCall
from lab.callbench.stack import LocalStack

pytestmark = [pytest.mark.browser, pytest.mark.call]

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
CONNECTED_JS = """() => window.voiceCall.room?.state === 'connected'
  && window.voiceCall.agent?.presence === 'present'"""
TURNS_JS = "(n) => window.voiceCall.log.filter((r) => r.type === 'turn').length > n"
LINES_JS = "(n) => document.querySelectorAll('#transcript p.line.agent').length > n"


# Fails in about 1 run of 3 on the 2-core box (2026-12-03) for two product bugs, written up in docs/operations.md
# ("LiveKit restarts mid-call", known problems); non-strict, so it still runs and shows when it passes.
@pytest.mark.xfail(strict=False, reason="LiveKit restart: duplicate agent dispatch / page stops measuring (issue 43)")
def test_a_livekit_restart_mid_call_keeps_the_call_measured_and_transcribed(
    stack: LocalStack, question_wav: Path
) -> None:
    with BrowserCall(stack.page_url, question_wav) as call:
        call.join("lk-restart")
        call.wait_for(SPEAKING_JS, 120)
        agent = call.page.evaluate("() => window.voiceCall.agent.identity")
        turns = call.page.evaluate("() => window.voiceCall.log.filter((r) => r.type === 'turn').length")
        lines = call.page.evaluate("() => document.querySelectorAll('#transcript p.line.agent').length")
        started = time.monotonic()
        result = stack._start_all("restart", "livekit", timeout=120)
        restarted_s = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        call.wait_for(CONNECTED_JS, 60)
        back = call.page.evaluate("() => window.voiceCall.agent.identity")
        notice = call.snapshot()["notice"]
        call.wait_for(TURNS_JS, 180, arg=turns)  # the latency table goes on
        call.wait_for(LINES_JS, 60, arg=lines)  # and so does the transcript
        history = call.page.evaluate("() => window.voiceCall.agent.history.map((h) => h.shown)")
        problems = list(call.problems)
    print(f"restart took {restarted_s:.1f}s; agent {agent} -> {back}; notice {notice!r}; states {history}")
    assert "livekit: still draining after" in result.stdout and restarted_s < 15, result.stdout
    # the agent's session lived through the restart (its callers had CALLER_RECONNECT_WAIT_S to come back), and
    # the page says nothing was lost
    assert back == agent, (agent, back, history)
    assert notice in ("The agent is back; nothing was lost.", ""), notice
    # livekit-client logs its failed reconnect attempts while LiveKit is down (its own logger's lines carry the
    # room as context, and the refused WebSocket is Chromium's): those, and nothing else
    expected = ("{room: lk-restart, ", "ERR_CONNECTION_REFUSED")
    assert not [p for p in problems if not any(e in p for e in expected)], problems
