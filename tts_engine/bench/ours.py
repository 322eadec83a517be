"""Benchmarks of our engine on a CUDA GPU: load/capture, codegen frame, decoder frame, streaming TTFA/RTF, memory.

Contract (the figures are the engine's own: docs/engine.md, "Load reporting and stats"):
- `load_s`: `Engine.load` wall time (weights, compile pass, CUDA-graph capture, warm-up stream); `capture_s`
  and `compile_pass_s` from the engine's graph stats.
- `frame_ms_p50`: one batch-1 frame step of the code generator (talker + 15-pass predictor), timed with CUDA
  events around the engine's own step call on its worker thread (graphed or eager as configured; with the
  overlapped frame graph this includes the decoder, which runs beside the talker half).
  `decode_ms_per_frame`: the codec decoder's one-frame step alone, through the engine's decoder call.
  `step_wall_ms_p50`: the whole batch-1 engine step as the host sees it (codegen + decode + int16 + one copy to host).
- Streaming: `runs` measured streams after `warmup` unmeasured ones, each exactly `frames` frames, first
  packet 1 frame. TTFA = `engine.stream()` called -> first packet's PCM on the host (`Packet.t_ready`);
  RTF = (last packet's t_ready - call) / audio duration. TTFA is split per stream into `admission_ms` (call ->
  admitted: queue, prompt building, prefill) and `first_step_ms` (admitted -> first packet on the host); the
  profile times `prepare_ms` (tokenize + prompt embeddings, host wall) and `admit_ms` (prefill and slot setup).
- Fixed frame count (bench-only): random weights rarely emit EOS, and we must not let one run stop early.
  The bench process raises the code generator's EOS mask (`runtime.codegen.MIN_NEW_TOKENS`, the official
  `min_new_tokens`) to `frames` before the engine loads and passes `max_frames=frames` to every stream,
  exactly like the peer's `min_new_tokens = max_new_tokens`. Nothing in the product changes; each run's
  sample count is checked.
- `gpu_mem_gib`: the process's peak reserved CUDA memory (allocator, graph pools included) after
  everything above; the device-wide figure (CUDA context included) is recorded beside it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.bench.stats import BenchError, gpu_memory_gib, summarize


def _force_fixed_frames(frames: int) -> None:
    from tts_engine.runtime import codegen

    if not hasattr(codegen, "MIN_NEW_TOKENS"):
        raise BenchError("runtime.codegen.MIN_NEW_TOKENS is gone; update bench/ours.py's fixed-frame-count option")
    codegen.MIN_NEW_TOKENS = frames


def load_engine(model_dir: str, *, eager: bool, max_streams: int, max_positions: int = 768,
                **overrides: Any) -> tuple[Any, float]:
    import torch

    from tts_engine.config import EngineConfig
    from tts_engine.engine import Engine

    config = EngineConfig(
        model_dir=model_dir, device="cuda", max_streams=max_streams, max_positions=max_positions,
        cudagraph_talker=not eager, cudagraph_predictor=not eager, cudagraph_decoder=not eager, **overrides,
    )
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    engine = Engine.load(model_dir, config)
    torch.cuda.synchronize()
    return engine, time.perf_counter() - t0


def measure_steps(engine: Any, text: str, speaker: str, language: str, steps: int, warmup: int) -> dict[str, Any]:
    """Batch-1 engine steps on the worker thread (the engine is idle): per-step codegen/decode/wall times."""
    from tts_engine.runtime.codegen import SamplingParams

    scheduler, codegen = engine.scheduler, engine.codegen

    def body() -> dict[str, list[float]]:
        prompt = codegen.prepare(text, speaker, language, max_frames=steps + warmup + 1)
        codegen.admit(0, prompt, SamplingParams.greedy())
        scheduler.stepper.state.reset_(0)
        out: dict[str, list[float]] = {"codegen_ms": [], "decode_ms": [], "step_wall_ms": []}
        try:
            for i in range(steps + warmup):
                t0 = time.perf_counter()
                result = scheduler.stepper.run(1)
                wall = (time.perf_counter() - t0) * 1000.0
                if i >= warmup:
                    out["codegen_ms"].append(result.codegen_ms)
                    out["decode_ms"].append(result.decode_ms)
                    out["step_wall_ms"].append(wall)
        finally:
            codegen.release(0)
            scheduler.stepper.state.reset_(0)
        return out

    times = scheduler.call(body).result()
    return {k: summarize(v) for k, v in times.items()}


def measure_decoder(engine: Any, iters: int = 100) -> dict[str, float]:
    """The codec decoder's one-frame step at batch 1 through the engine's own call (graphed or eager), timed
    alone: with the overlapped frame graph the engine hides it under the talker half, so the step timer
    cannot see it."""
    import torch

    scheduler = engine.scheduler
    groups = engine.model.config.num_code_groups

    def body() -> dict[str, float]:
        state = scheduler.stepper.state_rows(1)
        gen = torch.Generator(device="cpu").manual_seed(0)
        codes = torch.randint(0, 2048, (iters + 5, 1, groups, 1), generator=gen).to(engine.device)
        try:
            for i in range(5):
                scheduler.stepper.graphs.decode_step(codes[i], state)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(iters):
                scheduler.stepper.graphs.decode_step(codes[5 + i], state)
            end.record()
            end.synchronize()
            return {"decode_ms_per_frame": round(start.elapsed_time(end) / iters, 4)}
        finally:
            scheduler.stepper.state.reset_(0)

    return scheduler.call(body).result()


def measure_profile(engine: Any, text: str, speaker: str, language: str, iters: int = 50) -> dict[str, float]:
    """Per-component ms at batch 1: talker half and predictor half of a frame step, graphed and eager.

    Uses bench-only graphs of `CodeGenerator.predict_frame` / `advance_talker` (the engine itself graphs the
    whole step); each number is the mean over `iters` back-to-back calls between two CUDA events."""
    import torch

    from tts_engine.runtime.codegen import SamplingParams
    from tts_engine.runtime.cuda_graphs import CapturedCall

    gen = engine.codegen

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters

    def host_timed(fn: Any) -> float:  # host work with a little GPU work: wall time per call, GPU drained
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1000.0 / iters

    def body() -> dict[str, float]:
        prompt = gen.prepare(text, speaker, language)
        gen.admit(0, prompt, SamplingParams.greedy())
        try:
            predict = CapturedCall(lambda: gen.predict_frame(1, sampling=False), (), name="profile.predict")
            c0, c0_embed, rest = (t.clone() for t in predict())
            talker = CapturedCall(lambda a, b, c: gen.advance_talker(1, a, b, c), (c0, c0_embed, rest),
                                  name="profile.talker")
            out = {
                "predictor_graph_ms": timed(predict),
                "talker_graph_ms": timed(lambda: talker(c0, c0_embed, rest)),
                "predictor_eager_ms": timed(lambda: gen.predict_frame(1, sampling=False)),
                "talker_eager_ms": timed(lambda: gen.advance_talker(1, c0, c0_embed, rest)),
                "admit_ms": timed(lambda: gen.admit(0, prompt, SamplingParams.greedy())),  # engine prefill path
                "prepare_ms": host_timed(lambda: gen.prepare(text, speaker, language)),  # tokenize + prompt embeds
                "prompt_tokens": float(prompt.embeds.shape[0]),
            }
        finally:
            gen.release(0)
        return {k: round(v, 4) for k, v in out.items()}

    return engine.scheduler.call(body).result()


async def _stream_once(engine: Any, text: str, speaker: str, language: str, frames: int) -> dict[str, float]:
    t0 = time.perf_counter()
    first_ready = first_seen = last_ready = None
    samples = 0
    handle = engine.stream(text, speaker, language, max_frames=frames, first_packet_frames=1)
    async for packet in handle:
        if first_ready is None:
            first_ready, first_seen = packet.t_ready, time.perf_counter()
        last_ready = packet.t_ready
        samples += len(packet.pcm)
    if first_ready is None or first_seen is None or last_ready is None:
        raise BenchError("a benchmark stream produced no packets")
    if samples != frames * SAMPLES_PER_FRAME:
        raise BenchError(f"a benchmark stream produced {samples} samples, expected {frames * SAMPLES_PER_FRAME} "
                         f"({frames} frames); the fixed frame count did not hold")
    m = handle.metrics if hasattr(handle, "metrics") else None
    audio_s = samples / SAMPLE_RATE
    out = {
        "ttfa_ms": (first_ready - t0) * 1000.0,
        "ttfa_consumer_ms": (first_seen - t0) * 1000.0,
        "rtf": (last_ready - t0) / audio_s,
    }
    if m is not None:
        if m.t_admitted is not None:  # TTFA = admission (queue, prompt, prefill) + the first frame step and copy
            out["admission_ms"] = (m.t_admitted - t0) * 1000.0
            out["first_step_ms"] = (first_ready - m.t_admitted) * 1000.0
        out["codegen_wall_ms"] = float(m.codegen_wall_ms)
        out["decode_wall_ms"] = float(m.decode_wall_ms)
        out["glue_wall_ms"] = (last_ready - t0) * 1000.0 - out["codegen_wall_ms"] - out["decode_wall_ms"]
    return out


def measure_stream(engine: Any, text: str, speaker: str, language: str, frames: int, runs: int,
                   warmup: int) -> dict[str, Any]:
    async def main() -> list[dict[str, float]]:
        for _ in range(warmup):
            await _stream_once(engine, text, speaker, language, frames)
        return [await _stream_once(engine, text, speaker, language, frames) for _ in range(runs)]

    results = asyncio.run(main())
    return {k: summarize([r[k] for r in results]) for k in results[0]}


def run_ours(model_dir: str, *, text: str, speaker: str, language: str, frames: int, runs: int, warmup: int,
             eager: bool, parts: tuple[str, ...], max_streams: int = 16, max_positions: int = 768) -> dict[str, Any]:
    import torch

    _force_fixed_frames(frames)
    engine, load_s = load_engine(model_dir, eager=eager, max_streams=max_streams, max_positions=max_positions)
    try:
        result: dict[str, Any] = {"eager": eager, "frames": frames, "runs": runs, "warmup": warmup,
                                  "max_streams": max_streams, "max_positions": max_positions,
                                  "load_s": round(load_s, 3)}
        if "codegen" in parts or "decoder" in parts:
            result["steps"] = measure_steps(engine, text, speaker, language, steps=max(runs, 50), warmup=warmup + 2)
        if "codegen" in parts:
            result["profile"] = measure_profile(engine, text, speaker, language)
        if "codegen" in parts or "decoder" in parts:
            result["decoder"] = measure_decoder(engine)
        if "stream" in parts:
            result["stream"] = measure_stream(engine, text, speaker, language, frames, runs, warmup)
        torch.cuda.synchronize()
        result["gpu_mem"] = gpu_memory_gib()
        result["engine_stats"] = engine.stats()
    finally:
        engine.close()
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    stream, steps = result.get("stream"), result.get("steps")
    graphs = (result.get("engine_stats") or {}).get("cuda_graphs") or {}
    return {
        "rtf_p50": stream["rtf"]["p50"] if stream else None,
        "rtf_p95": stream["rtf"]["p95"] if stream else None,
        "ttfa_ms_p50": stream["ttfa_ms"]["p50"] if stream else None,
        "ttfa_ms_p95": stream["ttfa_ms"]["p95"] if stream else None,
        "frame_ms_p50": steps["codegen_ms"]["p50"] if steps else None,
        "decode_ms_per_frame": (result.get("decoder") or {}).get("decode_ms_per_frame"),
        "load_s": result["load_s"],
        "gpu_mem_gib": result["gpu_mem"]["max_reserved_gib"],
        "step_wall_ms_p50": steps["step_wall_ms"]["p50"] if steps else None,
        "capture_s": graphs.get("graph_capture_s"),
        "compile_pass_s": graphs.get("compile_pass_s"),
        "graph_steps": graphs.get("graph_steps"),
        "eager_steps": graphs.get("eager_steps"),
        "talker_graph_ms": (result.get("profile") or {}).get("talker_graph_ms"),
        "predictor_graph_ms": (result.get("profile") or {}).get("predictor_graph_ms"),
    }
