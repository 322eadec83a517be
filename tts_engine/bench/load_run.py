"""The `load` and `steps` modes of `python -m tts_engine bench` (issue 15), on one loaded engine.

- `steps`: the per-row-count step profile (bench/step_profile.py) and, with `--kernels`, top-kernel tables.
- `load`: the step profile (unless `--profile-rows ""`), then every concurrency level of bench/load.py; writes
  `results/<gpu>_load[_<preset>].json`, a markdown table beside it and a PNG plot (first audio and streaming
  viability against concurrency). The peer's capacity (it cannot batch) comes from `--peer-levels`, run in its
  own process (bench/peer_load.py) so its GPU memory never mixes with ours.
Both hold every stream to `--frames` frames (bench/ours.py's fixed frame count) and load the engine with
`--max-streams` slots (default: the largest level) and `--max-positions` positions.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tts_engine.bench.stats import BenchError, device_slug, format_table, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--levels", default="1,16,32,64,96,128,160,192,256,384,512",
                        help="load: concurrent streams per level (comma list)")
    parser.add_argument("--arrivals", default="window", choices=("window", "poisson"),
                        help="load: N starts spread evenly over --window, or Poisson at --rate")
    parser.add_argument("--window", type=float, default=2.0, help="load: seconds over which a level's N streams start")
    parser.add_argument("--rate", type=float, default=0.0, help="load: Poisson arrival rate (streams/s)")
    parser.add_argument("--buffers-ms", default="0,100", help="load: client buffers B for streaming viability")
    parser.add_argument("--profile-rows", default="1,2,4,8,16,32,64,128,256",
                        help="steps/load: row counts of the step profile ('' skips it in load)")
    parser.add_argument("--kernels", default="", help="steps/load: row counts that get a top-kernel table")
    parser.add_argument("--peer-levels", default="",
                        help="load: concurrent requests for the peer (e.g. 1,2,4): one peer process per request")
    parser.add_argument("--peer-runs", type=int, default=5, help="load: streaming calls per peer process")
    parser.add_argument("--peer-chunk", type=int, default=8, help="load: the peer's frames per chunk (its default 8)")
    parser.add_argument("--plot", default="", help="load: PNG path (default: beside the results JSON)")
    parser.add_argument("--queue", type=int, default=None,
                        help="load: streams that may wait past capacity (default: every level's streams wait, "
                             "none is refused; the engine's own default is TTS_DEEP_STREAM_QUEUE)")
    parser.add_argument("--step-budget-ms", type=float, default=None,
                        help="load: the engine's step budget that sets its capacity (TTS_DEEP_STREAM_STEP_BUDGET_MS)")
    parser.add_argument("--packet-frames", type=int, default=None,
                        help="load: frames per packet after the first (TTS_DEEP_STREAM_PACKET_TOKENS)")
    parser.add_argument("--admit-per-step", type=int, default=None,
                        help="load: most admissions between two steps (TTS_DEEP_STREAM_ADMIT_PER_STEP)")
    parser.add_argument("--client-buffer-ms", default="0",
                        help="load: the listener buffer the engine is told of (TTS_DEEP_STREAM_CLIENT_BUFFER_MS); a "
                             "comma list runs every level under each value")
    parser.add_argument("--text-input", default="whole",
                        help="load: each stream's text given whole, or pushed one word at a time into a streaming-text "
                             "stream (tokens); a comma list (whole,tokens) runs every level in each, on one engine")
    parser.add_argument("--word-interval-ms", type=float, default=60.0,
                        help="load, --text-input tokens: one word pushed every this many ms (default 60)")
    parser.add_argument("--gate-first-p95-ms", type=float, default=None,
                        help="load: exit with status 1 if a level has a late stream (for the buffer the engine was "
                             "told of), a refused or failed one, or first audio P95 over this")
    parser.add_argument("--attention-rows", default="",
                        help="steps/load: row counts for the talker attention micro-benchmark (sdpa vs reduce)")


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BenchError(f"--{name}={text!r} is not a comma list of integers") from None
    if any(v < 1 for v in values):
        raise BenchError(f"--{name}={text!r}: every value must be >= 1")
    return values


def run_mode(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    import torch

    from tts_engine.bench.load import LEVEL_COLUMNS, level_row, run_load
    from tts_engine.bench.ours import _force_fixed_frames, load_engine
    from tts_engine.bench.step_profile import PROFILE_COLUMNS, kernel_table, profile_rows

    levels = _ints(args.levels, "levels") if args.mode == "load" else []
    modes = [m.strip() for m in args.text_input.split(",") if m.strip()]
    if not modes or any(m not in ("whole", "tokens") for m in modes):
        raise BenchError(f"--text-input={args.text_input!r} is not allowed; give whole, tokens or whole,tokens")
    rows = _ints(args.profile_rows, "profile-rows")
    kernels = _ints(args.kernels, "kernels")
    buffers = [float(b) for b in args.buffers_ms.split(",") if b.strip()]
    slots = max([args.max_streams, *levels, *rows, *kernels])
    _force_fixed_frames(args.frames)
    overrides: dict[str, Any] = {"queue_limit": max(levels, default=0) if args.queue is None else args.queue}
    if args.step_budget_ms is not None:
        overrides["step_budget_ms"] = args.step_budget_ms
    if args.packet_frames is not None:
        overrides["packet_frames"] = args.packet_frames
    if args.admit_per_step is not None:
        overrides["admit_per_step"] = args.admit_per_step
    declared = [float(b) for b in args.client_buffer_ms.split(",") if b.strip()] or [0.0]
    engine, load_s = load_engine(model_dir, eager=args.eager, max_streams=slots, max_positions=args.max_positions,
                                 **overrides)
    print(f"[bench {args.mode}] engine loaded in {load_s:.1f} s with {slots} slots", flush=True)
    from common.process import tune_process

    tune_process()  # as the server and the agent worker do after loading (GIL switch interval, gc.freeze)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(), "date": _dt.date.today().isoformat(), "torch": torch.__version__,
        "preset": args.preset, "model_dir": model_dir, "frames": args.frames, "slots": slots,
        "max_positions": args.max_positions, "eager": args.eager, "load_s": round(load_s, 2),
        "capacity": engine.capacity(), "queue_limit": engine.config.queue_limit,
        "step_budget_ms": engine.config.step_budget_ms, **engine.scheduler.costs.as_dict(),
        "command": "python -m tts_engine bench " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else
                                                              sys.argv[1:]),
    }
    partial = Path(args.results_dir) / f"{device_slug(result['device'])}_{args.mode}.partial.json"
    try:
        common = dict(text=args.text, speaker=args.speaker, language=args.language)
        if rows:
            result["step_profile"] = profile_rows(engine, rows, **common)
            print(format_table(result["step_profile"], PROFILE_COLUMNS), flush=True)
            write_json(partial, result)  # a run cut short by a time limit still leaves what it measured
        if kernels:
            result["kernels"] = [kernel_table(engine, r, **common) for r in kernels]
            write_json(partial, result)
        if args.attention_rows:
            from tts_engine.bench.step_profile import attention_variants

            result["talker_attention"] = attention_variants(engine, _ints(args.attention_rows, "attention-rows"))
            print(format_table(result["talker_attention"], list(result["talker_attention"][0])), flush=True)
            write_json(partial, result)
        if levels:
            result["arrivals"] = {"mode": args.arrivals, "window_s": args.window, "rate": args.rate}
            result["text_input"] = {"modes": modes, "word_interval_ms": args.word_interval_ms}
            result["levels"] = []
            for mode in modes:
                for buffer_ms in declared:
                    # the admission policy is the only thing the declared buffer changes (runtime/admission.py)
                    engine.scheduler.policy = dataclasses.replace(engine.scheduler.policy, client_buffer_ms=buffer_ms)
                    print(f"[bench load] text {mode}, engine told of a {buffer_ms:g} ms client buffer", flush=True)
                    for level in run_load(engine, levels, frames=args.frames, arrivals=args.arrivals,
                                          window_s=args.window, rate=args.rate, buffers_ms=buffers, text_input=mode,
                                          word_interval_ms=args.word_interval_ms, **common):
                        result["levels"].append({"text_input": mode, "client_buffer_ms": buffer_ms, **level})
                        write_json(partial, result)
            print(format_table([level_row(s) for s in result["levels"]], LEVEL_COLUMNS), flush=True)
        result["engine_stats"] = engine.stats()
    finally:
        engine.close()
    if args.peer_levels:  # after ours is closed: the peer's processes get the GPU to themselves
        from tts_engine.bench.peer import PEER_NAME, PEER_VERSION
        from tts_engine.bench.peer_load import run_peer_load

        torch.cuda.empty_cache()
        result["peer"] = {"name": PEER_NAME, "version": PEER_VERSION, "levels": run_peer_load(
            model_dir, _ints(args.peer_levels, "peer-levels"), frames=args.frames, runs=args.peer_runs,
            chunk=args.peer_chunk, buffers_ms=buffers, **common)}
    return result


def write_load_results(result: dict[str, Any], results_dir: Path, plot: str = "") -> Path:
    """<gpu>_load[_tokens][_preset].json + .md beside it + the PNG; returns the JSON path."""
    tokens = "tokens" in result.get("text_input", {}).get("modes", [])
    name = (device_slug(result["device"]) + "_load" + ("_tokens" if tokens else "")
            + ("" if result["preset"] == "0.6b" else f"_{result['preset']}"))
    path = write_json(results_dir / f"{name}.json", result)
    lines = [f"# {result['device']}, preset {result['preset']}, {result['date']}", "", *load_markdown(result)]
    (results_dir / f"{name}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if result.get("levels"):
        plot_levels(result, Path(plot) if plot else results_dir / f"{name}.png")
    return path


def load_markdown(result: dict[str, Any]) -> list[str]:
    """The command line and one table row per level (and the peer's levels, if measured): the .md beside a load
    result and its section of RESULTS.md (bench/cli.render_results_md)."""
    from tts_engine.bench.load import LEVEL_COLUMNS, level_row

    lines = [f"`{result['command']}` (torch {result['torch']}, {result['frames']} frames per stream, "
             f"{result['slots']} slots" + (f", capacity {result['capacity']}" if result.get("capacity") else "")
             + ")", ""]

    def table(levels: list[dict[str, Any]]) -> list[str]:
        rows = ["| " + " | ".join(LEVEL_COLUMNS) + " |", "|" + "---|" * len(LEVEL_COLUMNS)]
        for s in levels:
            row = level_row(s)
            rows.append("| " + " | ".join("-" if row[c] is None else str(row[c]) for c in LEVEL_COLUMNS) + " |")
        return rows

    if result.get("levels"):
        lines += table(result["levels"])
    if result.get("peer"):
        peer = result["peer"]
        lines += ["", f"Peer {peer['name']} {peer['version']} (one process per concurrent request, "
                  f"chunk {peer['levels'][0]['chunk']}):", "", *table(peer["levels"])]
    return lines


def plot_levels(result: dict[str, Any], out: Path) -> None:
    """First audio P50/P95 and streaming viability (B = 0 / 100 ms) against concurrency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [s for s in result["levels"] if "first_audio_ms" in s]
    runs = sorted({(s.get("text_input", "whole"), s.get("client_buffer_ms", 0.0)) for s in done})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, told in runs:
        levels = [s for s in done if (s.get("text_input", "whole"), s.get("client_buffer_ms", 0.0)) == (mode, told)]
        n = [s["concurrency"] for s in levels]
        tag = (f", {mode} text" if len({m for m, _ in runs}) > 1 else "") + (
            f", engine told {told:g} ms" if len({t for _, t in runs}) > 1 else "")
        for q in ("p50", "p95"):
            ax1.plot(n, [s["first_audio_ms"][q] for s in levels], marker="o", label=f"{q.upper()}{tag}")
        for key in sorted(k for k in levels[0] if k.startswith("buffer_")):
            ax2.plot(n, [100.0 * s[key]["viability"] for s in levels], marker="o", label=f"B = {key[7:]}{tag}")
    ax1.set_xlabel("concurrent streams")
    ax1.set_ylabel("ms (log scale)")
    ax1.set_yscale("log")  # tens of ms up to capacity, seconds of queueing past it
    ax1.set_title("first audio")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    ax2.set_ylim(-5, 105)
    ax2.set_xlabel("concurrent streams")
    ax2.set_ylabel("% streams with no late packet")
    ax2.set_title("streaming viability")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=0.3)
    fig.suptitle(f"{result['device']}, {result['preset']}, {result['frames']} frames/stream, "
                 f"{result['arrivals']['mode']} arrivals over {result['arrivals']['window_s']} s")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))
