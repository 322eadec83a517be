"""Where one batched engine step spends its time as rows grow (issue 15): `python -m tts_engine bench steps`.

Contract:
- Runs on a loaded engine (graphs as configured), on its worker thread, while no stream is running. For each row
  count r in `--rows`, slots 0..r-1 hold a real prompt (prefilled, greedy), and each part of the frame step is
  timed with CUDA events over `iters` back-to-back calls of a bench-only CUDA graph of that part:
  `c0` (talker logits processing + argmax), `predictor` (15 code-predictor passes), `talker` (feedback
  embedding + 28-layer talker step + codec head), `decoder` (one codec frame for r rows), and `frame` (the
  engine's own overlapped step graph: predictor, then talker beside decoder). `step_wall` is the engine's whole
  `FrameStepper.run(r)` as the host sees it (frame + int16 + the one copy to the host).
- Beside each part: a floor for that row count = max(bytes moved / HBM bandwidth, FLOPs / peak rate), from the
  model's own shapes (weights re-read per pass, the talker KV cache as the step reads it today: all
  `max_positions` keys per row, and as it would need: the live positions only), with the nominal peaks of the
  GPU given on the command line (defaults: H100 SXM: 3.35 TB/s, 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32).
- With `--kernels R1,R2`, the engine's frame graph at those row counts runs under torch.profiler and the top
  kernels (time per step, calls per step) are listed, so the growing part can be named.
Nothing here changes the engine; it is a diagnosis tool (results in results/engine/).
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from tts_engine.bench.stats import BenchError

PEAKS = {"hbm_tb_s": 3.35, "bf16_tflops": 989.0, "fp32_tflops": 67.0}


def _params(module: Any) -> int:
    return sum(p.numel() for p in module.parameters() if p.device.type != "cpu")


def floors(engine: Any, rows: int, live_positions: int, peaks: dict[str, float]) -> dict[str, float]:
    """Lower bounds (ms) per part for `rows` rows, from shapes: max(bytes / bandwidth, flops / peak)."""
    gen, cfg = engine.codegen, engine.model.config
    t, p = cfg.talker, cfg.predictor
    bf16 = 2
    talker_stack = _params(gen.talker.model.layers) + _params(gen.talker.model.norm)
    head = gen.talker.codec_head.weight.numel()
    pred_stack = _params(gen.predictor.model.layers) + _params(gen.predictor.model.norm)
    pred_heads = sum(h.weight.numel() for h in gen.predictor.lm_head)
    kv_row_pos = t.num_layers * 2 * t.num_kv_heads * t.head_dim * bf16  # bytes per row per cached position
    length = gen.k_cache.shape[3]
    bw = peaks["hbm_tb_s"] * 1e12
    tc = peaks["bf16_tflops"] * 1e12

    def ms(nbytes: float, flops: float, peak: float) -> float:
        return round(max(nbytes / bw, flops / peak) * 1000.0, 4)

    talker_flops = 2 * (talker_stack + head) * rows
    predictor_tokens = 16  # a 2-token prefill + 14 single-token passes per frame
    return {
        "talker_floor_ms": ms((talker_stack + head) * bf16 + rows * length * kv_row_pos, talker_flops, tc),
        "talker_floor_live_kv_ms": ms((talker_stack + head) * bf16 + rows * live_positions * kv_row_pos,
                                      talker_flops, tc),
        "predictor_floor_ms": ms(15 * pred_stack * bf16 + pred_heads * bf16,
                                 2 * (pred_stack * predictor_tokens + pred_heads) * rows, tc),
        "kv_read_gb": round(rows * length * kv_row_pos / 1e9, 3),
        "kv_live_gb": round(rows * live_positions * kv_row_pos / 1e9, 3),
        "predictor_layers": p.num_layers,
    }


def decoder_flops_per_frame(engine: Any) -> float:
    """FLOPs of one codec frame for one row, counted by torch's flop counter on the real decoder."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    dec = engine.model.codec
    groups = engine.model.config.num_code_groups
    state = dec.new_state(1)
    codes = torch.zeros(1, groups, 1, dtype=torch.long, device=engine.device)
    with FlopCounterMode(display=False) as counter:
        dec.step(codes, state)
    return float(counter.get_total_flops())


def _graphed(fn: Callable[..., Any], example: tuple[Any, ...], name: str) -> Callable[..., Any]:
    """A bench-only CUDA graph of `fn` (the plain function on a CPU, for the test suite's dry run)."""
    import torch

    from tts_engine.runtime.cuda_graphs import CapturedCall

    if not torch.cuda.is_available():
        return fn
    return CapturedCall(fn, example, name=name)


