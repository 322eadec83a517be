"""Barge-in stress and soak runs on the simulated call: `python -m lab.stress --rounds N | --turns N --out DIR`.

Contract:
- The call is the production `agent.voice.Call` driven by the simulator's pieces (lab/simulate.py):
  espeak-ng speech played in real time as the microphone, Silero VAD, the fake OpenAI-compatible server
  (real HTTP) as STT and LLM, the real TTS engine (tiny random checkpoint on CPU unless --model-dir /
  --tts-url), frames timestamped as they are captured into the `rtc.AudioSource`.
- `--rounds N` (stress): N barge-in rounds chained in one call: the user speaks, and at a random point of
  the agent's reply (uniform in [--min-delay-ms, --max-delay-ms] after its first published frame) starts
  the next utterance, which the VAD detects and which interrupts the reply; the last utterance is answered
  in full. Per round: cancel→silence (the DuplexController's `audio_silenced - interrupt_detected`), the
  last frame of the cut reply relative to the interrupt, stale frames (frames of the cut reply captured
  after `audio_silenced`, counted from the frame log, not from the output's own counter).
- `--turns N` (soak): N answered turns (every --barge-every-th one interrupted), split into calls of
  --turns-per-call turns in one process with one engine, as a worker lives; RSS slope per turn, P95 drift
  of e2e and tts_first→publish between the first and last hundred turns.
- Both report: errors (call errors, trace errors, ERROR log records, harness timeouts), stuck states (a
  wait that timed out: no VAD turn, no first frame, not back to quiet; or a call not LISTENING at its end),
  illegal transitions, asyncio tasks left after each call closed (vs. the tasks before it), engine slots
  still in use after the calls, process RSS and thread count at start and end.
- Writes DIR/stress.json or DIR/soak.json (the summary, with `targets` and `pass`), DIR/turns.jsonl (one
  record per user turn), DIR/traces.jsonl and DIR/stress.png / DIR/soak.png. Exit status 0 when every
  target passes, 1 otherwise, 2 for bad arguments.
- Harness hygiene: the fake server's request log is cleared every turn (it keeps whole request bodies,
  base64 WAVs included, which would otherwise count as the agent's memory).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.output import FrameRecord
from agent.voice import Call
from common.cpu import rss_mb
from common.process import release_free_memory, tune_process
from lab.fake_openai import FakeOpenAIServer, Script
from lab.process_probes import ErrorLog, rss_parts_mb, task_census
from lab.sim_microphone import WavMicrophone, espeak_pcm
from lab.simulate import load_backend, load_vad
from lab.stress_report import plot, summarize

logger = logging.getLogger("lab.stress")

# Short utterances keep each round short; each is long enough (> 0.5 s of speech) to count as a barge-in.
USER_LINES = ["hello there", "tell me more", "wait a second please", "hello can you hear me"]
SHORT_REPLY = "Sure, happy to help."
LONG_REPLY = (
    "Let me tell you about it in some detail, because there is quite a lot to say. First, the morning was "
    "quiet and cool. Then the wind came up from the west, the clouds rolled in over the hills, and by noon "
    "it was raining steadily across the whole valley, which nobody had expected at all."
)


@dataclass
class StressOptions:
    mode: str  # "stress" | "soak"
    count: int  # rounds (stress) or turns (soak)
    seed: int = 1
    min_delay_s: float = 0.0
    max_delay_s: float = 1.5
    barge_every: int = 0  # soak: interrupt every Nth reply (0 = never)
    turns_per_call: int = 0  # 0 = everything in one call
    gap_s: float = 0.15  # user waits this long after the agent went quiet
    turn_timeout_s: float = 20.0
    stt_latency_s: float = 0.02
    llm_ttft_s: float = 0.02
    token_interval_s: float = 0.005
    speech_cache: Path = field(default_factory=lambda: Path("/tmp/agent-sim-speech"))
    config: AgentConfig | None = None
    progress: Callable[[str], None] | None = None
    partial_path: Path | None = None  # after each call, the summary so far is written here


@dataclass
class TurnRecord:
    call: int
    index: int  # 1.. over the whole run
    turn_in_call: int
    barge: bool  # the user cut this turn's reply
    delay_ms: float | None  # first frame -> the barging utterance started
    turn_id: str | None = None
    outcome: str | None = None
    e2e_ms: float | None = None
    tts_first_to_publish_ms: float | None = None
    interrupted: bool = False
    cancel_to_silence_ms: float | None = None
    cancel_to_last_frame_ms: float | None = None  # last captured frame of the cut reply minus the decision
    frames_before_cut: int | None = None
    stale_frames: int = 0
    stuck: str | None = None
    errors: list[str] = field(default_factory=list)
    rss_mb: float = 0.0
    tasks: int = 0
    engine_streams: int = 0


async def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while not cond():
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


class Runner:
    """Owns the engine backend, VAD and speech for the whole run; runs calls one after another."""

    def __init__(self, opts: StressOptions, backend: Any, engine: Any, vad: Any) -> None:
        self.opts = opts
        self.backend = backend
        self.engine = engine
        self.vad = vad
        self.rng = random.Random(opts.seed)
        self.cfg = opts.config or AgentConfig.from_env()
        self.speech = {line: espeak_pcm(line, opts.speech_cache) for line in USER_LINES}
        self.turns: list[TurnRecord] = []
        self.traces: list[dict[str, Any]] = []
        self.harness_errors: list[str] = []
        self.stuck: list[str] = []
        self.leaked: list[str] = []
        self.illegal_transitions = 0
        self.tasks_before_close: list[dict[str, int]] = []  # per call: live tasks by coroutine, before aclose

    def _say(self, text: str) -> None:
        if self.opts.progress is not None:
            self.opts.progress(text)

    def engine_streams(self) -> int:
        if self.engine is not None:
            return int(self.engine.active_streams())
        return int(self.backend.active_streams)

    async def run_call(self, call_no: int, plan: list[bool], first_index: int) -> None:
        opts = self.opts
        n = len(plan)
        lines = [USER_LINES[(first_index + i) % len(USER_LINES)] for i in range(n)]
        transcripts = [f"{line} (turn {first_index + i})" for i, line in enumerate(lines)]
        replies = [LONG_REPLY if cut else SHORT_REPLY for cut in plan]
        script = Script(
            transcripts=transcripts,
            replies=replies,
            stt_latency_s=opts.stt_latency_s,
            llm_ttft_s=opts.llm_ttft_s,
            token_interval_s=opts.token_interval_s,
        )
        frames: list[FrameRecord] = []
        records: list[TurnRecord] = []
        tasks_before = set(asyncio.all_tasks())
        async with FakeOpenAIServer(script) as server:
            cfg = dataclasses.replace(self.cfg, stt_base_url=server.base_url, llm_base_url=server.base_url)
            call = Call(
                cfg,
                vad=self.vad,
                backend=self.backend,
                session_id=f"stress{call_no}-{self.rng.getrandbits(24):06x}",
                traces_dir=None,
                frame_observer=frames.append,
                aec_warmup_s=0.0,
            )
            mic = WavMicrophone()
            await call.start(audio_input=mic)

            def settled(turn: Any) -> bool:
                """This turn's reply has played out (or failed) and nothing is queued: the agent listens."""
                ctl = call.controller
                if ctl.reply is not None or call.output.source.queued_duration > 0:
                    return False
                if turn is None or turn.finished:
                    return True
                return ctl.state.value == "listening" and turn.outcome in ("error", "no_transcript", "unanswered")

            last_turn: Any = None
            try:
                for i, cut in enumerate(plan):
                    rec = TurnRecord(call_no, first_index + i, i + 1, cut, None)
                    records.append(rec)
                    if i == 0 or not plan[i - 1]:
                        if not await _until(lambda t=last_turn: settled(t), opts.turn_timeout_s):
                            rec.stuck = f"not settled before turn {i + 1} (state {call.controller.state.value})"
                        await asyncio.sleep(opts.gap_s)
                    await mic.play(self.speech[lines[i]])
                    if not await _until(lambda k=i + 1: call.collector._count >= k, opts.turn_timeout_s):
                        rec.stuck = rec.stuck or f"turn {i + 1} never opened (no VAD end of speech)"
                        break
                    last_turn = turn = call.collector.current
                    if cut and turn is not None:
                        spoke = lambda t=turn: t.has("first_frame_published") or t.finished  # noqa: E731 - bound to this turn
                        if not await _until(spoke, opts.turn_timeout_s):
                            rec.stuck = f"turn {i + 1}: no agent frame within {opts.turn_timeout_s:.0f} s"
                        delay = self.rng.uniform(opts.min_delay_s, opts.max_delay_s)
                        rec.delay_ms = round(delay * 1000.0, 1)
                        await asyncio.sleep(delay)
                    rec.rss_mb = round(rss_mb(), 2)
                    rec.tasks = len(asyncio.all_tasks())
                    rec.engine_streams = self.engine_streams()
                    if rec.index % 10 == 0:
                        self._say(f"turn {rec.index}: rss {rec.rss_mb:.1f} MB, tasks {rec.tasks}")
                if not await _until(lambda: settled(last_turn), opts.turn_timeout_s):
                    self.stuck.append(f"call {call_no}: the last reply did not play out and settle")
                if call.controller.state.value != "listening":
                    self.stuck.append(f"call {call_no}: ended in state {call.controller.state.value}, not listening")
                self.tasks_before_close.append(task_census(tasks_before))
            finally:
                mic.close()
                await asyncio.sleep(0.3)  # late frames of a cut reply would land now: they are what we count
                await call.aclose()
        self._collect(call, records, frames)
        # what is still pending after the call closed and had a moment to unwind is a leak
        await asyncio.sleep(0.5)
        current = asyncio.current_task()
        left = [t for t in asyncio.all_tasks() if t not in tasks_before and t is not current and not t.done()]
        for task in left:
            coro = task.get_coro()
            self.leaked.append(f"call {call_no}: {task.get_name()} {getattr(coro, '__qualname__', coro)!s}")
        if not await _until(lambda: self.engine_streams() == 0, 5.0):
            self.stuck.append(f"call {call_no}: {self.engine_streams()} engine stream(s) still open after close")

    def _collect(self, call: Call, records: list[TurnRecord], frames: list[FrameRecord]) -> None:
        by_index = {rec["turn_index"]: rec for rec in call.collector.records}
        self.traces.extend(call.collector.records)
        self.illegal_transitions += call.controller.illegal_transitions
        frames_by_reply: dict[str, list[FrameRecord]] = {}
        for fr in frames:
            frames_by_reply.setdefault(fr.reply_id, []).append(fr)
        cuts: dict[int, tuple[Any, Any]] = {}
        for reply, irq in call.controller.interruptions:
            if reply.turn is not None and reply.turn.index not in cuts:
                cuts[reply.turn.index] = (reply, irq)
        for rec in records:
            trace = by_index.get(rec.turn_in_call)
            if trace is not None:
                rec.turn_id = trace["turn_id"]
                rec.outcome = trace["outcome"]
                rec.e2e_ms = trace["segments_ms"].get("e2e")
                rec.tts_first_to_publish_ms = trace["segments_ms"].get("tts_first_to_publish")
                rec.errors.extend(trace["errors"])
            elif rec.stuck is None:
                rec.errors.append(f"turn {rec.turn_in_call}: no trace record")
            cut = cuts.get(rec.turn_in_call)
            if cut is not None:
                reply, irq = cut
                rec.interrupted = True
                rec.frames_before_cut = irq.frames_published
                own = frames_by_reply.get(reply.reply_id, [])
                if irq.audio_silenced is None:
                    rec.stuck = rec.stuck or "interruption never silenced the reply"
                else:
                    rec.cancel_to_silence_ms = round((irq.audio_silenced - irq.interrupt_detected) * 1000.0, 3)
                    rec.stale_frames = sum(1 for fr in own if fr.t_start > irq.audio_silenced)
                if own:
                    last = max(fr.t_end for fr in own)
                    rec.cancel_to_last_frame_ms = round(max(0.0, last - irq.interrupt_detected) * 1000.0, 3)
            if rec.stuck:
                self.stuck.append(f"call {rec.call} turn {rec.turn_in_call}: {rec.stuck}")
        self.harness_errors.extend(f"call {records[0].call if records else '?'}: {e}" for e in call.errors)
        self.turns.extend(records)


