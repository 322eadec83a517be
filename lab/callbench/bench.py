"""The call benchmark: N turns and their barge-ins in one real browser call, measured where the person is.

One call (one browser, one room) hears a WAV of N different questions, each followed by a gap in which the
agent answers; the next question lands while the agent (whose random-weight voice babbles on) still talks,
so every question after the first is also a barge-in. Per turn: the transcript the agent heard, the
browser's response (end of speech -> first agent audio heard) and its breakdown from the trace; per barge-in:
the agent's decision -> silence heard at the browser. `run()` returns the report; `write()` writes JSON and
a markdown table.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
import sys
import time
import wave
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from agent.config import AgentConfig, quiet_db, stt_early_ms
from agent.turn.options import TurnMode
from common.env import Env
from common.percentiles import percentiles
from lab.callbench.browser import BrowserCall
from lab.callbench.measure import match_barge_ins, match_turns
from lab.callbench.speech import RATE, speak
from lab.callbench.stack import LocalStack

# (question, a word whisper must hear in it)
QUESTIONS = [
    ("What is the capital of France?", "france"),
    ("How are you today?", "today"),
    ("Tell me a joke about a cat.", "cat"),
    ("What time is it in London?", "london"),
    ("Can you recommend a good book?", "recommend"),
    ("What is the weather like?", "weather"),
    ("Please count to five.", "count"),
    ("Who wrote Romeo and Juliet?", "juliet"),
    ("What is your favourite color?", "color"),
    ("Thank you, goodbye.", "thank"),
]
TARGETS = {"overhead_p95_ms": 80.0, "barge_in_p95_ms": 150.0}
HANGOVER_MS = float(AgentConfig.vad_silence_ms)  # the default: seven Silero windows, so page and agent agree


def questions_wav(path: Path, turns: int, gap_s: float) -> list[tuple[str, str]]:
    chosen = [QUESTIONS[i % len(QUESTIONS)] for i in range(turns)]
    parts = [np.zeros(int(1.0 * RATE), dtype=np.int16)]
    for text, _ in chosen:
        parts += [speak(text), np.zeros(int(gap_s * RATE), dtype=np.int16)]
    parts.append(np.zeros(int(30 * RATE), dtype=np.int16))  # the loop must not start over within the run
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.concatenate(parts).tobytes())
    return chosen


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("livekit-agents", "livekit", "faster-whisper", "xllamacpp", "torch", "playwright"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    out["livekit-server"] = "1.13.5"
    try:
        out["chromium"] = subprocess.run(["chromium", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        out["chromium"] = "-"
    return out


def device() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())  # fmt: skip
    import os

    return f"{model}, {os.cpu_count()} cores (CPU only: embedded defaults)"


def receiver_stats(inbound: list[dict]) -> dict[str, float | None]:
    """The browser's WebRTC receiver for the agent's track: what its jitter buffer held, and how much audio it
    had to conceal (packets that came late or not at all)."""
    agent = next((i for i in inbound if i.get("isAgent")), None)
    if agent is None:
        return {}
    emitted = agent.get("jitterBufferEmittedCount") or 0
    total = agent.get("totalSamplesReceived") or 0
    return {
        "jitter_buffer_avg_ms": round(agent["jitterBufferDelay"] / emitted * 1000, 1) if emitted else None,
        "interarrival_jitter_ms": round(agent["jitter"] * 1000, 1) if agent.get("jitter") is not None else None,
        "concealed_share": round(agent["concealedSamples"] / total, 4) if total else None,
        "concealment_events": agent.get("concealmentEvents"),
        "packets_lost": agent.get("packetsLost"),
    }


def receiver_series(samples: list[tuple[float, list[dict]]]) -> list[dict[str, float]]:
    """The agent track's jitter buffer between consecutive snapshots: the delay it held and the delay it aimed
    for (ms per emitted sample), so a buffer that grows during the call shows when, not only on average."""
    out, prev = [], None
    for t, inbound in samples:
        agent = next((i for i in inbound if i.get("isAgent")), None)
        if agent is None or agent.get("jitterBufferEmittedCount") is None:
            continue
        if prev is not None:
            emitted = agent["jitterBufferEmittedCount"] - prev["jitterBufferEmittedCount"]
            if emitted > 0:
                row = {"t_s": round(t, 1),
                       "delay_ms": round((agent["jitterBufferDelay"] - prev["jitterBufferDelay"]) / emitted * 1000, 1)}
                for key, name in (("jitterBufferTargetDelay", "target_ms"), ("jitterBufferMinimumDelay", "minimum_ms")):
                    if agent.get(key) is not None and prev.get(key) is not None:
                        row[name] = round((agent[key] - prev[key]) / emitted * 1000, 1)
                out.append(row)
        prev = agent
    return out


def column_summary(rows: list[dict], key: str) -> dict[str, float | None]:
    """n, P50 and P95 (0.1 ms) of one column of per-turn or per-barge-in rows, missing values left out."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return {"n": len(values), **percentiles(values, digits=1)}


