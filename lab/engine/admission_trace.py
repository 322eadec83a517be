"""Diagnosis, not a benchmark: where a stream's admission time goes (call -> admitted), phase by phase.

Wraps the engine's admission steps with host timestamps (worker woken, tokenized, prompt embeddings built,
prepared, prefill launched/returned, admitted, first step, first packet) and prints their spread over 20
streams, in the same conditions as `bench stream` (one stream after another, 100 frames each). Variants: the
garbage collector off, a 0.1 ms GIL switch interval, a device sync after every phase (GPU time included), and
pauses between streams. CUDA only in practice (runs on the CPU with a tiny checkpoint, for a dry run).

Usage: python -m lab.engine.admission_trace MODEL_DIR
Recorded: results/engine/profiles/h100_admission_trace.txt
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from tts_engine.config import EngineConfig
from tts_engine.engine import Engine
from tts_engine.model.prompt import PromptEmbedder
from tts_engine.runtime.scheduler import Scheduler

TEXT = "Hello! This is a streaming speech synthesis benchmark, measuring how quickly the first audio arrives."
PHASES = ("wake", "prep_start", "tokenized", "embeds", "prepared", "prefill_start", "prefill_end", "admitted",
          "step_start", "step_end", "first_packet")
marks: dict[str, float] = {}
sync_each_phase = False


def mark(name: str) -> None:
    if sync_each_phase and torch.cuda.is_available():
        torch.cuda.synchronize()
    marks.setdefault(name, time.perf_counter())


def wrap(owner: Any, attr: str, before: str | None = None, after: str | None = None) -> None:
    original: Callable[..., Any] = getattr(owner, attr)

    def timed(*args: Any, **kwargs: Any) -> Any:
        if before:
            mark(before)
        result = original(*args, **kwargs)
        if after:
            mark(after)
        return result

    setattr(owner, attr, timed)


def instrument(engine: Engine) -> None:
    drain = Scheduler._drain_inbox

    def drain_marked(self: Scheduler, block: bool) -> None:
        drain(self, block)
        if self._pending:
            marks.setdefault("wake", time.perf_counter())

    Scheduler._drain_inbox = drain_marked
    wrap(PromptEmbedder, "__call__", "prep_start", "embeds")
    gen = engine.codegen
    wrap(gen.model.tokenizer, "encode", None, "tokenized")
    wrap(gen, "prepare", None, "prepared")
    wrap(gen, "admit", None, "admitted")
    if gen.prefill_hook is not None:
        wrap(gen, "prefill_hook", "prefill_start", "prefill_end")
    wrap(engine.scheduler.stepper, "run", "step_start", "step_end")


async def one_stream(engine: Engine) -> dict[str, float]:
    marks.clear()
    t0 = time.perf_counter()
    first = None
    async for packet in engine.stream(TEXT, "serena", "english", max_frames=100, first_packet_frames=1):
        first = first if first is not None else packet.t_ready
    marks["first_packet"] = first if first is not None else float("nan")
    return {k: (v - t0) * 1e3 for k, v in marks.items()}


async def report(engine: Engine, label: str, runs: int = 20) -> None:
    rows = [await one_stream(engine) for _ in range(runs + 2)][2:]
    print(f"== {label} (ms after the call)")
    for phase in PHASES:
        values = sorted(r[phase] for r in rows if phase in r)
        if values:
            print(f"  {phase:14s} p50 {statistics.median(values):7.2f}  min {values[0]:7.2f}  max {values[-1]:7.2f}")
    print("  admitted per run:", [round(r.get("admitted", -1.0), 1) for r in rows], flush=True)


async def main(engine: Engine) -> None:
    global sync_each_phase
    await report(engine, "baseline")
    gc.collect()
    gc.freeze()
    gc.disable()
    await report(engine, "gc disabled")
    gc.enable()
    sys.setswitchinterval(1e-4)
    await report(engine, "switchinterval 0.1 ms")
    sys.setswitchinterval(5e-3)
    sync_each_phase = True
    await report(engine, "sync after each phase (GPU time included)")
    sync_each_phase = False
    for pause in (0.0, 0.05):
        admitted = []
        for _ in range(10):
            await asyncio.sleep(pause)
            admitted.append(round((await one_stream(engine))["admitted"], 1))
        print(f"== pause {pause} s between streams: admitted {admitted}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    model_dir = sys.argv[1]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = time.perf_counter()
    engine = Engine.load(model_dir, EngineConfig(model_dir=model_dir, device=device, max_streams=4,
                                                 max_positions=768))
    print(f"loaded in {time.perf_counter() - t:.1f} s on {device}", flush=True)
    instrument(engine)
    try:
        asyncio.run(main(engine))
        print("compiles since load:", engine.stats()["cuda_graphs"]["compiles_since_load"])
    finally:
        engine.close()
