"""Line up what the browser measured with what the agent traced (same host, same wall clock).

Contract
- `match_turns(log, traces)`: for each browser "turn" record (user end of speech -> first agent audio heard,
  Unix ms), the trace whose t0 (`vad_speech_end`) lies closest after the browser's end of speech (within
  5 s), and the breakdown: model times (STT, LLM first token, TTS first packet), the VAD hangover, and the
  remainder = browser response - model times (what transport and framework add). STT counts from the turn's
  end when it was sent earlier, at the pause (agent/turn/early_stt.py): its time inside the hangover is not in the
  response.
- `match_barge_ins(log, traces)`: for each browser "barge_in" record, the agent's interruption decided
  after the user started talking and before the browser heard silence; `decision_to_silence_ms` is what
  the cancel path plus transport took, as heard; split at the trace's `audio_silenced` (the worker's queue
  cleared) into `decision_to_cut_ms` and `cut_to_silence_ms`; with the page's cut-notice arrivals (`cuts`,
  Unix ms), `cut_to_notice_ms` is how long the notice took to reach the page, whose playback gate closed then.
"""

from __future__ import annotations

from typing import Any

from agent.tracing import SEGMENTS

#: The trace's own segments between the models: where the framework's part of the overhead goes.
FRAMEWORK_SEGMENTS = ("vad_to_stt", "stt_to_llm", "bridge", "tts_first_to_publish")


def _seg(points: dict[str, float], a: str, b: str) -> float | None:
    if a in points and b in points:
        return (points[b] - points[a]) * 1000.0
    return None


def match_turns(log: list[dict], traces: list[dict], *, hangover_ms: float) -> list[dict[str, Any]]:
    out = []
    complete = [t for t in traces if t.get("complete")]
    for rec in (r for r in log if r.get("type") == "turn" and "userEndAtMs" in r):
        best = None
        for t in complete:
            lag = t["wall_t0"] * 1000.0 - rec["userEndAtMs"]
            if -1000.0 <= lag <= 5000.0 and (best is None or abs(lag) < abs(best[0])):
                best = (lag, t)
        if best is None:
            continue
        lag, trace = best
        p = trace["points"]
        stt, llm, tts = _seg(p, "stt_request", "stt_done"), _seg(p, "llm_request", "llm_first_token"), _seg(
            p, "tts_first_text", "tts_first_packet"
        )
        # STT sent at the pause (agent/turn/early_stt.py) ran partly inside the hangover: only what is left of it
        # after the turn's end is in the response
        stt_after_end = None if stt is None else min(stt, p["stt_done"] * 1000.0)
        models = sum(x for x in (stt_after_end, llm, tts) if x is not None)
        published_ms = (trace["wall_t0"] + p["first_frame_published"]) * 1000.0
        out.append({
            "turn_id": trace["turn_id"],
            "response_ms": rec["responseMs"],  # browser: end of speech (with hangover) -> first agent audio heard
            "voice_to_voice_ms": rec["turnGapMs"],  # browser: last voiced sound -> first agent audio heard
            "vad_hangover_ms": hangover_ms,
            "vad_end_lag_ms": lag,  # the agent's VAD end of turn, after the browser's (hangover included on both)
            "stt_ms": stt,  # request -> transcript
            "stt_after_end_ms": stt_after_end,  # the part of it after the turn's end (the trace's t0)
            "llm_ttft_ms": llm,
            "tts_first_packet_ms": tts,
            "server_e2e_ms": _seg(p, "vad_speech_end", "first_frame_published"),
            "publish_to_heard_ms": rec["agentStartAtMs"] - published_ms,
            "overhead_ms": rec["responseMs"] - models,  # transport + framework: neither a model nor the hangover
            "playout_gap_ms": trace.get("playout_gap_ms"),  # the reply's audio queue ran dry (a heard stutter)
            **{f"{name}_ms": _seg(p, a, b) for name, a, b in SEGMENTS if name in FRAMEWORK_SEGMENTS},
        })  # fmt: skip
    return out


def match_barge_ins(log: list[dict], traces: list[dict], cuts: list[float] = ()) -> list[dict[str, Any]]:
    decisions = [  # (decision, queue cleared: no further agent audio can leave the worker), Unix ms
        ((trace["wall_t0"] + irq["interrupt_detected"]) * 1000.0,
         None if irq.get("audio_silenced") is None else (trace["wall_t0"] + irq["audio_silenced"]) * 1000.0)
        for trace in traces
        for irq in trace.get("interruptions", [])
    ]  # fmt: skip
    out = []
    for rec in (r for r in log if r.get("type") == "barge_in" and "silentAtMs" in r):
        inside = [d for d in decisions if rec["userStartAtMs"] <= d[0] <= rec["silentAtMs"]]
        if not inside:
            continue
        decision, cut = max(inside)
        notice = next((c for c in sorted(cuts) if cut is not None and cut <= c <= rec["silentAtMs"] + 1000.0), None)
        out.append({
            "cut_at_ms": cut,  # Unix ms, the worker's clock: lines the row up with logs and other records
            "onset_to_silence_ms": rec["silentAtMs"] - rec["userStartAtMs"],
            "onset_to_decision_ms": decision - rec["userStartAtMs"],
            "decision_to_silence_ms": rec["silentAtMs"] - decision,
            "decision_to_cut_ms": None if cut is None else cut - decision,  # the worker's cancel path
            "cut_to_silence_ms": None if cut is None else rec["silentAtMs"] - cut,  # WebRTC + the browser
            "cut_to_notice_ms": None if notice is None else notice - cut,  # the cut notice's data packet
        })  # fmt: skip
    return out
