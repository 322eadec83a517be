"""A person's call, in a real browser, through the real stack: the page, the token server, LiveKit's own
server and the agent worker with its embedded defaults. The microphone is espeak-ng speech (Chromium's
fake capture device loops the WAV)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.tracing import POINTS
from lab.callbench.browser import BrowserCall
from lab.callbench.measure import match_barge_ins
from lab.callbench.stack import LocalStack, room_traces

pytestmark = [pytest.mark.browser, pytest.mark.call]

AGENT_PRESENT_JS = "() => !['not here', 'initializing'].includes(document.getElementById('agent-state').textContent)"
USER_SAID_JS = """(word) => [...document.querySelectorAll('#transcript p.line.you')]
  .some((p) => p.textContent.toLowerCase().includes(word))"""


def test_browser_call_agent_hears_and_answers(stack: LocalStack, question_wav: Path) -> None:
    with BrowserCall(stack.page_url, question_wav) as call:
        call.join("browser-call")
        # the agent joins and its state shows on the page, with a plain word about its random-weight voice
        call.wait_for(AGENT_PRESENT_JS, 60)
        call.wait_for("() => window.voiceCall.agentParts?.tts_weights === 'random'", 30)
        # the user's words come back as a transcript (whisper recognised a known word) and the agent answers
        call.wait_for(USER_SAID_JS, 60, arg="hear")
        call.wait_for("() => window.voiceCall.log.some((r) => r.type === 'turn')", 60)
        first = call.snapshot()
        time.sleep(1.0)
        second = call.snapshot()
        # the call's trace has all nine points for an answered turn; wait inside the call, since a turn cut
        # short (a reply cut before its first frame) is traced incomplete and the next loop of the WAV answers
        done = stack.wait_traces(lambda rs: any(r["complete"] for r in room_traces(rs, "browser-call")))
        records = room_traces(done, "browser-call")
        call.leave()
        problems = list(call.problems)

    assert "babbles" in first["agentPartsText"] and "TTS_DEEP_STREAM_MODEL_DIR" in first["agentPartsText"]
    assert set(first["agentParts"]["defaults"]) == {"tts", "llm", "stt", "livekit"}
    assert first["notice"] == "", first["notice"]
    assert any(line["who"] == "agent" and line["text"].strip() for line in second["transcript"]), second["transcript"]
    # agent audio reaches the browser: inbound RTP keeps rising, and what the page plays is not silence (the
    # page's meter after its playback gate; WebRTC's own audio-energy stat stays 0, since the muted media
    # element is not what plays under webAudioMix)
    agent_in = [
        (a, b) for a in first["inbound"] for b in second["inbound"] if a["isAgent"] and a["identity"] == b["identity"]
    ]
    assert agent_in, first["inbound"]
    before, after = agent_in[0]
    assert after["bytesReceived"] > before["bytesReceived"] and after["packetsReceived"] > before["packetsReceived"]
    assert second["agentPeakDb"] is not None and second["agentPeakDb"] > -55.0, second["agentPeakDb"]
    turn = next(r for r in second["log"] if r["type"] == "turn")
    assert 0 < turn["responseMs"] < 15_000, turn
    done = next(r for r in records if r["complete"])
    assert set(POINTS) <= set(done["points"]) and done["outcome"] in ("answered", "interrupted"), done
    assert problems == [], problems


def test_barge_in_from_the_browser_silences_the_agent(stack: LocalStack, interrupting_wav: Path) -> None:
    with BrowserCall(stack.page_url, interrupting_wav) as call:
        call.join("browser-barge-in")
        # the WAV's next loop speaks while the agent is still answering: the agent must go quiet at the browser,
        # after its own barge-in decision (traced on the same host, same wall clock)
        deadline = time.monotonic() + 120
        matched: list[dict] = []
        while not matched and time.monotonic() < deadline:
            time.sleep(2.0)
            snap = call.snapshot()
            records = [r for r in stack.traces() if r["session_id"].startswith("browser-barge-in-")]
            matched = match_barge_ins(snap["log"], records)
        call.leave()
        problems = list(call.problems)

    assert matched, (snap["log"], records)
    first = matched[0]
    assert 0 <= first["decision_to_silence_ms"] < 1000, first
    irq = next(i for r in records for i in r["interruptions"])
    assert irq["audio_silenced"] is not None and irq["stale_frames_after_cancel"] == 0, irq
    # the worker told the page of its cut (agent/turn/cut_notice.py), and the page's gate closed when it arrived
    assert any(cut >= first["cut_at_ms"] for cut in snap["cuts"]), (first, snap["cuts"])
    assert problems == [], problems
