"""Barge-in at precise instants of a reply: `python -m lab.stress --rounds N --instants --out DIR`.

The random mode (lab/stress.py) cuts a reply by real VAD-detected speech somewhere after its first
frame; VAD needs ~0.5 s of speech, so it cannot reach the first milliseconds of a reply. This mode cuts
each reply with the public `AgentSession.interrupt()` at an exact instant: inside the callback that
reports a milestone of the reply (0 ticks) or 1-2 event-loop iterations later. Milestones, cycled over
the rounds together with the tick offset: the speech created (`speech_created`; `SpeechHandle.interrupt()`
as well, since a speech not yet queued is not the session's current one), the LLM request, the LLM's
first token, the first TextBridge segment reaching the TTS, the engine's first packet, and the 1st, 2nd,
4th and 8th frame captured into the AudioSource. Milestones are the trace points as the agent marks them
(`TraceCollector.on_mark`) and the output's frame observer, so the cut lands inside that await of the reply.

The call is the production `agent.voice.Call` as in the random mode (espeak-ng speech, Silero VAD, the
fake vLLM over HTTP, the real engine). Per round: did the speech get interrupted, how long until the
controller and LiveKit both listened again with no reply open (more than --turn-timeout-s = stuck),
frames of the cut reply captured after the cut (stale), and whether the turn's trace tells the truth: "interrupted",
or "answered" when the cut only threw away the answer prepared before the commit (`ours`: the trace's `discarded`,
no interruption; the framework then answers the turn with a new speech).
Writes DIR/instants.json (summary, `targets`, `pass`) and DIR/instants.jsonl (one record per round).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.output import FrameRecord
from agent.voice import Call
from common.percentiles import percentiles
from lab.fake_openai import FakeOpenAIServer, Script
from lab.sim_microphone import WavMicrophone, espeak_pcm

logger = logging.getLogger("lab.stress_instants")

INSTANTS = (
    ("speech_created", 1),
    ("llm_request", 1),
    ("llm_first_token", 1),
    ("tts_first_text", 1),
    ("tts_first_packet", 1),
    ("frame", 1),
    ("frame", 2),
    ("frame", 4),
    ("frame", 8),
)
TICKS = (0, 1, 2)
LINES = ["hello there", "tell me more", "wait a second please", "hello can you hear me"]
REPLY = ("Let me tell you about it in some detail, because there is quite a lot to say. First, the morning "
         "was quiet and cool, then the wind came up from the west and the clouds rolled in.")


@dataclass
class Round:
    index: int
    milestone: str
    nth: int
    ticks: int
    fired: bool = False
    interrupted: bool = False  # the reply's SpeechHandle says so
    settle_ms: float | None = None  # the cut -> controller and LiveKit listening, no reply open
    stuck: str | None = None
    stale_frames: int = 0  # frames of the cut reply captured after the cut
    frames_before_cut: int = 0
    outcome: str | None = None
    early_answer: bool = False  # the cut hit the answer prepared before the commit: thrown away, not an interruption
    errors: list[str] = field(default_factory=list)

    @property
    def truthful(self) -> bool:
        """The turn's trace tells what the caller got: `interrupted`, or, when the cut only threw away the early
        answer (TURN_HANDLING=ours prepares one before the commit), `answered` by the speech made after it."""
        return self.outcome == "interrupted" or (self.early_answer and self.outcome == "answered")


async def _until(cond: Any, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


async def run_instants(rounds: int, cfg: Any, backend: Any, vad: Any, *, speech_cache: Path,
                       turn_timeout_s: float = 20.0, progress: Any = None) -> tuple[list[Round], dict[str, Any]]:
    speech = {line: espeak_pcm(line, speech_cache) for line in LINES}
    script = Script(transcripts=[f"{LINES[i % len(LINES)]} ({i})" for i in range(rounds)], replies=[REPLY],
                    stt_latency_s=0.02, llm_ttft_s=0.02, token_interval_s=0.005)
    frames: list[FrameRecord] = []
    records: list[Round] = []
    handles: list[Any] = []
    armed: dict[str, Any] = {}
    before = set(asyncio.all_tasks())
    async with FakeOpenAIServer(script) as server:
        cfg = dataclasses.replace(cfg, stt_base_url=server.base_url, llm_base_url=server.base_url)
        call = Call(cfg, vad=vad, backend=backend, session_id="instants", traces_dir=None, aec_warmup_s=0.0)
        session, ctl = call.session, call.controller

        def fire(rec: Round) -> None:
            rec.fired = True
            armed["t_fire"] = time.perf_counter()
            session.interrupt()
            handle = armed.get("handle")
            if handle is not None and not handle.interrupted and not handle.done():
                handle.interrupt()  # created, not queued yet: the session's interrupt() cannot see it

        def milestone(name: str) -> None:
            rec = armed.get("round")
            if rec is None or name != rec.milestone:
                return
            armed["count"] = armed.get("count", 0) + 1
            if armed["count"] != rec.nth:
                return
            armed.pop("round")

            def later(left: int) -> None:
                fire(rec) if left == 0 else asyncio.get_running_loop().call_soon(later, left - 1)

            later(rec.ticks)

        def on_speech(ev: Any) -> None:
            if armed.get("round") is not None and armed.get("handle") is None:
                armed["handle"] = ev.speech_handle
                handles.append(ev.speech_handle)
            milestone("speech_created")

        def on_frame(rec: FrameRecord) -> None:
            frames.append(rec)
            milestone("frame")

        session.on("speech_created", on_speech)
        call.collector.on_mark = lambda point, _t: milestone(point)
        call.output.frame_observer = on_frame

        def idle() -> bool:
            return (ctl.reply is None and ctl.state.value == "listening" and session.agent_state == "listening"
                    and session.current_speech is None and call.output.source.queued_duration == 0)

        mic = WavMicrophone()
        await call.start(audio_input=mic)
        try:
            for i in range(rounds):
                milestone_name, nth = INSTANTS[i % len(INSTANTS)]
                rec = Round(i + 1, milestone_name, nth, TICKS[(i // len(INSTANTS)) % len(TICKS)])
                records.append(rec)
                if not await _until(idle, turn_timeout_s):
                    rec.stuck = f"not idle before round {i + 1} (controller {ctl.state.value}, " \
                                f"livekit {session.agent_state}, reply {ctl.reply is not None})"
                await asyncio.sleep(0.1)
                armed.clear()
                armed["round"] = rec
                await mic.play(speech[LINES[i % len(LINES)]])
                if not await _until(lambda n=i + 1: call.collector._count >= n, turn_timeout_s):
                    rec.stuck = rec.stuck or "the user turn never opened (no VAD end of speech)"
                    continue
                await _until(lambda r=rec: r.fired or (armed.get("handle") is not None and armed["handle"].done()),
                             turn_timeout_s)
                t_fire = armed.get("t_fire")
                if not await _until(idle, turn_timeout_s):
                    rec.stuck = rec.stuck or f"not back to listening {turn_timeout_s:.0f} s after the cut " \
                                             f"(controller {ctl.state.value}, livekit {session.agent_state})"
                elif t_fire is not None:
                    rec.settle_ms = round((time.perf_counter() - t_fire) * 1000.0, 1)
                handle = armed.get("handle")
                rec.interrupted = bool(handle is not None and handle.interrupted)
                reply = ctl.replies.reply_by_key(handle.id) if handle is not None else None
                if reply is not None and t_fire is not None:
                    own = [f for f in frames if f.reply_id == reply.reply_id]
                    rec.frames_before_cut = sum(1 for f in own if f.t_start <= t_fire)
                    rec.stale_frames = sum(1 for f in own if f.t_start > t_fire)
                    if reply.interruption is not None and reply.interruption.audio_silenced is not None:
                        rec.stale_frames += sum(1 for f in own if f.t_start > reply.interruption.audio_silenced
                                                and f.t_start <= t_fire)
                if progress is not None and (i + 1) % 10 == 0:
                    progress(f"round {i + 1}: {rec.milestone}#{rec.nth}+{rec.ticks} ticks, settle {rec.settle_ms} ms")
        finally:
            mic.close()
            await asyncio.sleep(0.2)
            await call.aclose()
    by_index = {r["turn_index"]: r for r in call.collector.records}
    for rec in records:
        trace = by_index.get(rec.index)
        if trace is not None:
            rec.outcome = trace["outcome"]
            rec.early_answer = bool(trace.get("discarded")) and not trace.get("interruptions")
            rec.errors = list(trace["errors"])
    await asyncio.sleep(0.3)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done()]
    extra = {"leaked_tasks": len(leaked), "errors": list(call.errors),
             "illegal_transitions": ctl.illegal_transitions}
    return records, extra


def summarize(records: list[Round], extra: dict[str, Any], engine_streams: int, wall_s: float) -> dict[str, Any]:
    cut = [r for r in records if r.interrupted]
    lies = [r.index for r in cut if not r.truthful]
    settle = [r.settle_ms for r in records if r.settle_ms is not None]
    coverage: dict[str, dict[str, int]] = {}
    for r in records:
        key = f"{r.milestone}#{r.nth}"
        cell = coverage.setdefault(key, {"rounds": 0, "interrupted": 0, "zero_ticks": 0})
        cell["rounds"] += 1
        cell["interrupted"] += r.interrupted
        cell["zero_ticks"] += r.ticks == 0 and r.interrupted
    summary: dict[str, Any] = {
        "mode": "instants",
        "rounds": len(records),
        "rounds_fired": sum(r.fired for r in records),
        "rounds_interrupted": len(cut),
        "coverage": coverage,
        "stuck_states": sum(r.stuck is not None for r in records),
        "stale_frames_after_cancel": sum(r.stale_frames for r in records),
        "untruthful_outcomes": len(lies),
        "early_answers_cut": sum(r.early_answer for r in cut),  # thrown away before the commit, the turn answered
        "turn_errors": sum(len(r.errors) for r in records) + len(extra["errors"]),
        "leaked_tasks": extra["leaked_tasks"],
        "illegal_transitions": extra["illegal_transitions"],
        "engine_slots_in_use_at_end": engine_streams,
        "settle_ms": {**percentiles(settle), "max": max(settle) if settle else None},
        "wall_s": round(wall_s, 1),
        "stuck": [f"round {r.index}: {r.stuck}" for r in records if r.stuck][:50],
        "untruthful": lies[:50],
    }
    gates = {k: summary[k] == 0 for k in ("stuck_states", "stale_frames_after_cancel", "untruthful_outcomes",
                                           "turn_errors", "leaked_tasks", "engine_slots_in_use_at_end")}
    gates["every_instant_interrupted"] = all(c["interrupted"] > 0 for c in coverage.values())
    summary["targets"] = gates
    summary["pass"] = all(gates.values())
    return summary


def write(out: Path, records: list[Round], summary: dict[str, Any]) -> None:
    (out / "instants.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with (out / "instants.jsonl").open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(dataclasses.asdict(rec)) + "\n")


def main_instants(args: Any, cfg: Any, out: Path) -> int:
    """`python -m lab.stress --rounds N --instants` (argument checks done by lab.stress)."""
    from common.process import tune_process
    from lab.process_probes import ErrorLog
    from lab.simulate import load_backend, load_vad

    backend, engine = load_backend(args, out)
    tune_process()
    error_log = ErrorLog()
    logging.getLogger().addHandler(error_log)
    t0 = time.perf_counter()
    try:
        vad = load_vad(cfg)
        records, extra = asyncio.run(run_instants(
            args.rounds, cfg, backend, vad, speech_cache=out / "speech", turn_timeout_s=args.turn_timeout_s,
            progress=lambda text: print(f"[instants] {text}", flush=True)))
        streams = int(engine.active_streams()) if engine is not None else int(backend.active_streams)
    finally:
        logging.getLogger().removeHandler(error_log)
        if engine is not None:
            engine.close()
    summary = summarize(records, extra, streams, time.perf_counter() - t0)
    summary["error_log_lines"] = len(error_log.lines)
    summary["error_log"] = error_log.lines[:50]
    summary["targets"]["error_log_lines"] = not error_log.lines
    summary["pass"] = all(summary["targets"].values())
    write(out, records, summary)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("error_log", "stuck", "untruthful")}, indent=2))
    return 0 if summary["pass"] else 1