def _plan(opts: StressOptions) -> list[list[bool]]:
    """Per call, per turn: whether the user cuts that turn's reply."""
    if opts.mode == "stress":
        flat = [True] * opts.count + [False]  # N cut replies, the last utterance answered in full
    else:
        every = opts.barge_every
        flat = [bool(every) and (i + 1) % every == 0 and i < opts.count - 1 for i in range(opts.count)]
    size = opts.turns_per_call or len(flat)
    calls = [flat[i : i + size] for i in range(0, len(flat), size)]
    for chunk in calls:
        chunk[-1] = False  # a call's last reply has no next utterance to cut it
    return calls


async def run(opts: StressOptions, backend: Any, engine: Any, vad: Any) -> tuple[Runner, dict[str, Any]]:
    error_log = ErrorLog()
    logging.getLogger().addHandler(error_log)
    threads_start = threading.active_count()
    gc.collect()
    rss_start = rss_mb()
    parts_start = rss_parts_mb()
    t0 = time.perf_counter()
    runner = Runner(opts, backend, engine, vad)
    try:
        index = 1
        for call_no, plan in enumerate(_plan(opts), 1):
            runner._say(f"call {call_no}: {len(plan)} turns ({sum(plan)} cut)")
            await runner.run_call(call_no, plan, index)
            # a worker's job ends here: the call's objects are garbage now; hand their pages back as Call.aclose does
            gc.collect()
            release_free_memory()
            index += len(plan)
            if opts.partial_path is not None:  # a run cut short by a time limit still leaves its numbers
                now = {"start": round(rss_start, 2), "end": round(rss_mb(), 2)}
                now["growth"] = round(now["end"] - now["start"], 2)
                threads = {"start": threads_start, "end": threading.active_count()}
                partial = summarize(runner, opts, now, threads, list(error_log.lines), time.perf_counter() - t0)
                partial["partial"] = {"calls_done": call_no, "turns_done": index - 1}
                opts.partial_path.write_text(json.dumps(partial, indent=2) + "\n", encoding="utf-8")
    finally:
        logging.getLogger().removeHandler(error_log)
    gc.collect()
    rss_end = rss_mb()
    rss = {"start": round(rss_start, 2), "end": round(rss_end, 2), "growth": round(rss_end - rss_start, 2)}
    parts_end = rss_parts_mb()
    for kind in parts_end:
        rss[f"{kind}_growth"] = round(parts_end[kind] - parts_start.get(kind, 0.0), 2)
    if runner.turns:
        rss["after_first_turn"] = runner.turns[0].rss_mb
        rss["max"] = max(t.rss_mb for t in runner.turns)
    threads = {"start": threads_start, "end": threading.active_count()}
    summary = summarize(runner, opts, rss, threads, error_log.lines, time.perf_counter() - t0)
    return runner, summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--rounds", type=int, help="barge-in stress: this many interrupted replies")
    what.add_argument("--turns", type=int, help="soak: this many user turns")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=1, help="random barge-in points (default 1)")
    parser.add_argument("--min-delay-ms", type=float, default=0.0, help="earliest barge-in after the first frame")
    parser.add_argument("--max-delay-ms", type=float, default=1500.0, help="latest barge-in after the first frame")
    parser.add_argument("--barge-every", type=int, default=5, help="soak: cut every Nth reply (0 = never)")
    parser.add_argument("--turns-per-call", type=int, default=None, help="soak default 100; stress default: one call")
    parser.add_argument("--turn-timeout-s", type=float, default=20.0, help="a wait longer than this is a stuck state")
    parser.add_argument("--model-dir", default="", help="TTS checkpoint (default: TTS_DEEP_STREAM_MODEL_DIR or tiny)")
    parser.add_argument("--tts-url", default="", help="use a running `python -m tts_engine serve` instead")
    parser.add_argument("--max-frames-per-segment", type=int, default=6, help="codec frame cap per segment; 0 = none")
    parser.add_argument(
        "--instants",
        action="store_true",
        help="with --rounds: cut each reply at a precise instant of it (tools/stress_instants.py)",
    )


