"""`python -m tts_engine bench MODE ...`: GPU benchmarks of our engine and of the peer (CUDA only).

Modes (every one prints a table and writes JSON with --json):
- `ours`     load + capture time, codegen-only frame_ms (talker + predictor), decoder ms per frame,
             streaming TTFA / RTF P50/P95 over --runs runs after --warmup, GPU memory. `--eager` turns
             every CUDA graph off (the same as TTS_CODEGEN_CUDAGRAPH_TALKER/_CP=0, TTS_DECODER_CUDAGRAPH=0).
- `codegen`, `decoder`, `stream`: one part of `ours` only.
- `peer`     faster-qwen3-tts 0.5.4 on the same checkpoint/text/frame count (streaming chunk 8, chunk 1,
             offline); see bench/peer.py for how its numbers map onto ours.
- `steps`    where one batched step spends its time as rows grow, against a floor per row count
             (bench/step_profile.py; `--profile-rows`, `--kernels`).
- `load`     many concurrent streams with open-loop arrivals: first audio, RTF, streaming viability per
             concurrency level, aggregate audio/s (bench/load.py, bench/load_run.py); writes
             results/<gpu>_load.json + .md + .png.
- `all`      the same-run comparison: builds the random checkpoint in place (`make-checkpoint --preset`)
             unless --model-dir is given, runs `ours`, `ours --eager` and `peer` each in its own process
             (clean GPU memory, no shared graphs), and writes results/<gpu>.json (+ RESULTS.md).

Random weights rarely emit EOS, so every run is held to exactly --frames frames (default 100 = 8 s).
This is a bench-only option (bench/ours.py documents how); product behaviour is unchanged.
Without CUDA every mode refuses with a clear message and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tts_engine.bench.stats import BenchError, device_slug, format_table, require_cuda, write_json

# the results tree of a source checkout (results/ at its root, outside every package); run from the checkout's root
RESULTS_DIR = Path("results") / "engine"
DEFAULT_TEXT = (
    "Hello! This is a streaming speech synthesis benchmark, measuring how quickly the first audio arrives."
)
MODES = ("ours", "codegen", "decoder", "stream", "peer", "steps", "load", "all")
TARGETS = {"rtf_p50": 0.10, "ttfa_ms_p95": 30.0, "speedup_rtf": 3.0, "speedup_ttfa": 5.0, "gpu_mem_gib": 4.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=MODES, help="what to measure (see the module docstring)")
    parser.add_argument("--model-dir", default="", help="checkpoint to use (default: build one from --preset)")
    parser.add_argument("--preset", default="0.6b", choices=("0.6b", "1.7b", "tiny"),
                        help="random checkpoint preset built when --model-dir is not given (default 0.6b)")
    parser.add_argument("--workdir", default="/tmp/tts_bench", help="where checkpoints and part results go")
    parser.add_argument("--frames", type=int, default=100, help="codec frames per run (80 ms each; default 100)")
    parser.add_argument("--runs", type=int, default=20, help="measured runs per streaming mode (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured warm-up runs per mode (default 3)")
    parser.add_argument("--eager-runs", type=int, default=0, help="runs for `ours --eager` in `all` (0: --runs)")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--speaker", default="serena")
    parser.add_argument("--language", default="english")
    parser.add_argument("--eager", action="store_true", help="ours: all CUDA graphs off")
    parser.add_argument("--max-streams", type=int, default=16,
                        help="ours: engine stream slots (default 16, the engine default; sizes the KV cache)")
    parser.add_argument("--max-positions", type=int, default=768,
                        help="ours: talker KV positions per slot (default 768, the engine default)")
    parser.add_argument("--peer-modes", default="chunk8,chunk1,offline", help="peer: comma-separated modes")
    parser.add_argument("--skip-peer", action="store_true", help="all: leave the peer out (not a valid comparison)")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR), help="all: where <gpu>.json and RESULTS.md go")
    parser.add_argument("--json", default="", help="write this mode's JSON here")
    from tts_engine.bench import load_run

    load_run.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        require_cuda()
        result = _dispatch(args)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if args.json:
        write_json(args.json, result)
        print(f"[bench] wrote {args.json}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    for name in ("frames", "runs", "max_streams", "max_positions"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name}={getattr(args, name)} is out of range (allowed: >= 1)")
    if args.warmup < 0:
        raise BenchError(f"--warmup={args.warmup} is out of range (allowed: >= 0)")


def _dispatch(args: argparse.Namespace) -> dict[str, Any]:
    if args.mode == "all":
        return run_all(args)
    model_dir = args.model_dir or str(ensure_checkpoint(args.preset, Path(args.workdir)))
    if args.mode in ("steps", "load"):
        from tts_engine.bench import load_run

        result = load_run.run_mode(args, model_dir)
        if args.mode == "load":
            path = load_run.write_load_results(result, Path(args.results_dir), args.plot)
            print(f"[bench] wrote {path} (+ .md, .png)")
            results_dir = Path(args.results_dir)
            (results_dir / "RESULTS.md").write_text(render_results_md(results_dir), encoding="utf-8")
            if args.gate_first_p95_ms is not None:
                from tts_engine.bench.load import gate_failures

                failures = gate_failures(result.get("levels", []), args.gate_first_p95_ms)
                if failures:
                    raise BenchError("the load gate failed: " + "; ".join(failures))
                print(f"[bench] load gate passed (no late stream, first audio P95 <= {args.gate_first_p95_ms:g} ms)")
        return result
    if args.mode == "peer":
        from tts_engine.bench.peer import run_peer

        modes = tuple(m for m in args.peer_modes.split(",") if m)
        result = run_peer(model_dir, text=args.text, speaker=args.speaker, language=args.language,
                          frames=args.frames, runs=args.runs, warmup=args.warmup, modes=modes)
        rows = [{"mode": m, "ttfa_p50_ms": v["ttfa_ms"]["p50"], "ttfa_p95_ms": v["ttfa_ms"]["p95"],
                 "rtf_p50": v["rtf"]["p50"], "rtf_p95": v["rtf"]["p95"]} for m, v in result["modes"].items()]
        print(format_table(rows, ["mode", "ttfa_p50_ms", "ttfa_p95_ms", "rtf_p50", "rtf_p95"]))
        return result
    from tts_engine.bench.ours import run_ours

    parts = ("load", "codegen", "decoder", "stream") if args.mode == "ours" else ("load", args.mode)
    result = run_ours(model_dir, text=args.text, speaker=args.speaker, language=args.language,
                      frames=args.frames, runs=args.runs, warmup=args.warmup, eager=args.eager, parts=parts,
                      max_streams=args.max_streams, max_positions=args.max_positions)
    print(format_table([result["summary"]], list(result["summary"])))
    return result


def ensure_checkpoint(preset: str, workdir: Path) -> Path:
    """Build the random checkpoint for `preset` under workdir once (a marker file says it is complete)."""
    out = workdir / f"ckpt-{preset}"
    marker = out / ".bench_complete"
    if marker.is_file():
        return out
    import time

    from tts_engine.model.factory import make_checkpoint

    t0 = time.perf_counter()
    make_checkpoint(preset, out, seed=0)
    marker.write_text(f"built in {time.perf_counter() - t0:.1f} s\n", encoding="utf-8")
    print(f"[bench] built {preset} checkpoint at {out} in {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def _subrun(argv: list[str], log_name: str) -> None:
    cmd = [sys.executable, "-m", "tts_engine", "bench", *argv]
    print(f"[bench] $ {shlex.join(cmd)}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, env=env, check=False)
    if proc.returncode != 0:
        raise BenchError(f"{log_name} failed with exit status {proc.returncode} (command: {shlex.join(cmd)})")


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    workdir = Path(args.workdir)
    model_dir = args.model_dir or str(ensure_checkpoint(args.preset, workdir))
    common = ["--model-dir", model_dir, "--frames", str(args.frames), "--warmup", str(args.warmup),
              "--max-streams", str(args.max_streams), "--max-positions", str(args.max_positions),
              "--text", args.text, "--speaker", args.speaker, "--language", args.language]
    parts = workdir / "parts"
    _subrun(["ours", *common, "--runs", str(args.runs), "--json", str(parts / "ours.json")], "ours (graphs on)")
    eager_runs = args.eager_runs or args.runs
    eager_common = [*common[: common.index("--warmup") + 1], "1", *common[common.index("--warmup") + 2 :]]
    _subrun(["ours", "--eager", *eager_common, "--runs", str(eager_runs), "--json", str(parts / "ours_eager.json")],
            "ours (eager, 1 warm-up run)")
    peer = None
    if not args.skip_peer:
        _subrun(["peer", *common, "--runs", str(args.runs), "--peer-modes", args.peer_modes,
                 "--json", str(parts / "peer.json")], "peer")
        peer = json.loads((parts / "peer.json").read_text())
    ours = json.loads((parts / "ours.json").read_text())
    eager = json.loads((parts / "ours_eager.json").read_text())
    device = torch.cuda.get_device_name()
    command = "python -m tts_engine bench " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:])
    result = merge_results(device=device, torch_version=torch.__version__, preset=args.preset,
                           command=command, ours=ours, eager=eager, peer=peer)
    results_dir = Path(args.results_dir)
    name = device_slug(device) + ("" if args.preset == "0.6b" else f"_{args.preset}")
    write_json(results_dir / f"{name}.json", result)
    md_path = results_dir / "RESULTS.md"  # the table of every <gpu>.json in the folder (results/engine/RESULTS.md)
    md_path.write_text(render_results_md(results_dir), encoding="utf-8")
    print(render_summary(result))
    print(f"[bench] wrote {results_dir / (name + '.json')} and {md_path}")
    return result


OURS_KEYS = ("rtf_p50", "rtf_p95", "ttfa_ms_p50", "ttfa_ms_p95", "frame_ms_p50", "decode_ms_per_frame", "load_s",
             "gpu_mem_gib")


def merge_results(*, device: str, torch_version: str, preset: str, command: str, ours: dict[str, Any],
                  eager: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    """The committed results JSON (schema fixed by issue 5), plus the detail each part measured."""
    result: dict[str, Any] = {
        "device": device,
        "date": _dt.date.today().isoformat(),
        "torch": torch_version,
        "preset": preset,
        "command": command,
        "ours": {k: ours["summary"][k] for k in OURS_KEYS},
        "ours_eager": {k: eager["summary"][k] for k in OURS_KEYS},
        "peer": None,
        "speedup_rtf": None,
        "speedup_ttfa": None,
    }
    if peer is not None:
        chunk8 = peer["modes"]["chunk8"]
        result["peer"] = {
            "name": peer["name"], "version": peer["version"], "mode": "streaming chunk 8",
            "rtf_p50": chunk8["rtf"]["p50"], "ttfa_ms_p50": chunk8["ttfa_ms"]["p50"],
            "ttfa_ms_p95": chunk8["ttfa_ms"]["p95"],
        }
        result["speedup_rtf"] = round(chunk8["rtf"]["p50"] / result["ours"]["rtf_p50"], 2)
        result["speedup_ttfa"] = round(chunk8["ttfa_ms"]["p50"] / result["ours"]["ttfa_ms_p50"], 2)
    o = result["ours"]
    result["targets"] = {
        "rtf_p50 <= 0.10": o["rtf_p50"] <= TARGETS["rtf_p50"],
        "ttfa_ms_p95 <= 30": o["ttfa_ms_p95"] <= TARGETS["ttfa_ms_p95"],
        "speedup_rtf >= 3": None if peer is None else result["speedup_rtf"] >= TARGETS["speedup_rtf"],
        "speedup_ttfa >= 5": None if peer is None else result["speedup_ttfa"] >= TARGETS["speedup_ttfa"],
        "gpu_mem_gib <= 4": o["gpu_mem_gib"] <= TARGETS["gpu_mem_gib"],
    }
    result["detail"] = {"ours": ours, "ours_eager": eager, "peer": peer}
    return result


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, key in (("ours (graphs)", "ours"), ("ours (eager)", "ours_eager")):
        o = result[key]
        rows.append({"run": label, "ttfa_p50_ms": o["ttfa_ms_p50"], "ttfa_p95_ms": o["ttfa_ms_p95"],
                     "rtf_p50": o["rtf_p50"], "rtf_p95": o["rtf_p95"], "frame_ms": o["frame_ms_p50"],
                     "decode_ms/frame": o["decode_ms_per_frame"], "load_s": o["load_s"], "gpu_gib": o["gpu_mem_gib"]})
    peer = (result.get("detail") or {}).get("peer")
    if peer:
        for mode, v in peer["modes"].items():
            rows.append({"run": f"{peer['name']} {mode}", "ttfa_p50_ms": v["ttfa_ms"]["p50"],
                         "ttfa_p95_ms": v["ttfa_ms"]["p95"], "rtf_p50": v["rtf"]["p50"], "rtf_p95": v["rtf"]["p95"],
                         "load_s": peer["load_s"], "gpu_gib": peer["gpu_mem"]["max_reserved_gib"]})
    return rows


COLUMNS = ["run", "ttfa_p50_ms", "ttfa_p95_ms", "rtf_p50", "rtf_p95", "frame_ms", "decode_ms/frame", "load_s",
           "gpu_gib"]


def render_summary(result: dict[str, Any]) -> str:
    lines = [f"{result['device']}  torch {result['torch']}  preset {result['preset']}  {result['date']}",
             format_table(_rows(result), COLUMNS),
             f"speedup vs peer chunk 8: RTF x{result['speedup_rtf']}, TTFA x{result['speedup_ttfa']}",
             "targets: " + ", ".join(f"{k}: {'pass' if v else ('n/a' if v is None else 'MISS')}"
                                     for k, v in result["targets"].items())]
    return "\n".join(lines)


def render_results_md(results_dir: Path) -> str:
    """RESULTS.md regenerated from every results JSON in the folder (markdown tables, one per file)."""
    from tts_engine.bench.load_run import load_markdown

    out = ["# Benchmark results", "",
           "Generated by `python -m tts_engine bench all` or `bench load` (tts_engine/bench/cli.py) from the JSON",
           "files beside this file; each table is one same-run measurement on one GPU. TTFA / first audio = request",
           "-> first PCM on the host; RTF = stream wall time / audio duration (lower is faster). Random-weight",
           "checkpoints built in place, fixed frame count per stream, in-process. `bench all` tables are batch 1;",
           "`bench load` tables (*_load*.json) have one row per concurrency level and declared client buffer",
           "(told_buf_ms); viab_B0 / viab_B100 = share of streams with no late packet for a listener buffer of",
           "0 / 100 ms.", ""]
    notes = results_dir / "notes.md"  # hand-written analysis kept beside the generated tables
    for path in sorted(results_dir.glob("*.json")):
        if path.name.endswith(".partial.json"):
            continue  # a load run's progress file (bench/load_run.py), superseded by its final JSON
        result = json.loads(path.read_text())
        if "levels" in result:  # `bench load`
            out += [f"## {path.name}: {result['device']}, preset {result['preset']}, {result['date']} (bench load)",
                    "", *load_markdown(result), ""]
            continue
        if "ours" not in result:
            continue  # neither `bench all` nor `bench load` (e.g. a partial file): nothing to tabulate
        out += [f"## {path.name}: {result['device']}, preset {result['preset']}, {result['date']}", "",
                f"`{result['command']}` (torch {result['torch']})", ""]
        out.append("| " + " | ".join(COLUMNS) + " |")
        out.append("|" + "---|" * len(COLUMNS))
        for row in _rows(result):
            out.append("| " + " | ".join(_md(row.get(c)) for c in COLUMNS) + " |")
        out += ["", f"Speedup over the peer at chunk 8: RTF x{result['speedup_rtf']}, TTFA x{result['speedup_ttfa']}.",
                "Targets: " + ", ".join(f"{k} {'pass' if v else ('n/a' if v is None else 'MISS')}"
                                        for k, v in result["targets"].items()) + ".", ""]
    if notes.is_file():
        out += [notes.read_text(encoding="utf-8").rstrip(), ""]
    return "\n".join(out)


def _md(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
