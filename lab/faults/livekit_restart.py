"""LiveKit's server restarted mid-call, in a real browser through the whole local stack (issue 43).

One try: the page (headless Chromium; its microphone a WAV that asks one question every ~14 s) joins a new room;
once the agent speaks, `scripts/start_all.sh restart livekit` stops LiveKit (its drain, then SIGKILL) and starts it
again (in a thread), while the drill reads the page every 50 ms and keeps every change of the room's state, the
agent's presence and identity, the page's notice and its latency rows and transcript lines (`page_log`). Per try:
- `restart_s`: how long the restart command took;
- `without_agent_ms`: from the page losing its agent (room not connected, or no agent present) to room and agent
  back; the target is 5 s;
- `same_agent`: the agent back at the end is the call's own (a stand-in that the page's new room dispatched left);
  `agents`: every agent identity the page followed after the restart;
- `notices`: what the page said after the restart; `false_lost`: it said the agent lost the conversation
  ("A new agent took over ...") although its own agent came back;
- `turn_ms`, `line_ms`: after the page is back, a new row in its latency table and a new agent line in its
  transcript (the conversation is measured and transcribed again); None when none came within `converse_s`, and
  then `page_state` holds what the page had at the end (its room, each agent's audio tracks, the gate, the meters).
Each try ends with Leave, and the next starts once the worker runs no job: one call at a time.
"""

from __future__ import annotations

import concurrent.futures
import secrets
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.rtc_caller import until_no_jobs
from lab.callbench.stack import LocalStack
from lab.faults.report import markdown, measured, p50, top, verdict
from lab.faults.tries import repeat

LOST_NOTICE = "A new agent took over"  # web/app.js TEXT.back: the conversation was lost
SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
# the page's room state, its agent's presence and identity, its notice, its latency rows and agent transcript lines
ROW_JS = """() => [window.voiceCall.room?.state ?? null, window.voiceCall.agent?.presence ?? null,
  window.voiceCall.agent?.identity ?? null, document.getElementById('notice').textContent,
  window.voiceCall.log.filter((r) => r.type === 'turn').length,
  document.querySelectorAll('#transcript p.line.agent').length]"""
POLL_S = 0.05


# what the page holds when it measured nothing after the restart: its room, the agents' tracks, the gate, the meters
STATE_JS = """() => {
  const c = window.voiceCall, room = c.room;
  const people = room ? [...room.remoteParticipants.values()].map((p) => ({
    identity: p.identity, agent: p.isAgent, state: p.attributes?.['lk.agent.state'] ?? null,
    tracks: [...p.audioTrackPublications.values()].map((pub) => ({
      sid: pub.trackSid, subscribed: pub.isSubscribed, muted: pub.isMuted,
      live: pub.track?.mediaStreamTrack?.readyState ?? null })) })) : [];
  const t = c.tracker;
  return { room: room?.state ?? null, people, gate_closed: c.gate?.closed ?? null,
           watchers: c.watchers ? [...c.watchers.keys()] : [], levels: c.levels, shown: c.agent?.shown ?? null,
           log_types: c.log.map((r) => r.type).slice(-12),
           agent_audio: { audible: c.agentAudio?.audible, quiet_since: c.agentAudio?.quietSince },
           mic_vad: { audible: c.vad?.audible, speaking: c.vad?.speaking, state: c.vad?.state },
           tracker: { agent_audible: t?.agentAudible, pending_turn: t?.pendingTurn, barge_in_at: t?.bargeInAt } };
}"""


def summarize(log: list[list[Any]], original: str) -> dict[str, Any]:
    """From the page's rows (seconds since the restart began, then ROW_JS's fields, one row per change): when it lost
    its agent and got it back, whom it followed, what it said, when it measured and transcribed again."""
    gone_at = next((i for i, row in enumerate(log) if row[1] != "connected" or row[2] != "present"), None)
    gone = None if gone_at is None else log[gone_at][0]
    first = log[gone_at] if gone_at is not None else [0.0, None, None, None, "", 0, 0]  # the counts when it went
    back = None if gone is None else next(
        (row[0] for row in log if row[0] > gone and row[1] == "connected" and row[2] == "present"), None)
    turn = None if back is None else next((row[0] for row in log if row[0] >= back and row[5] > first[5]), None)
    line = None if back is None else next((row[0] for row in log if row[0] >= back and row[6] > first[6]), None)
    notices = list(dict.fromkeys(row[4] for row in log if row[4]))
    same = bool(log) and log[-1][3] == original
    ms = lambda a, b: None if a is None or b is None else round((b - a) * 1000.0)  # noqa: E731 - a conversion
    return {
        "without_agent_ms": ms(gone, back), "agents": list(dict.fromkeys(row[3] for row in log if row[3])),
        "same_agent": same, "notices": notices,
        "false_lost": same and any(n.startswith(LOST_NOTICE) for n in notices),
        "turn_ms": ms(back, turn), "line_ms": ms(back, line),
    }  # fmt: skip