def run(
    workdir: Path, *, turns: int, gap_s: float, hangover_ms: float = HANGOVER_MS, text_input: str = "tokens"
) -> dict[str, Any]:
    wav = workdir / "questions.wav"
    chosen = questions_wav(wav, turns, gap_s)
    stack = LocalStack(
        workdir / "stack", LLM_MAX_TOKENS="40", VAD_SILENCE_MS=str(int(hangover_ms)), TTS_TEXT_INPUT=text_input
    )
    stack.start()
    try:
        with BrowserCall(stack.page_url, wav) as call:
            call.join("callbench")
            per_turn_s = 2.5 + gap_s
            start = time.monotonic()
            deadline = start + 20 + turns * per_turn_s * 1.5
            samples: list[tuple[float, list[dict]]] = []
            offsets: list[float] = []
            while time.monotonic() < deadline:
                time.sleep(2.0)
                snap = call.snapshot()
                samples.append((time.monotonic() - start, snap["inbound"]))
                if snap["clockOffsetMs"] is not None:
                    offsets.append(snap["clockOffsetMs"])
                if sum(r["type"] == "turn" for r in snap["log"]) >= turns:
                    break
            time.sleep(3.0)  # the last turn's trace is written once its reply ends or is cut
            snap = call.snapshot()
            call.leave()
            problems = list(call.problems)
    finally:
        stack.stop()
    traces = [r for r in stack.traces() if r["session_id"].startswith("callbench-")]
    heard = [line["text"].lower() for line in snap["transcript"] if line["who"] == "you" and line["final"]]
    recognised = sum(any(word in h for h in heard) for _, word in chosen)
    turn_rows = match_turns(snap["log"], traces, hangover_ms=hangover_ms)
    barge_rows = match_barge_ins(snap["log"], traces, snap.get("cuts", []))
    answered = [t for t in traces if t["outcome"] in ("answered", "interrupted")]

    keys = ("response_ms", "voice_to_voice_ms", "vad_end_lag_ms", "stt_ms", "stt_after_end_ms", "llm_ttft_ms",
            "tts_first_packet_ms", "server_e2e_ms", "publish_to_heard_ms", "overhead_ms", "vad_to_stt_ms",
            "stt_to_llm_ms", "bridge_ms", "tts_first_to_publish_ms", "playout_gap_ms")  # fmt: skip
    report = {
        "benchmark": "callbench",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m lab.callbench " + " ".join(sys.argv[1:]),
        "device": device(),
        "versions": versions(),
        "config": {"turns": turns, "gap_s": gap_s, "vad_hangover_ms": hangover_ms, "llm_max_tokens": 40,
                   "tts_text_input": text_input, "vad_quiet_db": quiet_db(Env(stack.env)),  # the worker's
                   "stt_early_ms": stt_early_ms(Env(stack.env)),
                   "turn_handling": TurnMode.from_env(Env(stack.env)).value},
        "counts": {
            "questions": turns,
            "transcripts": len(heard),  # final user transcripts shown on the page
            "transcripts_recognised": recognised,  # of those, how many hold the question's key word
            "replies_heard": sum(r["type"] == "turn" for r in snap["log"]),
            "traces": len(traces),
            "traces_complete": sum(bool(t["complete"]) for t in answered),
            "traces_answered": len(answered),
            "errors": sum(len(t.get("errors", [])) for t in traces) + len(problems),
            "barge_ins_heard": sum(r["type"] == "barge_in" for r in snap["log"]),
            "barge_ins_ignored": snap["summary"]["ignoredBargeIns"],
        },
        "turns": {k: column_summary(turn_rows, k) for k in keys},
        "barge_in": {k: column_summary(barge_rows, k) for k in ("onset_to_decision_ms", "decision_to_silence_ms",
                                                          "decision_to_cut_ms", "cut_to_notice_ms",
                                                          "cut_to_silence_ms", "onset_to_silence_ms")},  # fmt: skip
        "receiver": receiver_stats(snap["inbound"]),
        "receiver_series": receiver_series(samples),
        "targets": TARGETS,
        "turn_rows": turn_rows,
        "barge_in_rows": barge_rows,
        # how far the page's AudioContext clock fell behind the system clock during the call (its render thread
        # starved): the page's meters then hear both tracks up to that much late (docs/agent.md says how much)
        "audio_clock_lost_ms": round(offsets[-1] - offsets[0], 1) if len(offsets) > 1 else None,
        "page_problems": problems,
        "heard": heard,
    }
    o, b = report["turns"]["overhead_ms"]["p95"], report["barge_in"]["decision_to_silence_ms"]["p95"]
    report["verdict"] = {
        "overhead_p95_ms": "pass" if o is not None and o <= TARGETS["overhead_p95_ms"] else "MISS",
        "barge_in_p95_ms": "pass" if b is not None and b <= TARGETS["barge_in_p95_ms"] else "MISS",
    }
    return report


