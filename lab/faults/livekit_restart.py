"""LiveKit's server restarted mid-call, in a real browser through the whole local stack (issue 43).

One try: the page (headless Chromium; its microphone a WAV that asks one question every ~14 s) joins a new room;
once the agent speaks, `scripts/start_all.sh restart livekit` stops LiveKit (its drain, then SIGKILL) and starts it
again. A poller inside the page records every change of the room's state, the agent's presence and identity and
the page's notice, on the page's Unix clock (the machine's). Per try:
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
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from lab.callbench.browser import BrowserCall
from lab.callbench.stack import LocalStack

LOST_NOTICE = "A new agent took over"  # web/app.js TEXT.back: the conversation was lost
SPEAKING_JS = "() => window.voiceCall.agent?.shown === 'speaking'"
COUNTS_JS = """() => [window.voiceCall.log.filter((r) => r.type === 'turn').length,
  document.querySelectorAll('#transcript p.line.agent').length]"""
# records each change of (room state, agent presence, agent identity, notice) with its Unix ms time
WATCH_JS = """() => {
  window.__faultlog = [];
  let last = "";
  setInterval(() => {
    const c = window.voiceCall, a = c.agent;
    const row = [c.room?.state ?? null, a?.presence ?? null, a?.identity ?? null,
                 document.getElementById('notice').textContent];
    const key = JSON.stringify(row);
    if (key !== last) { last = key; window.__faultlog.push([performance.timeOrigin + performance.now(), ...row]); }
  }, 50);
}"""


# what the page holds when it measured nothing after the restart: its room, the agents' tracks, the gate, the meters
STATE_JS = """() => {
  const c = window.voiceCall, room = c.room;
  const people = room ? [...room.remoteParticipants.values()].map((p) => ({
    identity: p.identity, agent: p.isAgent, state: p.attributes?.['lk.agent.state'] ?? null,
    tracks: [...p.audioTrackPublications.values()].map((pub) => ({
      sid: pub.trackSid, subscribed: pub.isSubscribed, muted: pub.isMuted,
      live: pub.track?.mediaStreamTrack?.readyState ?? null })) })) : [];
  return { room: room?.state ?? null, people, gate_closed: c.gate?.closed ?? null,
           watchers: c.watchers ? [...c.watchers.keys()] : [], levels: c.levels, shown: c.agent?.shown ?? null,
           log_types: c.log.map((r) => r.type).slice(-12) };
}"""


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0)


def summarize(log: list[list[Any]], restart_at_ms: float, original: str) -> dict[str, Any]:
    """The page's record from the restart on: when it lost its agent and got it back, whom it followed, what it
    said."""
    after = [row for row in log if row[0] >= restart_at_ms]
    gone = next((t for t, state, presence, _who, _n in after if state != "connected" or presence != "present"), None)
    back = None
    if gone is not None:
        back = next((t for t, state, presence, _who, _n in after
                     if t > gone and state == "connected" and presence == "present"), None)  # fmt: skip
    notices = list(dict.fromkeys(n for *_, n in after if n))
    agents = list(dict.fromkeys(who for _t, _s, _p, who, _n in after if who))
    final = log[-1][3] if log else None
    same = final == original
    return {
        "without_agent_ms": None if gone is None or back is None else round(back - gone),
        "agents": agents, "same_agent": same, "notices": notices,
        "false_lost": same and any(n.startswith(LOST_NOTICE) for n in notices),
    }  # fmt: skip


def restart_try(stack: LocalStack, wav: Path, *, index: int, converse_s: float = 120.0) -> dict[str, Any]:
    room = f"lk-restart-{index}-{secrets.token_hex(3)}"
    result: dict[str, Any] = {"try": index, "room": room}
    with BrowserCall(stack.page_url, wav) as call:
        call.join(room)
        call.wait_for(SPEAKING_JS, 120)
        call.page.evaluate(WATCH_JS)
        original = call.page.evaluate("() => window.voiceCall.agent.identity")
        turns, lines = call.page.evaluate(COUNTS_JS)
        restart_at = time.time()
        t0 = time.monotonic()
        done = stack._start_all("restart", "livekit", timeout=120)
        result["restart_s"] = round(time.monotonic() - t0, 1)
        result["restart_ok"] = done.returncode == 0
        drain = [ln for ln in done.stdout.splitlines() if "draining" in ln or "drain" in ln]
        result["restart_says"] = drain[-1].strip() if drain else None
        deadline = time.monotonic() + converse_s
        turn_at = line_at = None
        while time.monotonic() < deadline and (turn_at is None or line_at is None):
            now_turns, now_lines = call.page.evaluate(COUNTS_JS)
            if turn_at is None and now_turns > turns:
                turn_at = time.time()
            if line_at is None and now_lines > lines:
                line_at = time.time()
            time.sleep(0.2)
        log = call.page.evaluate("() => window.__faultlog")
        result.update(summarize(log, restart_at * 1000.0, original))
        back_at = next((row[0] / 1000.0 for row in log if row[0] >= restart_at * 1000.0 and row[1] == "connected"
                        and row[2] == "present"), None)  # fmt: skip
        result["turn_ms"] = _ms(back_at, turn_at)
        result["line_ms"] = _ms(back_at, line_at)
        if turn_at is None or line_at is None:  # for the reader of a failure: what the page held at the end
            result["page_state"] = call.page.evaluate(STATE_JS)
        result["problems"] = [p for p in call.problems
                              if "ERR_CONNECTION_REFUSED" not in p and "{room: " not in p][:5]  # fmt: skip
    return result


def passed(r: dict[str, Any], target_ms: float) -> bool:
    return bool(
        r["restart_ok"] and r["without_agent_ms"] is not None and r["without_agent_ms"] <= target_ms
        and r["same_agent"] and not r["false_lost"] and r["turn_ms"] is not None and r["line_ms"] is not None
    )


def run(stack: LocalStack, wav: Path, *, tries: int, target_s: float) -> dict[str, Any]:
    results = []
    for i in range(1, tries + 1):
        r = restart_try(stack, wav, index=i)
        r["ok"] = passed(r, target_s * 1000.0)
        results.append(r)
        print(f"[faults] livekit-restart try {i}/{tries}: restart {r['restart_s']} s, without an agent "
              f"{r['without_agent_ms']} ms, agents {r['agents']}, same {r['same_agent']}, notices {r['notices']}, "
              f"turn {r['turn_ms']} ms, line {r['line_ms']} ms; {'ok' if r['ok'] else 'FAIL'}", flush=True)  # fmt: skip
    return {"tries": tries, "target_ms": target_s * 1000.0, "results": results,
            "passed": sum(r["ok"] for r in results)}  # fmt: skip