def _check(args: argparse.Namespace) -> str | None:
    count = args.rounds if args.rounds is not None else args.turns
    flag = "--rounds" if args.rounds is not None else "--turns"
    if not 1 <= count <= 100_000:
        return f"{flag} {count} is out of range (allowed: 1..100000)"
    if not 0 <= args.min_delay_ms <= args.max_delay_ms <= 60_000:
        return f"--min-delay-ms {args.min_delay_ms} / --max-delay-ms {args.max_delay_ms}: need 0 <= min <= max <= 60000"
    if args.barge_every < 0:
        return f"--barge-every {args.barge_every} must be >= 0"
    if args.turns_per_call is not None and args.turns_per_call < 1:
        return f"--turns-per-call {args.turns_per_call} must be >= 1"
    if args.turn_timeout_s <= 0:
        return f"--turn-timeout-s {args.turn_timeout_s} must be > 0"
    if args.max_frames_per_segment < 0:
        return f"--max-frames-per-segment {args.max_frames_per_segment} must be >= 0"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent stress", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"lab.stress: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mode = "stress" if args.rounds is not None else "soak"
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    base = AgentConfig.from_env()
    turn = dataclasses.replace(base.turn, resume_false_interruption=False)
    cfg = dataclasses.replace(base, aec_warmup_s=0.0, turn=turn)
    if args.instants:
        if mode != "stress":
            print("lab.stress: --instants goes with --rounds", file=sys.stderr)
            return 2
        from lab.stress_instants import main_instants

        return main_instants(args, cfg, out)
    opts = StressOptions(
        mode=mode,
        count=args.rounds if mode == "stress" else args.turns,
        seed=args.seed,
        min_delay_s=args.min_delay_ms / 1000.0,
        max_delay_s=args.max_delay_ms / 1000.0,
        barge_every=args.barge_every if mode == "soak" else 0,
        turns_per_call=args.turns_per_call if args.turns_per_call is not None else (100 if mode == "soak" else 0),
        turn_timeout_s=args.turn_timeout_s,
        config=cfg,
        speech_cache=out / "speech",
        progress=lambda text: print(f"[{mode}] {text}", flush=True),
        partial_path=out / f"{mode}.partial.json",
    )
    backend, engine = load_backend(args, out)
    tune_process()  # as the worker's prewarm and the simulator do (GIL switch interval, gc.freeze)
    device = "remote" if engine is None else str(engine.stats().get("device_name", "?"))
    try:
        vad = load_vad(cfg)
        runner, summary = asyncio.run(run(opts, backend, engine, vad))
    finally:
        if engine is not None:
            engine.close()
    summary["device"] = device
    (out / f"{mode}.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with (out / "turns.jsonl").open("w", encoding="utf-8") as fh:
        for turn in runner.turns:
            fh.write(json.dumps(dataclasses.asdict(turn)) + "\n")
    with (out / "traces.jsonl").open("w", encoding="utf-8") as fh:
        for rec in runner.traces:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    plot(runner, summary, out / f"{mode}.png")
    shown = {k: v for k, v in summary.items() if k not in ("error_lines", "stuck", "leaked")}
    print(json.dumps(shown, indent=2))
    for key in ("error_lines", "stuck", "leaked"):
        for line in summary[key]:
            print(f"[{mode}] {key}: {line}", file=sys.stderr)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
