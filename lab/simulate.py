"""`python -m agent simulate`: a complete call with no LiveKit server, measured end to end.

The call is the production `agent.voice.Call` (AgentSession, Silero VAD, OmniSTT, LLM plugin, QwenTTS,
RtcAudioOutput with a real `rtc.AudioSource`, DuplexController, TraceCollector) with three stand-ins at
the edges: `WavMicrophone` plays espeak-ng speech in real time as the user's microphone, the output's
`frame_observer` timestamps every frame captured into the AudioSource, and `FakeOpenAIServer` (real
HTTP + SSE on 127.0.0.1) plays vLLM with scripted transcripts, replies and latencies. The TTS is the
real engine (a tiny random checkpoint on CPU unless `--model-dir` / `--tts-url` say otherwise).

Reusable harness (lab/stress.py builds on it): `await run_call(SimOptions(...), backend=..., vad=...)`
returns a `CallResult` with per-turn `TurnResult`s, the frame log and the trace records;
`summarize(result)` computes summary.json:
  turns, errors, trace_complete (fraction of turns with all nine points, non-decreasing),
  frame_ms {min,max}, tts_first_to_publish_ms {p50,p95}, cancel_to_silence_ms {p50,p95},
  stale_frames_after_cancel (frames of an interrupted reply captured after its audio_silenced, counted
  from the frame log, independently of the output's gate), e2e_ms {p50,p95}, llm_first_token_to_publish_ms
  {p50,p95} (LLM first token -> first agent frame published), plus context fields.
`--tts-text-input segments|tokens` picks the TTS text path (agent/tts.py) with the same scripted LLM timings, so
the two can be compared; `--token-interval-ms` / `--llm-ttft-ms` set those timings.
With `barge_in`, the user's next utterance starts `barge_in_delay_s` after the agent's first frame on
every other turn, so about half the replies are cut by real VAD-detected speech.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.engine_client import TTSBackend
from agent.output import FrameRecord
from agent.voice import Call
from common.env import load_dotenv
from common.percentiles import percentiles
from common.process import tune_process
from lab.fake_openai import FakeOpenAIServer, Script
from lab.sim_microphone import WavMicrophone, espeak_pcm
from tts_engine.errors import CheckpointError, ConfigError

logger = logging.getLogger("lab.simulate")


# What the simulated user says (no inner pauses, so the VAD keeps each one whole) and what the LLM answers.
USER_LINES = [
    "hello can you hear me",
    "what is the weather like today",
    "tell me something about the moon",
    "how do I make a cup of tea",
]
SHORT_REPLIES = [
    "Yes, I can hear you. How can I help?",
    "It is sunny and mild today.",
    "The moon is about four hundred thousand kilometres away.",
    "Boil water, then steep the tea for three minutes.",
]
LONG_REPLIES = [
    "Yes, I can hear you very well. I am happy to help you with anything you need today, "
    "so please tell me what is on your mind and we will work through it together.",
    "It is sunny and mild today, with a light breeze in the afternoon and a clear sky "
    "in the evening, so it is a good day for a long walk in the park.",
]


# -- harness -----------------------------------------------------------------------------------
@dataclass
class SimOptions:
    turns: int = 3
    barge_in: bool = False
    barge_in_delay_s: float = 0.3  # after the reply's first frame
    gap_s: float = 0.3  # user waits this long after the agent went quiet
    turn_timeout_s: float = 60.0
    stt_latency_s: float = 0.03
    llm_ttft_s: float = 0.03
    token_interval_s: float = 0.005
    user_lines: list[str] = field(default_factory=lambda: list(USER_LINES))
    short_replies: list[str] = field(default_factory=lambda: list(SHORT_REPLIES))
    long_replies: list[str] = field(default_factory=lambda: list(LONG_REPLIES))
    speech_cache: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "agent-sim-speech")
    config: AgentConfig | None = None  # None: AgentConfig.from_env() with the endpoints replaced
    script_faults: dict[str, Any] = field(default_factory=dict)  # e.g. {"llm_fault": "500"} (stress tests)
    # called before each user turn (0-based index) with the fake server: change faults/latencies mid-call
    on_turn_start: Callable[[int, FakeOpenAIServer], None] | None = None
    stt_base_url: str | None = None  # override (e.g. a dead port) instead of the fake server
    llm_base_url: str | None = None


@dataclass
class TurnResult:
    index: int
    user_text: str
    barge_in: bool
    trace: dict[str, Any] | None
    frames: int
    errors: list[str]


@dataclass
class CallResult:
    session_id: str
    turns: list[TurnResult]
    traces: list[dict[str, Any]]
    frames: list[FrameRecord]
    interruptions: list[dict[str, Any]]  # reply_id, cancel_to_silence_ms, stale_frames_after_cancel
    errors: list[str]
    illegal_transitions: int
    final_state: str
    wall_s: float


async def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.005)


def describe(call: Call) -> str:
    """Where a call stands, for a harness timeout: enough to tell a stuck state from a slow host."""
    ctl, session, turn = call.controller, call.session, call.collector.current
    speech = session.current_speech
    parts = [
        f"controller {ctl.state.value}, reply {'open' if ctl.reply is not None else 'none'}",
        f"livekit {session.agent_state}, speech {'none' if speech is None else speech.id}",
        f"apology pending {call.apology.pending}, queued {call.output.source.queued_duration * 1000:.0f} ms",
    ]
    if turn is not None:
        parts.append(f"turn {turn.turn_id} {turn.outcome}: points {sorted(turn.points)}, errors {turn.errors}")
    return "; ".join(parts)


def _reply_plan(opts: SimOptions) -> tuple[list[str], list[str], list[bool]]:
    """Per turn: what the user says, what the LLM answers, and whether the user barges in on it."""
    lines, replies, barge = [], [], []
    for i in range(opts.turns):
        cut = opts.barge_in and i % 2 == 0 and i < opts.turns - 1
        lines.append(opts.user_lines[i % len(opts.user_lines)])
        pool = opts.long_replies if cut else opts.short_replies
        replies.append(pool[i % len(pool)])
        barge.append(cut)
    return lines, replies, barge


async def run_call(opts: SimOptions, *, backend: TTSBackend, vad: Any) -> CallResult:
    """Run one simulated call of `opts.turns` user turns against the real pipeline."""
    lines, replies, barge = _reply_plan(opts)
    # unique transcripts so the fake LLM can pair each turn's transcript with its scripted reply
    transcripts = [f"{line} (turn {i + 1})" for i, line in enumerate(lines)]
    script = Script(
        transcripts=transcripts,
        replies=replies,
        stt_latency_s=opts.stt_latency_s,
        llm_ttft_s=opts.llm_ttft_s,
        token_interval_s=opts.token_interval_s,
    )
    script.update(opts.script_faults)
    speech = {line: espeak_pcm(line, opts.speech_cache) for line in set(lines)}
    frames: list[FrameRecord] = []
    t_start = time.perf_counter()
    async with FakeOpenAIServer(script) as server:
        base = opts.config or AgentConfig.from_env()
        cfg = dataclasses.replace(
            base,
            stt_base_url=opts.stt_base_url or server.base_url,
            llm_base_url=opts.llm_base_url or server.base_url,
        )
        call = Call(cfg, vad=vad, backend=backend, session_id=f"sim-{uuid.uuid4().hex[:6]}",
                    traces_dir=None, frame_observer=frames.append, aec_warmup_s=0.0)
        mic = WavMicrophone()
        await call.start(audio_input=mic)
        results: list[TurnResult] = []
        errors: list[str] = []
        try:
            for i in range(opts.turns):
                if i == 0 or not barge[i - 1]:
                    try:
                        await _until(lambda: call.controller.reply is None and call.output.source.queued_duration == 0,
                                     opts.turn_timeout_s, "the agent to go quiet")
                    except TimeoutError as exc:
                        errors.append(f"turn {i + 1}: {exc}")
                    await asyncio.sleep(opts.gap_s)
                if opts.on_turn_start is not None:
                    opts.on_turn_start(i, server)
                await mic.play(speech[lines[i]])
                try:
                    await _until(lambda n=i + 1: call.collector._count >= n, opts.turn_timeout_s,
                                 f"turn {i + 1} to end (VAD)")
                    turn = call.collector.current
                    assert turn is not None
                    if barge[i]:
                        await _until(lambda t=turn: t.has("first_frame_published") or t.finished,
                                     opts.turn_timeout_s, f"turn {i + 1}'s first agent frame")
                        await asyncio.sleep(opts.barge_in_delay_s)
                    else:
                        await _until(lambda t=turn: t.finished, opts.turn_timeout_s, f"turn {i + 1}'s reply to end")
                except TimeoutError as exc:
                    errors.append(f"turn {i + 1}: {exc} [{describe(call)}]")
            await _until(lambda: call.collector._count >= opts.turns, opts.turn_timeout_s, "the last turn")
            await _until(lambda: call.controller.reply is None and call.output.source.queued_duration == 0,
                         opts.turn_timeout_s, "the last reply to finish")
        except TimeoutError as exc:
            errors.append(f"{exc} [{describe(call)}]")
        finally:
            mic.close()
            await asyncio.sleep(0.2)  # late frames of a cut reply would land now: they are what we count
            await call.aclose()
    traces = list(call.collector.records)
    by_index = {rec["turn_index"]: rec for rec in traces}
    turn_of_reply = {rec["reply_id"]: rec["turn_index"] for rec in traces if rec["reply_id"]}
    reply_frames: dict[str, int] = {}
    for fr in frames:
        reply_frames[fr.reply_id] = reply_frames.get(fr.reply_id, 0) + 1
    for i in range(opts.turns):
        rec = by_index.get(i + 1)
        results.append(
            TurnResult(
                index=i + 1,
                user_text=lines[i],
                barge_in=barge[i],
                trace=rec,
                frames=sum(n for rid, n in reply_frames.items() if turn_of_reply.get(rid) == i + 1),
                errors=[] if rec is None else list(rec["errors"]),
            )
        )
    interruptions = []
    for reply, irq in call.controller.interruptions:
        if irq.audio_silenced is None or irq.source == "session_closed":
            continue  # closing the call is not a barge-in
        stale = sum(1 for fr in frames if fr.reply_id == reply.reply_id and fr.t_start > irq.audio_silenced)
        interruptions.append(
            {
                "reply_id": reply.reply_id,
                "turn_id": reply.turn_id,
                "source": irq.source,
                "cancel_to_silence_ms": (irq.audio_silenced - irq.interrupt_detected) * 1000.0,
                "stale_frames_after_cancel": stale,
                "frames_before_cut": irq.frames_published,
            }
        )
    return CallResult(
        session_id=call.session_id,
        turns=results,
        traces=traces,
        frames=frames,
        interruptions=interruptions,
        errors=errors + call.errors,
        illegal_transitions=call.controller.illegal_transitions,
        final_state=call.controller.state.value,
        wall_s=time.perf_counter() - t_start,
    )


def summarize(result: CallResult, *, expected_turns: int) -> dict[str, Any]:
    traces = result.traces
    turn_errors = sum(len(t.errors) for t in result.turns)
    missing = sum(1 for t in result.turns if t.trace is None)
    complete = sum(1 for t in result.turns if t.trace is not None and t.trace["complete"])
    durations = [fr.duration_ms for fr in result.frames]
    return {
        "turns": expected_turns,
        "errors": turn_errors + len(result.errors) + missing,
        "trace_complete": round(complete / expected_turns, 4) if expected_turns else 0.0,
        "frame_ms": {
            "min": round(min(durations), 3) if durations else None,
            "max": round(max(durations), 3) if durations else None,
        },
        "tts_first_to_publish_ms": percentiles(
            [t["segments_ms"]["tts_first_to_publish"] for t in traces if "tts_first_to_publish" in t["segments_ms"]]
        ),
        "cancel_to_silence_ms": percentiles([i["cancel_to_silence_ms"] for i in result.interruptions]),
        "stale_frames_after_cancel": sum(i["stale_frames_after_cancel"] for i in result.interruptions),
        "e2e_ms": percentiles([t["segments_ms"]["e2e"] for t in traces if "e2e" in t["segments_ms"]]),
        "llm_first_token_to_publish_ms": percentiles([
            (t["points"]["first_frame_published"] - t["points"]["llm_first_token"]) * 1000.0 for t in traces
            if "first_frame_published" in t["points"] and "llm_first_token" in t["points"]
        ]),
        "interruptions": len(result.interruptions),
        "frames_published": len(result.frames),
        "illegal_transitions": result.illegal_transitions,
        "error_lines": result.errors + [e for t in result.turns for e in t.errors],
        "session_id": result.session_id,
        "wall_s": round(result.wall_s, 2),
    }


# -- engine + VAD for the command ----------------------------------------------------------------
def load_backend(args: argparse.Namespace, out_dir: Path) -> tuple[TTSBackend, Any]:
    """(backend, engine or None). Tiny random checkpoint unless a model dir or TTS URL is given."""
    from agent.engine_client import LocalBackend, RemoteBackend
    from tts_engine.config import EngineConfig

    if args.tts_url:
        return RemoteBackend(args.tts_url, max_frames_per_segment=args.max_frames_per_segment or None), None
    from tts_engine import Engine

    cfg = EngineConfig.from_env()
    model_dir = args.model_dir or cfg.model_dir
    if not model_dir:
        from tts_engine.model.factory import make_checkpoint

        model_dir = str(out_dir / "tiny_checkpoint")
        if not (Path(model_dir) / "model.safetensors").exists():
            print(f"[simulate] building a tiny random checkpoint in {model_dir}", flush=True)
            make_checkpoint("tiny", model_dir, seed=0)
    engine = Engine.load(model_dir, cfg)
    return LocalBackend(engine, max_frames_per_segment=args.max_frames_per_segment or None), engine


def load_vad(cfg: AgentConfig) -> Any:
    from agent import vad  # imports LiveKit's Silero plugin: only when a call is simulated

    return vad.load_vad(cfg.vad_silence_ms, cfg.vad_quiet_db)  # as the worker loads it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=3, help="user turns in the call (default 3)")
    parser.add_argument("--barge-in", action="store_true", help="interrupt every other reply by speaking")
    parser.add_argument("--out", type=Path, required=True, help="output directory (traces.jsonl, summary.json)")
    parser.add_argument("--model-dir", default="", help="TTS checkpoint (default: TTS_DEEP_STREAM_MODEL_DIR or tiny)")
    parser.add_argument("--tts-url", default="", help="use a running `python -m tts_engine serve` instead")
    parser.add_argument(
        "--max-frames-per-segment", type=int, default=6,
        help="cap codec frames per TTS segment (random weights rarely emit EOS); 0 = no cap",
    )
    parser.add_argument("--barge-in-delay-ms", type=float, default=300.0)
    parser.add_argument("--tts-text-input", choices=("segments", "tokens"), default=None,
                        help="TTS text path (default: TTS_TEXT_INPUT, else tokens)")
    parser.add_argument("--token-interval-ms", type=float, default=5.0, help="scripted LLM time per token (5)")
    parser.add_argument("--llm-ttft-ms", type=float, default=30.0, help="scripted LLM time to first token (30)")


def run(args: argparse.Namespace) -> int:
    if args.turns < 1 or args.turns > 1000:
        print(f"--turns {args.turns} is out of range (allowed: 1..1000)", file=sys.stderr)
        return 2
    if args.max_frames_per_segment < 0:
        print(f"--max-frames-per-segment {args.max_frames_per_segment} must be >= 0", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    base = AgentConfig.from_env()
    turn = dataclasses.replace(base.turn, resume_false_interruption=False)
    cfg = dataclasses.replace(base, aec_warmup_s=0.0, turn=turn)
    if args.tts_text_input:
        cfg = dataclasses.replace(cfg, tts_text_input=args.tts_text_input)
    try:
        backend, engine = load_backend(args, out)
    except CheckpointError as exc:  # the checkpoint doctor's one line (Engine.load runs it first), no traceback
        print(f"[simulate] {exc}", file=sys.stderr)
        return 2
    opts = SimOptions(turns=args.turns, barge_in=args.barge_in, barge_in_delay_s=args.barge_in_delay_ms / 1000,
                      config=cfg, speech_cache=out / "speech", token_interval_s=args.token_interval_ms / 1000,
                      llm_ttft_s=args.llm_ttft_ms / 1000)
    try:
        vad = load_vad(cfg)
        tune_process()
        result = asyncio.run(run_call(opts, backend=backend, vad=vad))
    finally:
        if engine is not None:
            engine.close()
    summary = summarize(result, expected_turns=args.turns)
    summary["tts_text_input"] = cfg.tts_text_input
    summary["llm_timing_ms"] = {"ttft": args.llm_ttft_ms, "per_token": args.token_interval_ms}
    with (out / "traces.jsonl").open("w", encoding="utf-8") as fh:
        for rec in result.traces:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with (out / "turns.jsonl").open("w", encoding="utf-8") as fh:
        for turn in result.turns:
            fh.write(json.dumps(dataclasses.asdict(turn), ensure_ascii=False) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "error_lines"}, indent=2))
    for line in summary["error_lines"]:
        print(f"[simulate] error: {line}", file=sys.stderr)
    return 0 if summary["errors"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m agent simulate ...` (or `python -m lab.simulate ...`): the settings of .env, then one call."""
    load_dotenv(os.environ.get("ENV_FILE") or ".env")
    parser = argparse.ArgumentParser(prog="python -m agent simulate",
                                     description="a complete call without LiveKit: espeak-ng speech, fake vLLM, "
                                                 "the real engine (traces + summary)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        from agent.trace_otel import install_from_env

        install_from_env()  # the simulated call's spans too, when OTEL_EXPORTER_OTLP_ENDPOINT is set
        return run(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
