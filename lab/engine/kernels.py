"""Where a graphed frame step spends GPU time, kernel by kernel (CUDA only): `python -m lab.engine.kernels`.

Contract:
- Loads the engine as configured by the environment (engine defaults otherwise), admits one greedy stream in
  slot 0 and runs `--steps` batch-1 engine steps under torch.profiler (CUDA activity; kernels inside CUDA
  graphs are reported one by one).
- Prints and writes (--json) per kernel name: calls per step, microseconds per step, share of kernel time;
  kernel time per step vs the step's wall time (the rest is gaps between kernels, i.e. launch-bound time);
  the kernel count per step; and the engine's memory parts (weights, talker KV cache, allocator peaks).
- A micro-benchmark of one talker attention call (batch 1, one query, `L` cached keys, 28 layers' worth of
  distinct caches, graphed) for the cache lengths given by --attn-lengths: the masked SDPA the model uses
  vs the same product written as two matmuls and a softmax.
Nothing here changes the engine; it is a diagnosis tool for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tts_engine.bench.stats import BenchError, require_cuda


def _param_gib(module: Any) -> float:
    """Parameters held in GPU memory (the text embedding table stays on the host)."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.is_cuda) / 2**30


def memory_parts(engine: Any) -> dict[str, float]:
    import torch

    gen = engine.codegen
    kv = (gen.k_cache.numel() * gen.k_cache.element_size() * 2) / 2**30
    return {
        "talker_and_predictor_weights_gib": round(_param_gib(engine.model.talker), 3),
        "codec_weights_gib": round(_param_gib(engine.model.codec), 3),
        "talker_kv_gib": round(kv, 3),
        "talker_kv_positions_per_slot": int(gen.k_cache.shape[3]),
        "slots": int(gen.max_slots),
        "allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 3),
        "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
        "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3),
    }


def kernel_profile(engine: Any, text: str, speaker: str, language: str, steps: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tts_engine.runtime.codegen import SamplingParams

    scheduler, gen = engine.scheduler, engine.codegen

    def body() -> dict[str, Any]:
        prompt = gen.prepare(text, speaker, language, max_frames=steps + 20)
        gen.admit(0, prompt, SamplingParams.greedy())
        scheduler.stepper.state.reset_(0)
        try:
            for _ in range(5):
                scheduler.stepper.run(1)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                t0 = time.perf_counter()
                for _ in range(steps):
                    scheduler.stepper.run(1)
                torch.cuda.synchronize()
                wall_ms = (time.perf_counter() - t0) * 1000.0 / steps
        finally:
            gen.release(0)
            scheduler.stepper.state.reset_(0)
        totals: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time > 0:
                totals[event.name] += event.device_time  # microseconds
                counts[event.name] += 1
        kernel_us = sum(totals.values()) / steps
        rows = sorted(totals, key=lambda k: -totals[k])
        table = [
            {"kernel": name[:110], "calls_per_step": round(counts[name] / steps, 2),
             "us_per_step": round(totals[name] / steps, 1), "share": round(totals[name] / steps / kernel_us, 4)}
            for name in rows[:40]
        ]
        return {"wall_ms_per_step": round(wall_ms, 3), "kernel_ms_per_step": round(kernel_us / 1000.0, 3),
                "kernels_per_step": round(sum(counts.values()) / steps, 1), "top": table}

    return scheduler.call(body).result()


def _graph_us(fn: Any, iters: int) -> float:
    """Microseconds per replay of `fn` captured in a CUDA graph."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) * 1000.0 / iters, 1)


def _attention_row(length: int, layers: int, kv_heads: int, groups: int, head_dim: int,
                   iters: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    dev, dt = torch.device("cuda"), torch.bfloat16
    ks = [torch.randn(1, kv_heads, length, head_dim, device=dev, dtype=dt) for _ in range(layers)]
    vs = [torch.randn_like(k) for k in ks]
    q = torch.randn(1, kv_heads, groups, head_dim, device=dev, dtype=dt)
    mask = (torch.arange(length, device=dev) <= length // 2)[None, None, None, :]
    additive = torch.zeros(1, 1, 1, length, device=dev).masked_fill(~mask, float("-inf"))

    def sdpa() -> torch.Tensor:
        return sum(F.scaled_dot_product_attention(q, k, v, attn_mask=mask) for k, v in zip(ks, vs, strict=True))

    def matmuls() -> torch.Tensor:
        acc = torch.zeros_like(q)
        for k, v in zip(ks, vs, strict=True):
            scores = (q @ k.transpose(-1, -2)).float() * head_dim**-0.5 + additive
            acc = acc + (scores.softmax(-1).to(dt) @ v)
        return acc

    return {"cache_positions": length, "layers": layers, "sdpa_masked_us_all_layers": _graph_us(sdpa, iters),
            "two_matmuls_us_all_layers": _graph_us(matmuls, iters)}


def attention_micro(lengths: list[int], layers: int = 28, kv_heads: int = 8, groups: int = 2,
                    head_dim: int = 128, iters: int = 50) -> list[dict[str, Any]]:
    return [_attention_row(n, layers, kv_heads, groups, head_dim, iters) for n in lengths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.engine.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--max-streams", type=int, default=16)
    parser.add_argument("--text", default="Hello! This is a streaming speech synthesis benchmark.")
    parser.add_argument("--speaker", default="serena")
    parser.add_argument("--language", default="english")
    parser.add_argument("--attn-lengths", default="2048,1024")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    try:
        require_cuda()
    except BenchError as exc:
        print(f"kernels: {exc}", file=sys.stderr)
        return 2
    from tts_engine.config import EngineConfig
    from tts_engine.engine import Engine

    t0 = time.perf_counter()
    config = EngineConfig.from_env(model_dir=args.model_dir, device="cuda", max_streams=args.max_streams)
    engine = Engine.load(args.model_dir, config)
    load_s = time.perf_counter() - t0
    try:
        result: dict[str, Any] = {"load_s": round(load_s, 1), "memory": memory_parts(engine),
                                  "graphs": engine.stats().get("cuda_graphs", {})}
        result["profile"] = kernel_profile(engine, args.text, args.speaker, args.language, args.steps)
    finally:
        engine.close()
    lengths = [int(x) for x in args.attn_lengths.split(",") if x.strip()]
    result["attention_micro"] = attention_micro(lengths)
    prof = result["profile"]
    print(f"load {result['load_s']} s; memory {json.dumps(result['memory'])}")
    print(f"step wall {prof['wall_ms_per_step']} ms, kernel time {prof['kernel_ms_per_step']} ms, "
          f"{prof['kernels_per_step']} kernels/step")
    print(f"{'us/step':>9} {'calls':>7} {'share':>6}  kernel")
    for row in prof["top"]:
        print(f"{row['us_per_step']:>9} {row['calls_per_step']:>7} {row['share']:>6.3f}  {row['kernel']}")
    for row in result["attention_micro"]:
        print(json.dumps(row))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