def restart_try(stack: LocalStack, wav: Path, *, index: int, converse_s: float = 120.0) -> dict[str, Any]:
    room = f"lk-restart-{index}-{secrets.token_hex(3)}"
    result: dict[str, Any] = {"try": index, "room": room}
    with BrowserCall(stack.page_url, wav) as call:
        call.join(room)
        call.wait_for(SPEAKING_JS, 120)
        original = call.page.evaluate("() => window.voiceCall.agent.identity")
        # the restart runs in a thread; this one (Playwright's) records every change the page shows meanwhile
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            t0 = time.monotonic()
            restart = pool.submit(stack._start_all, "restart", "livekit", timeout=120)
            log: list[list[Any]] = []
            restart_s = None
            while time.monotonic() - t0 < converse_s:
                row = call.page.evaluate(ROW_JS)
                now = time.monotonic() - t0
                if not log or row != log[-1][1:]:
                    log.append([round(now, 3), *row])
                if restart_s is None and restart.done():
                    restart_s = now
                summary = summarize(log, original)
                if restart_s is not None and summary["turn_ms"] is not None and summary["line_ms"] is not None:
                    break
                time.sleep(POLL_S)
            done = restart.result()
        result["restart_s"] = round(restart_s or time.monotonic() - t0, 1)
        result["restart_ok"] = done.returncode == 0
        drain = [ln for ln in done.stdout.splitlines() if "drain" in ln]
        result["restart_says"] = drain[-1].strip() if drain else None
        result.update(summarize(log, original))
        result["page_log"] = log  # seconds since the restart began, then ROW_JS's fields: for the reader of a try
        if result["turn_ms"] is None or result["line_ms"] is None:  # what the page held at the end
            result["page_state"] = call.page.evaluate(STATE_JS)
        result["problems"] = [p for p in call.problems
                              if "ERR_CONNECTION_REFUSED" not in p and "{room: " not in p][:5]  # fmt: skip
        call.leave()
    until_no_jobs(stack.ports["AGENT_HTTP_PORT"])  # the call ends before the next try
    return result


def passed(r: dict[str, Any], target_ms: float) -> bool:
    return bool(
        r["restart_ok"] and r["without_agent_ms"] is not None and r["without_agent_ms"] <= target_ms
        and r["same_agent"] and not r["false_lost"] and r["turn_ms"] is not None and r["line_ms"] is not None
    )


def describe(r: dict[str, Any]) -> str:
    return (f"restart {r['restart_s']} s, without an agent {r['without_agent_ms']} ms, agents {r['agents']}, same "
            f"{r['same_agent']}, notices {r['notices']}, turn {r['turn_ms']} ms, line {r['line_ms']} ms")


def run(stack: LocalStack, wav: Path, *, tries: int, target_s: float) -> dict[str, Any]:
    report = repeat("livekit-restart", tries, lambda i: restart_try(stack, wav, index=i),
                    lambda r: passed(r, target_s * 1000.0), describe)  # fmt: skip
    return {**report, "target_ms": target_s * 1000.0, "summary": summary(report["results"])}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    gaps = measured(rows, "without_agent_ms")
    return {"without_agent_p50_ms": p50(gaps), "without_agent_max_ms": top(gaps),
            "false_lost": sum(r["false_lost"] for r in rows), "stand_in_kept": sum(not r["same_agent"] for r in rows)}


def table(report: dict[str, Any]) -> str:
    s = report["summary"]
    return markdown(
        f"LiveKit's server restarted mid-call (the caller in Chromium); target: the page's agent back within "
        f"{report['target_ms'] / 1000:g} s, its own agent, no false \"lost\" notice, a new latency row and transcript "
        f"line. {report['passed']}/{report['tries']} passed.",
        ["try", "restart (s)", "without an agent (ms)", "agents after", "same agent", 'false "lost"',
         "new row after (ms)", "new line after (ms)", "ok"],
        ([r["try"], r["restart_s"], r["without_agent_ms"], len(r["agents"]), r["same_agent"], r["false_lost"],
          r["turn_ms"], r["line_ms"], verdict(r)] for r in report["results"]),
        f"without an agent: P50 {s['without_agent_p50_ms']} ms, max {s['without_agent_max_ms']} ms; false \"lost\" "
        f"notices {s['false_lost']}; a stand-in kept {s['stand_in_kept']}")