def _timed(fn: Callable[[], Any], iters: int) -> float:
    """Mean ms per call over `iters` back-to-back calls (CUDA events; wall time on a CPU)."""
    import torch

    for _ in range(3):
        fn()
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return round((time.perf_counter() - t0) * 1000.0 / iters, 4)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return round(start.elapsed_time(end) / iters, 4)


def profile_rows(engine: Any, rows_list: list[int], *, text: str, speaker: str, language: str, iters: int = 30,
                 peaks: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One dict per row count: part times (ms), the engine's frame graph, the host step wall, and floors."""
    import torch

    from tts_engine.model.sampling import process_talker_logits
    from tts_engine.runtime import codegen as codegen_module
    from tts_engine.runtime.codegen import SamplingParams

    peaks = peaks or PEAKS
    scheduler, gen, graphs = engine.scheduler, engine.codegen, engine.scheduler.stepper.graphs
    dec = engine.model.codec
    if max(rows_list) > scheduler.max_slots:
        raise BenchError(f"--rows up to {max(rows_list)} needs an engine with that many slots "
                         f"(it has {scheduler.max_slots}; raise --max-streams)")
    dec_flops = decoder_flops_per_frame(engine)

    def body() -> list[dict[str, Any]]:
        prompt = gen.prepare(text, speaker, language, max_frames=1000)
        eos_mask = codegen_module.MIN_NEW_TOKENS
        out = []
        top = 0
        try:
            for r in sorted(rows_list):
                bucket = graphs.rows_for(r)
                top = max(top, bucket)
                for slot in range(bucket):  # fresh prompts: positions restart at the prompt length per row count
                    gen.admit(slot, prompt, SamplingParams.greedy())
                scheduler.stepper.reset_state()
                state = scheduler.stepper.state_rows(bucket)
                n = bucket
                c0_graph = _graphed(
                    lambda n=n: process_talker_logits(gen.logits[:n], gen.seen[:n], gen.penalty[:n], gen.frame[:n],
                                                      gen.cfg.codec_eos_id, gen.suppress, eos_mask).argmax(dim=-1),
                    (), f"profile.c0[{n}]")
                predict = _graphed(lambda n=n: gen.predict_frame(n, sampling=False), (), f"profile.predict[{n}]")
                c0, c0_embed, rest = (x.clone() for x in predict())
                talker = _graphed(lambda a, b, c, n=n: gen.advance_talker(n, a, b, c), (c0, c0_embed, rest),
                                  f"profile.talker[{n}]")
                codes = torch.cat((c0[:, None], rest), dim=1)[:, :, None].clone()
                decoder = _graphed(lambda c, s=state: dec.step(c, s), (codes,), f"profile.decoder[{n}]")
                row: dict[str, Any] = {"rows": r, "bucket": bucket}
                row["c0_ms"] = _timed(c0_graph, iters)
                row["predictor_ms"] = _timed(predict, iters)
                row["talker_ms"] = _timed(functools.partial(talker, c0, c0_embed, rest), iters)
                row["decoder_ms"] = _timed(functools.partial(decoder, codes), iters)
                frame = graphs.frame_graphs.get((bucket, False))
                row["frame_ms"] = _timed(frame, iters) if frame is not None else None
                t0 = time.perf_counter()
                for _ in range(iters):
                    scheduler.stepper.run(r)
                row["step_wall_ms"] = round((time.perf_counter() - t0) * 1000.0 / iters, 4)
                live = int(gen.positions[:r].max())
                row.update(floors(engine, bucket, live, peaks))
                row["decoder_gflop"] = round(dec_flops * bucket / 1e9, 2)
                row["decoder_floor_fp32_ms"] = round(dec_flops * bucket / (peaks["fp32_tflops"] * 1e12) * 1e3, 4)
                row["live_positions"] = live
                out.append(row)
                del c0_graph, predict, talker, decoder
        finally:
            for slot in range(top):
                gen.release(slot)
            scheduler.stepper.reset_state()
        return out

    return scheduler.call(body).result()


def kernel_table(engine: Any, rows: int, *, text: str, speaker: str, language: str, steps: int = 10,
                 top: int = 15) -> dict[str, Any]:
    """Top kernels (by GPU time per step) of the engine's frame step at `rows` rows."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tts_engine.runtime.codegen import SamplingParams

    scheduler, gen, graphs = engine.scheduler, engine.codegen, engine.scheduler.stepper.graphs

    cuda = torch.cuda.is_available()

    def body() -> dict[str, Any]:
        prompt = gen.prepare(text, speaker, language, max_frames=1000)
        for slot in range(rows):
            gen.admit(slot, prompt, SamplingParams.greedy())
        try:
            for _ in range(3):
                scheduler.stepper.run(rows)
            if cuda:
                torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    scheduler.stepper.run(rows)
                if cuda:
                    torch.cuda.synchronize()
        finally:
            for slot in range(rows):
                gen.release(slot)
            scheduler.stepper.reset_state()
        per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for ev in prof.events():
            if cuda and ev.device_type.name != "CUDA":
                continue
            per_name[ev.name][0] += ev.device_time_total if cuda else ev.self_cpu_time_total
            per_name[ev.name][1] += 1
        total = sum(v[0] for v in per_name.values()) or 1.0
        ranked = sorted(per_name.items(), key=lambda kv: -kv[1][0])
        return {
            "rows": rows, "bucket": graphs.rows_for(rows),
            "kernel_us_per_step": round(total / steps, 1),
            "kernels_per_step": round(sum(v[1] for v in per_name.values()) / steps, 1),
            "top": [{"kernel": name[:120], "us_per_step": round(v[0] / steps, 1),
                     "calls_per_step": round(v[1] / steps, 1), "share": round(v[0] / total, 4)}
                    for name, v in ranked[:top]],
        }

    return scheduler.call(body).result()


PROFILE_COLUMNS = ["rows", "bucket", "c0_ms", "predictor_ms", "predictor_floor_ms", "talker_ms", "talker_floor_ms",
                   "talker_floor_live_kv_ms", "decoder_ms", "decoder_floor_fp32_ms", "frame_ms", "step_wall_ms"]


def attention_variants(engine: Any, rows_list: list[int], iters: int = 50) -> list[dict[str, Any]]:
    """One talker layer's single-query attention over the engine's cache length, per row count: SDPA (masked,
    GQA folded into the query axis) vs the compiled reductions (`attend_by_reduction`), each graphed; times
    x layers = the attention share of a talker step (TTS_TALKER_BATCHED_ATTENTION picks one for rows > 1)."""
    import torch
    import torch.nn.functional as F

    from tts_engine.model.layers import attend_by_reduction

    gen, t = engine.codegen, engine.model.config.talker
    length, dev, dt = gen.k_cache.shape[3], engine.device, engine.model.dtype
    groups = t.num_heads // t.num_kv_heads
    reduce = torch.compile(attend_by_reduction, dynamic=True)

    def body() -> list[dict[str, Any]]:
        out = []
        for r in rows_list:
            g = torch.Generator(device="cpu").manual_seed(r)
            q = torch.randn(r, t.num_heads, 1, t.head_dim, generator=g).to(dev, dt)
            k = torch.randn(r, t.num_kv_heads, length, t.head_dim, generator=g).to(dev, dt)
            v = torch.randn(r, t.num_kv_heads, length, t.head_dim, generator=g).to(dev, dt)
            pos = torch.randint(60, 200, (r,), generator=g).to(dev)
            mask = (torch.arange(length, device=dev)[None, :] <= pos[:, None])[:, None, None]

            def sdpa(q: torch.Tensor = q, k: torch.Tensor = k, v: torch.Tensor = v, mask: torch.Tensor = mask,
                     r: int = r) -> Any:
                qg = q.reshape(r, t.num_kv_heads, groups, t.head_dim)
                return F.scaled_dot_product_attention(qg, k, v, attn_mask=mask)

            def red(q: torch.Tensor = q, k: torch.Tensor = k, v: torch.Tensor = v, mask: torch.Tensor = mask,
                    r: int = r) -> Any:
                return reduce(q, k, v, mask.reshape(r, 1, 1, 1, -1), groups)

            a, b = sdpa(), red()
            diff = float((a.reshape(b.shape).float() - b.float()).abs().max())
            sdpa_ms = _timed(_graphed(sdpa, (), f"attn.sdpa[{r}]"), iters)
            red_ms = _timed(_graphed(red, (), f"attn.reduce[{r}]"), iters)
            out.append({"rows": r, "sdpa_ms_per_layer": sdpa_ms, "reduce_ms_per_layer": red_ms,
                        "sdpa_ms_per_step": round(sdpa_ms * t.num_layers, 3),
                        "reduce_ms_per_step": round(red_ms * t.num_layers, 3), "max_abs_diff": round(diff, 5)})
        return out

    return engine.scheduler.call(body).result()
