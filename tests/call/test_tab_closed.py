"""A caller closes the tab mid-call without Leave, on a one-call worker, and the next caller joins at once (issue 43:
LiveKit kept the closed tab ~22 s, the worker stayed full, the next caller waited 13.5 s). In real browsers through
the whole local stack: the closed page leaves the room on pagehide, the worker ends that call about a second
later, and the next caller's agent arrives within seconds (the room's own dispatch, or the agent guard's once the
worker is free)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import worker_jobs
from lab.callbench.stack import LocalStack
from tests.call.conftest import STACK_ENV

pytestmark = [pytest.mark.browser, pytest.mark.call]

SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
PRESENT_JS = "() => window.voiceCall.agent?.presence === 'present'"


@pytest.fixture(scope="module")
def one_call_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("one_call"), **{**STACK_ENV, "AGENT_MAX_SESSIONS": "1"})
    local.start()
    try:
        yield local
    finally:
        print(local.stop())


def test_a_closed_tab_frees_the_one_call_worker_for_the_next_caller(
    one_call_stack: LocalStack, question_wav: Path
) -> None:
    stack = one_call_stack
    port = stack.ports["AGENT_HTTP_PORT"]
    with BrowserCall(stack.page_url, question_wav) as first:
        first.join("tab-first")
        first.wait_for(SPEAKING_JS, 120)
        assert worker_jobs(port) == 1
        first.page.close()  # the tab, closed mid-reply: no Leave
        closed = time.monotonic()
    with BrowserCall(stack.page_url, question_wav) as second:  # (one Playwright per thread: after the first)
        second.join("tab-second")
        joined = time.monotonic() - closed
        while worker_jobs(port) > 0 and time.monotonic() - closed < 15:
            time.sleep(0.1)  # the closed tab's call ends ...
        freed = time.monotonic() - closed
        second.wait_for(PRESENT_JS, 60)  # ... and the next caller gets the agent
        served = time.monotonic() - closed
        problems = list(second.problems)
    guard = [line for line in stack.log("token").read_text(errors="replace").splitlines()
             if "tab-second" in line and "no worker took" in line]  # fmt: skip
    print(f"second joined {joined:.1f} s after the close; worker free at {freed:.1f} s; "
          f"second caller's agent at {served:.1f} s; guard: {guard[:1]}")  # fmt: skip
    assert freed < 6.0, freed  # was ~22 s: LiveKit held the closed tab, the call with it
    assert served < 12.0, served  # was 13.5 s after the join
    assert all("full or draining" in line for line in guard), guard  # never "none registered?" here
    assert problems == [], problems
