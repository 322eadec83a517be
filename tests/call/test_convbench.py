"""The conversation benchmark's short forms through the real stack (LiveKit's own server, the worker with its
embedded defaults and the shipped turn taking, TURN_HANDLING=ours):
- the page: the corpus's short script (a 700 ms pause inside a turn, a backchannel 1 s into the reply, a barge-in
  1.2 s into the next) played into the call page's microphone from the harness (lab/convbench/page_line.py)
  and scored end to end: the pause does not end the turn, the backchannel does not stop the agent, the barge-in
  does (the VAD-only mode cut that pause: this check asserted it before; docs/agent.md "Turn-taking").
- two SDK callers at once, each in its own room (lab/convbench/many.py, issue 32's CI check): two is this
  box's knee (results/convbench/many_cpu_2026-11-28); at three, calls go unanswered by load alone.
`-m "not convbench"` skips both. No timing target is asserted: CPU tests never assert speed."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.callbench.rtc_caller import wait_for_jobs
from lab.callbench.stack import LocalStack, room_traces
from lab.convbench import corpus, many
from lab.convbench.conductor import play_script
from lab.convbench.page_line import PageLine
from lab.convbench.runner import STACK_ENV
from lab.convbench.score import score
from lab.convbench.script import load_script
from lab.convbench.timeline import Timeline

pytestmark = [pytest.mark.call, pytest.mark.convbench]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {**STACK_ENV, "TURN_HANDLING": "ours", "AGENT_MAX_SESSIONS": "4"}  # two calls at once, and the page's
    stack = LocalStack(tmp_path_factory.mktemp("convbench-stack"), **env)
    stack.start()
    try:
        yield stack
    finally:
        print(stack.stop())


@pytest.fixture(scope="module")
def scripts() -> Path:
    return corpus.cached(("ci", "calls"))


@pytest.mark.browser
async def test_the_short_script_through_the_page_is_played_and_scored(stack: LocalStack, scripts: Path,
                                                                     tmp_path: Path) -> None:
    script = load_script(scripts / "ci" / "short.json")
    room = f"convbench-page-{secrets.token_hex(3)}"
    tl = Timeline(script=script.name, room=room)
    async with PageLine(stack.page_url) as line:
        await line.join(room)
        await line.ready(90)
        await play_script(line, script, tl)
        line.record_into(tl)
    # every turn's record is written by the time the call's job has ended: a reply cut by the barge-in's words can
    # close after the next turn was answered (its record came last in a clean-clone run of 2026-11-29, read before
    # it was written, and the scorer saw no cut)
    await wait_for_jobs(stack.ports["AGENT_HTTP_PORT"], 0, 60)
    tl.traces = room_traces(stack, room)
    (tmp_path / "timeline.json").write_text(json.dumps(tl.to_json(), indent=1, default=str))  # for a failure's reader
    # the worker's side of each turn, in a failure's message: an item not played says only what the page saw
    worker = [(r.get("outcome"), r.get("user_text"), r.get("errors"),
               {k: round(v, 2) for k, v in (r.get("points") or {}).items()
                if k in ("vad_speech_end", "turn_committed", "llm_first_token", "first_frame_published")})
              for r in tl.traces]
    assert tl.errors == [], tl.errors
    assert [(i.item_id, i.played, i.reason) for i in tl.items] == [(i.id, True, "") for i in script.items], worker
    report = score([tl])
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1, default=str))  # for a failure's reader
    (pause,) = report["pause_rows"]
    assert pause["ms"] == 700 and pause["measured_ms"] == pytest.approx(700.0, abs=1.0)
    assert not pause["cut"], pause  # the words "... book a table" are unfinished or neutral: not a short wait
    assert report["commit_point"] == "turn_committed"
    for end in report["end_rows"]:
        assert end["decision_ms"] is not None and end["commit_ms"] is not None and end["audio_ms"] is not None, end
    backchannel, barge_in = report["cued_rows"]
    assert backchannel["played"] and backchannel["reference_db"] is not None  # the agent was talking at the cue
    assert not backchannel["stopped"], backchannel
    # the worker's cut is what is asserted: the page's level reading missed the stop once in three runs on this 2-core
    # machine (the agent's frames then come with dropouts, and the scorer's stop window saw no 100 ms of silence), and
    # again in a clean-clone run of 2026-11-28 (stopped and ducked both unseen, one dropout, the worker's cut traced),
    # so a silence the page did measure must come after the onset, and a missing one is not a failure here; the
    # browser's own silence after a barge-in is tests/call/test_browser_call.py's
    assert barge_in["played"] and barge_in["cut_by_worker"], barge_in
    assert barge_in["silence_ms"] is None or barge_in["silence_ms"] > 0, barge_in


def test_two_calls_at_once_each_in_its_own_room(stack: LocalStack, scripts: Path) -> None:
    timelines, health = many.run_calls(stack.page_url, scripts / "calls" / "questions.json", 2, window_s=2.0,
                                       procs=1, turns=2)  # fmt: skip
    assert len(timelines) == 2 and len({tl.room for tl in timelines}) == 2
    rows = [many.call_row(tl, many.DEFAULT_THRESHOLDS) for tl in timelines]
    assert [r["errors"] for r in rows] == [[], []]
    # every call heard the agent; a response is one that began within the scorer's window (15 s) of the caller's
    # end of speech, which a loaded 2-core box can miss (at three calls a CI run measured none for one call's two
    # turns): that both calls were answered is the worker's traces' to say, below, not a time
    assert all(r["turns"] == 2 and r["replies"] >= 1 and r["concealed_ms"] is not None for r in rows), rows
    summary = many.level_summary(2, rows, health, [{"samples": 0}])
    assert summary["failed_calls"] == 0 and summary["response_ms"]["n"] >= 1
    (process,) = health
    assert process["frames"] > 0 and process["publish_late_ms"]["p50"] is not None
    rooms = {tl.room for tl in timelines}
    # each room was its own job on the worker (a turn cut by the hang-up is written at the job's end: wait for it)
    records = stack.wait_traces(lambda rs: rooms <= {r["session_id"].rsplit("-", 1)[0] for r in rs}, timeout=30)
    # the worker's own account: an apology for a failed turn is audio at the caller, not an answer. Each call got at
    # least one real answer (a local LLM timeout in one turn at this box's knee is load, not a bug)
    traced = {room: many.traced_turns(records, room) for room in rooms}
    assert all(t["answered_turns"] >= 1 for t in traced.values()), traced
