"""`python -m lab.convbench --corpus DIR --out OUT`: play conversation scripts into real calls and score them.

Starts the local stack (lab/callbench/stack.py: LiveKit's own server, the worker with its embedded
defaults; `--turn-handling` sets the worker's TURN_HANDLING), plays each script through a LiveKit SDK caller in
its own room, and writes OUT/convbench.json, OUT/convbench.md, OUT/convbench.png, OUT/timelines/ (the recorded
calls) and OUT/stack/ (the stack's logs and the worker's traces). `--rescore` scores OUT/timelines again without
calling (new thresholds); `--compare A.json B.json ...` draws several runs' delay against false cut-offs into
OUT/compare.png. docs/convbench.md has the format and the definitions. Exit 0 once every script ran (the targets
are reported, not enforced), 1 otherwise, 2 for a script that does not validate.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

from lab.callbench.bench import device, versions
from lab.callbench.stack import LocalStack, room_traces
from lab.convbench import report as reports
from lab.convbench.activity import Thresholds
from lab.convbench.piper_corpus import HALVES, half_of
from lab.convbench.runner import STACK_ENV, read_traces, run_scripts
from lab.convbench.score import score
from lab.convbench.script import ScriptError, load_corpus, load_script
from lab.convbench.timeline import Timeline

TURN_HANDLING = ("vad", "livekit", "ours")


def _key_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.convbench", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--script", type=Path, help="one conversation script (JSON)")
    source.add_argument("--corpus", type=Path, help="a folder of scripts (*.json); make ours with "
                        "python -m lab.convbench.corpus --out DIR")  # fmt: skip
    source.add_argument("--rescore", action="store_true", help="score OUT/timelines again, no calls")
    source.add_argument("--compare", type=Path, nargs="+", help="convbench.json files of earlier runs: plot them")
    parser.add_argument("--out", type=Path, required=True, help="folder for the report")
    parser.add_argument("--turn-handling", choices=TURN_HANDLING,
                        help="the worker's TURN_HANDLING (default: the worker's own default)")
    parser.add_argument("--limit", type=int, help="play only the first N scripts")
    parser.add_argument("--half", choices=HALVES, help="play only the scripts of this half of a split corpus "
                        "(lab.convbench.piper_corpus: fit on tuning, report on report)")
    parser.add_argument("--worker-env", type=_key_value, action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the worker (repeatable; kept in the report's config), e.g. "
                        "OVERLAP_EARLY_WORDS=0")  # fmt: skip
    defaults = Thresholds()
    parser.add_argument("--silence-db", type=float, default=defaults.silence_db, help="agent audio below is silent")
    parser.add_argument("--stop-min-ms", type=float, default=defaults.stop_min_ms, help="silence this long = stopped")
    parser.add_argument("--duck-db", type=float, default=defaults.duck_db, help="a drop this large = ducked")
    return parser


def _meta(args: argparse.Namespace, extra: dict) -> dict:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m lab.convbench " + " ".join(sys.argv[1:]),
        "device": device(), "versions": versions(), **extra,
    }  # fmt: skip


def _counts(timelines: list[Timeline]) -> dict:
    items = [i for tl in timelines for i in tl.items]
    return {"scripts": len(timelines), "items": len(items), "items_played": sum(i.played for i in items),
            "errors": sum(len(tl.errors) for tl in timelines)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit={args.limit} must be at least 1")
    thresholds = Thresholds(silence_db=args.silence_db, stop_min_ms=args.stop_min_ms, duck_db=args.duck_db)
    timelines_dir = args.out / "timelines"
    if args.compare:
        runs = [{**json.loads(path.read_text()), "run": path.parent.name} for path in args.compare]
        args.out.mkdir(parents=True, exist_ok=True)
        reports.compare_plot(runs, args.out / "compare.png")
        print(f"[convbench] wrote {args.out / 'compare.png'}")
        return 0
    if args.rescore:
        paths = sorted(timelines_dir.glob("*.json"))
        if not paths:
            parser.error(f"--rescore: no recorded calls in {timelines_dir}")
        earlier = json.loads((args.out / "convbench.json").read_text())
        timelines = [Timeline.from_json(json.loads(p.read_text())) for p in paths]
        records = read_traces(args.out / "stack" / "traces")
        for tl in timelines:  # the stack's folder holds every trace, also those written after a call was left
            tl.traces = room_traces(records, tl.room) or tl.traces
        meta = {k: earlier[k] for k in ("date", "command", "device", "versions", "config", "counts", "duration_s",
                                        "caller")}  # fmt: skip
        meta["rescored"] = _meta(args, {})["date"]
    else:
        try:
            scripts = [load_script(args.script)] if args.script else load_corpus(args.corpus)
        except ScriptError as exc:
            print(f"[convbench] {exc}", file=sys.stderr)
            return 2
        if args.half:
            scripts = [s for s in scripts if half_of(s.meta) == args.half]
            if not scripts:
                print(f"[convbench] no script of the {args.half} half in {args.corpus or args.script} (its scripts' "
                      "meta.half: python -m lab.convbench.piper_corpus makes a split corpus)", file=sys.stderr)
                return 2
        scripts = scripts[: args.limit] if args.limit else scripts
        env = dict(STACK_ENV)
        if args.turn_handling:
            env["TURN_HANDLING"] = args.turn_handling
        env.update(args.worker_env)
        began = time.monotonic()
        shutil.rmtree(args.out / "stack", ignore_errors=True)  # the last run's logs and traces
        stack = LocalStack(args.out / "stack", **env)
        stack.start()
        try:
            timelines = asyncio.run(run_scripts(stack, scripts, thresholds))
        finally:
            stack.stop()  # drains the worker: every turn's trace is written by now
        for tl in timelines:
            tl.traces = room_traces(stack, tl.room)
        timelines_dir.mkdir(parents=True, exist_ok=True)
        for tl in timelines:
            (timelines_dir / f"{tl.script}.json").write_text(json.dumps(tl.to_json()) + "\n")
        config = {"turn_handling": args.turn_handling or "worker default", "stack_env": env,
                  "scripts": [str(s.path) for s in scripts]}  # fmt: skip
        meta = _meta(args, {"config": config, "counts": _counts(timelines),
                            "duration_s": round(time.monotonic() - began, 1),
                            "caller": timelines[-1].caller if timelines else {}})  # fmt: skip
    report = reports.build(score(timelines, thresholds), meta)
    reports.write(report, args.out)
    print(reports.markdown(report))
    return 0 if report["counts"]["errors"] == 0 and report["counts"]["scripts"] == len(timelines) else 1


if __name__ == "__main__":
    sys.exit(main())
