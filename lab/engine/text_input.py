"""Text-input benchmark (issue 16), on the GPU machine: first audio of long text and of streaming text.

    python -m lab.engine.text_input [--preset 0.6b] [--runs 20] [--json OUT]

Runs on one engine (batch 1, graphs on), each case `--runs` times after 3 warm-ups, and prints/writes P50/P95:
- `short`: a one-sentence text through `Engine.stream` (the reference first audio).
- `long_2000`: a 2,000-character mixed Chinese/English/number text through `Engine.stream` (cut into segments by
  the engine): first audio (request -> first packet on the host) and, over one whole run with `--frames` frames per
  segment, the wall gap between packets inside a segment vs across a segment boundary.
- `tokens_whole`: `open_text_stream(layout="tokens")` with the first sentence pushed at once (first audio from open).
- `tokens_trickle`: the same, text pushed one word (with its leading space, as an LLM's tokens come) every
  `--trickle-ms`: first audio from the first push, and parkings (`text_waits`) per stream.
Random weights rarely emit EOS, so every stream is capped with max_frames; first audio does not depend on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from common.percentiles import percentiles
from tts_engine.bench.stats import require_cuda

MIXED = (
    "第1章：系统在2024年3月15日上线，处理了1,234,567次请求，平均延迟是3.14毫秒。"
    "The server at https://api.example.com/v1.2/speech handled 99.9% of calls; Dr. Lee said: \"It works.\" "
    "然后我们测试了长文本（包括数字12:30和URL）。Everything was fine! 接下来呢？"
)
TEXT_2000 = (MIXED * 12)[:2000]
SHORT = "Hello there, this is a short test."


def _pct(values: list[float]) -> dict[str, float]:
    return {**percentiles(values, digits=2), "n": len(values)}


async def _first_packet_ms(handle: Any, t0: float) -> float:
    packet = await handle.__anext__()
    ms = (packet.t_ready - t0) * 1000.0
    await handle.aclose()
    return ms


async def run_cases(engine: Any, runs: int, frames: int, trickle_ms: float) -> dict[str, Any]:
    out: dict[str, Any] = {}

    async def repeat(name: str, one: Any) -> None:
        values = []
        for i in range(runs + 3):
            ms = await one()
            if i >= 3:
                values.append(ms)
            await asyncio.sleep(0.02)
        out[name] = _pct(values)
        print(f"[text_input] {name}: {out[name]}", flush=True)

    async def short() -> float:
        t0 = time.perf_counter()
        return await _first_packet_ms(engine.stream(SHORT, "serena", max_frames=frames), t0)

    async def long_2000() -> float:
        t0 = time.perf_counter()
        return await _first_packet_ms(engine.stream(TEXT_2000, "serena", max_frames=frames), t0)

    async def tokens_whole() -> float:
        t0 = time.perf_counter()
        stream = engine.open_text_stream("serena", layout="tokens", max_frames=frames)
        stream.push(SHORT)
        stream.close()
        return await _first_packet_ms(stream, t0)

    async def tokens_trickle() -> float:
        stream = engine.open_text_stream("serena", layout="tokens", max_frames=frames)

        async def feed() -> None:
            words = SHORT.split(" ")
            for i, word in enumerate(words):
                stream.push(word if i == 0 else " " + word)
                await asyncio.sleep(trickle_ms / 1000.0)
            stream.close()

        t0 = time.perf_counter()
        feeder = asyncio.create_task(feed())
        ms = await _first_packet_ms(stream, t0)
        feeder.cancel()
        return ms

    await repeat("short", short)
    await repeat("long_2000", long_2000)
    await repeat("tokens_whole", tokens_whole)
    waits0 = engine.stats()["text_waits"]
    await repeat("tokens_trickle", tokens_trickle)
    out["tokens_trickle"]["text_waits_per_stream"] = round((engine.stats()["text_waits"] - waits0) / (runs + 3), 1)

    # one whole long text: packet gaps inside segments vs at segment boundaries
    segments = engine.segments(TEXT_2000)
    t0 = time.perf_counter()
    handle = engine.stream(TEXT_2000, "serena", max_frames=frames, packet_frames=1)
    times = [p.t_ready async for p in handle]
    gaps = [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False)]
    boundary = [g for i, g in enumerate(gaps) if (i + 1) % frames == 0]
    inside = [g for i, g in enumerate(gaps) if (i + 1) % frames != 0]
    out["long_2000_whole"] = {
        "segments": len(segments), "frames": len(times), "wall_ms": round((time.perf_counter() - t0) * 1000.0, 1),
        "audio_ms": len(times) * 80, "gap_inside_segment_ms": _pct(inside), "gap_at_boundary_ms": _pct(boundary),
    }
    print(f"[text_input] long_2000_whole: {out['long_2000_whole']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.engine.text_input", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="0.6b", choices=("0.6b", "1.7b", "tiny"))
    parser.add_argument("--model-dir", default="")
    parser.add_argument("--workdir", default="/tmp/tts_bench")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--frames", type=int, default=8, help="frames per stream / per segment (default 8)")
    parser.add_argument("--trickle-ms", type=float, default=30.0)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    require_cuda()
    import torch

    from common.process import tune_process
    from tts_engine.bench.cli import ensure_checkpoint
    from tts_engine.bench.ours import load_engine

    model_dir = args.model_dir or str(ensure_checkpoint(args.preset, Path(args.workdir)))
    engine, load_s = load_engine(model_dir, eager=False, max_streams=8)
    tune_process()
    try:
        result = {"device": torch.cuda.get_device_name(), "preset": args.preset, "torch": torch.__version__,
                  "load_s": round(load_s, 1), "runs": args.runs, "frames": args.frames,
                  "trickle_ms": args.trickle_ms, **asyncio.run(run_cases(engine, args.runs, args.frames,
                                                                          args.trickle_ms))}
    finally:
        engine.close()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
