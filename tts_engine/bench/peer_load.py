"""The peer under concurrent requests (issue 15): faster-qwen3-tts cannot batch, so N concurrent calls need N
copies of its model. Measured here as the most favourable way to serve it: N processes on the same GPU, each
with its own loaded model and CUDA graphs, all released at once, each running `--runs` streaming calls back
to back. (One model shared by N callers would serialize them; N processes at least overlap on the GPU.)

Contract:
- `run_peer_load(model_dir, levels, ...)` -> one summary per level in the same shape as our `bench load`
  levels (bench/load.summarize_level: first audio P50/P95/P99, RTF, viability at each client buffer, audio/s),
  so the two tables read side by side. Streams are the peer's streaming call at `chunk` frames per chunk with
  the same fixed frame count; a packet's time is when its PCM reached the host in the worker.
- Workers are `python -m tts_engine.bench.peer_load --worker ...`: they write `<dir>/ready.<i>` when loaded,
  wait for `<dir>/go`, and write their traces as JSON. Clocks are `time.perf_counter` (CLOCK_MONOTONIC, shared
  by processes on Linux), so arrivals and packets line up across workers.
The peer is a test-time comparison only: product code never imports this.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tts_engine.bench.load import StreamTrace, summarize_level
from tts_engine.bench.stats import BenchError

READY_TIMEOUT_S = 600.0


def _worker(args: argparse.Namespace) -> None:
    from tts_engine.bench.peer import PeerRunner

    runner = PeerRunner(args.model_dir, args.text, args.speaker, args.language, args.frames)
    work = Path(args.dir)
    (work / f"ready.{args.index}").write_text("1")
    while not (work / "go").exists():
        time.sleep(0.002)
    traces = []
    for _ in range(args.runs):
        t_call = time.perf_counter()
        packets = []
        for audio, _sr, _timing in runner.model.generate_custom_voice_streaming(chunk_size=args.chunk,
                                                                                 **runner.call_kwargs()):
            packets.append((time.perf_counter(), len(audio)))
        traces.append({"t_call": t_call, "packets": packets})
    (work / f"traces.{args.index}.json").write_text(json.dumps(traces))


def run_level(model_dir: str, n: int, *, text: str, speaker: str, language: str, frames: int, runs: int,
              chunk: int, buffers_ms: list[float]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="peer-load-") as tmp:
        work = Path(tmp)
        procs = [subprocess.Popen([sys.executable, "-m", "tts_engine.bench.peer_load", "--worker", "--dir", tmp,
                                   "--index", str(i), "--model-dir", model_dir, "--text", text, "--speaker", speaker,
                                   "--language", language, "--frames", str(frames), "--runs", str(runs),
                                   "--chunk", str(chunk)], env=os.environ.copy())
                 for i in range(n)]
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while sum((work / f"ready.{i}").exists() for i in range(n)) < n:
                if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    raise BenchError(f"a peer worker of level {n} failed or did not load in {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.1)
            (work / "go").write_text("1")
            for p in procs:
                if p.wait() != 0:
                    raise BenchError(f"a peer worker of level {n} exited with {p.returncode}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        traces = [StreamTrace(t_call=t["t_call"], packets=[tuple(x) for x in t["packets"]])
                  for i in range(n) for t in json.loads((work / f"traces.{i}.json").read_text())]
    out = {"concurrency": n, "client_buffer_ms": None, "chunk": chunk, "runs_per_worker": runs,
           **summarize_level(traces, frames=frames, buffers_ms=buffers_ms)}
    print(f"[peer load] N={n}: first audio P50/P95 {out['first_audio_ms']['p50']}/{out['first_audio_ms']['p95']} "
          f"ms, RTF P50/P95 {out['rtf']['p50']}/{out['rtf']['p95']}, audio/s {out['audio_s_per_s']}", flush=True)
    return out


def run_peer_load(model_dir: str, levels: list[int], **kwargs: Any) -> list[dict[str, Any]]:
    return [run_level(model_dir, n, **kwargs) for n in levels]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="peer load worker (internal to bench load --peer-levels)")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--speaker", required=True)
    parser.add_argument("--language", required=True)
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--chunk", type=int, required=True)
    _worker(parser.parse_args(argv))


if __name__ == "__main__":
    main()