def vad_line(config: dict[str, Any]) -> str:
    if "vad_quiet_db" not in config:  # runs before 2026-11-27 evening: Silero alone, not recorded
        gate_text = "not recorded"
    else:
        gate = config["vad_quiet_db"]
        gate_text = "off (Silero alone)" if gate is None else f"{gate:g} dBFS"
    line = f"Agent VAD: hangover {config['vad_hangover_ms']:g} ms, quiet gate {gate_text} (agent/vad.py)."
    if "stt_early_ms" in config:  # recorded since the early transcriber (2026-11-27, night)
        early = config["stt_early_ms"]
        when = "at the end of the turn" if early is None else f"at a pause of {early} ms"
        line += f" STT sent {when} (agent/turn/early_stt.py)."
    if "turn_handling" in config:  # recorded since the turn detector (2026-11-28); runs before it were `vad`
        line += f" Turn handling: {config['turn_handling']} (TURN_HANDLING)."
    return line


def markdown(report: dict[str, Any]) -> str:
    c = report["counts"]
    lines = [
        f"# Call benchmark: {report['device']}, {report['date'][:10]}",
        "",
        f"`{report['command']}` (livekit-server {report['versions']['livekit-server']}, livekit-agents "
        f"{report['versions']['livekit-agents']}, {report['versions']['chromium']})",
        "",
        f"{c['questions']} questions in one browser call: {c['transcripts']} transcripts "
        f"({c['transcripts_recognised']} with the question's key word), "
        f"{c['replies_heard']} replies heard, {c['traces_complete']}/{c['traces_answered']} answered turns traced "
        f"with all nine points, {c['errors']} errors; {c['barge_ins_heard']} barge-ins heard, "
        f"{c['barge_ins_ignored']} ignored.",
        "",
        vad_line(report["config"]),
        "",
        "| per turn (ms) | n | P50 | P95 |",
        "|---|---|---|---|",
    ]
    for key, row in report["turns"].items():
        lines.append(f"| {key} | {row['n']} | {row['p50']} | {row['p95']} |")
    lines += ["", "| barge-in (ms) | n | P50 | P95 |", "|---|---|---|---|"]
    r = report.get("receiver", {})
    receiver_line = (
        f"Browser receiver (agent track): jitter buffer {r.get('jitter_buffer_avg_ms')} ms on average, interarrival "
        f"jitter {r.get('interarrival_jitter_ms')} ms, {r.get('concealed_share')} of samples concealed "
        f"({r.get('concealment_events')} events), {r.get('packets_lost')} packets lost. The page's audio clock "
        f"fell {report.get('audio_clock_lost_ms')} ms behind the system clock during the call."
    )
    for key, row in report["barge_in"].items():
        lines.append(f"| {key} | {row['n']} | {row['p50']} | {row['p95']} |")
    v = report["verdict"]
    lines += [
        "",
        receiver_line,
        "",
        f"Targets: transport + framework overhead P95 <= {report['targets']['overhead_p95_ms']:.0f} ms: "
        f"{v['overhead_p95_ms']}; barge-in decision -> silence at the browser P95 <= "
        f"{report['targets']['barge_in_p95_ms']:.0f} ms: {v['barge_in_p95_ms']}.",
        "",
        "response = browser end of speech (its energy VAD + the agent's hangover) -> first agent audio heard; "
        "overhead = response - (STT after the turn's end + LLM first token + TTS first packet); stt_after_end = "
        "the part of the STT's time (stt) after the agent's end of turn, less when it was sent at a pause; "
        "vad_end_lag = the agent's VAD end of "
        "turn after the browser's; publish_to_heard = first frame into WebRTC -> heard at the browser.",
    ]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "callbench.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "callbench.md").write_text(markdown(report))
