"""`python -m lab.faults DRILL --out DIR`: fault drills on the real local stack (DRILL below).

  worker-kill --workers 2 --tries 10    a worker killed mid-reply, a second one running (target: heard within 5 s)
  worker-kill --workers 1 --tries 10    the only worker killed mid-reply (target: heard within 15 s)
  media-loss --cuts 5,30 --tries 1      the caller's network cut mid-reply for 5 s and for 30 s (needs root)
  livekit-restart --tries 10            LiveKit's server restarted mid-call, the caller in Chromium (target: the
                                        page's agent back within 5 s, no false "lost" notice, measured and
                                        transcribed again)
  tab-closed --tries 10                 a caller closes the tab mid-reply, the next joins at once, a one-call
                                        worker, both in Chromium (target: the next caller's agent within 2 s of
                                        Join, their first question answered)
  worker-freeze --tries 10 --stop-s 10  the worker SIGSTOPped mid-reply, the caller in Chromium (target: the stall
                                        logged within 2 s of SIGCONT, a page notice while silent)
  token-down --tries 10                 the token server down when a fresh page presses Join, then back (target:
                                        a clear notice, then Join works without a reload)
  two-callers --tries 10                two people in one room, both in Chromium (target: the second told within
                                        3 s, the first kept and heard, nothing under another's name, the second
                                        heard and answered once the first leaves)

Each starts the whole local stack (scripts/start_all.sh through lab/callbench/stack.py: LiveKit's own
server, the token server with its agent guard, llama.cpp, the supervised worker), writes DIR/<drill>.json (every
try, the machine, the versions) and DIR/<drill>.md (a table), keeps the stack's logs and traces in DIR/stack, and
exits 0 only when every try passed. Run it on a quiet machine (`flock /work/heavy.lock ...` here).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from lab.callbench.bench import device, versions
from lab.callbench.speech import speech_wav
from lab.callbench.stack import LocalStack
from lab.faults import (
    STACK_ENV,
    livekit_restart,
    media_loss,
    tab_closed,
    token_down,
    two_callers,
    worker_freeze,
    worker_kill,  # fmt: skip
)
from lab.faults.netns import CallerNetwork

#: each drill's module: its `run` and its `table(report)`
DRILLS: dict[str, ModuleType] = {
    "worker-kill": worker_kill, "media-loss": media_loss, "livekit-restart": livekit_restart,
    "tab-closed": tab_closed, "worker-freeze": worker_freeze, "token-down": token_down, "two-callers": two_callers,
}
TARGET_S = {1: 15.0, 2: 5.0}  # worker-kill: heard again within, by the number of workers


def question(out: Path) -> Path:
    """One question without a pause inside, then 12 s of silence: one turn per loop of the caller's WAV."""
    wav = out / "question.wav"
    speech_wav(wav, "Can you hear me now?", silence_after_s=12.0)
    return wav


async def on_stack(out: Path, drill: Callable[[LocalStack], Awaitable[dict[str, Any]]],
                   **env: str) -> dict[str, Any]:  # fmt: skip
    """Run `drill` on the whole local stack (the drills' settings, `env` on top), stopped whatever happens."""
    stack = LocalStack(out / "stack", **{**STACK_ENV, **env})
    await asyncio.to_thread(stack.start)
    try:
        return await drill(stack)
    finally:
        await asyncio.to_thread(stack.stop)


async def run_drill(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    wav, tries = question(out), args.tries
    match args.drill:
        case "worker-kill":
            return await on_stack(out, lambda s: worker_kill.run(s, wav, workers=args.workers, tries=tries,
                                                                 target_s=TARGET_S[args.workers]))  # fmt: skip
        case "media-loss":
            cuts = [float(c) for c in args.cuts.split(",")]
            with CallerNetwork() as net:  # the caller in a network namespace; LiveKit told its address
                config = out / "livekit-media-loss.yaml"
                config.write_text(media_loss.livekit_config(net))
                return await on_stack(out, lambda s: media_loss.run(s, net, wav, cuts=cuts, tries=tries),
                                      LIVEKIT_CONFIG_FILE=str(config))  # fmt: skip
        case "livekit-restart":
            return await on_stack(out, lambda s: asyncio.to_thread(livekit_restart.run, s, wav, tries=tries,
                                                                   target_s=5.0))  # fmt: skip
        case "tab-closed":
            return await on_stack(out, lambda s: asyncio.to_thread(tab_closed.run, s, wav, tries=tries, target_s=2.0),
                                  **tab_closed.STACK_ENV)  # fmt: skip
        case "worker-freeze":
            return await on_stack(out, lambda s: asyncio.to_thread(worker_freeze.run, s, wav, tries=tries,
                                                                   stop_s=args.stop_s))  # fmt: skip
        case "token-down":
            return await on_stack(out, lambda s: asyncio.to_thread(token_down.run, s, wav, tries=tries))
        case "two-callers":
            return await on_stack(out, lambda s: asyncio.to_thread(two_callers.run, s, wav, tries=tries))
    raise ValueError(f"unknown drill {args.drill!r}")


def table(name: str, report: dict[str, Any]) -> str:
    """The drill's markdown table of its report (each drill module owns its own)."""
    return str(DRILLS[name].table(report))


def _unwind(*_: object) -> None:
    """A SIGTERM (timeout, Ctrl-C in a pipeline) unwinds like an exception: the stack is stopped, the namespace
    deleted. A second one (`pkill` reaching `timeout` too, which passes its own on) is ignored: it cut the cleanup
    short once and left a whole stack running."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.faults", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="drill", required=True)
    kill = sub.add_parser("worker-kill", help="a worker killed mid-reply")
    kill.add_argument("--workers", type=int, choices=(1, 2), default=2)
    loss = sub.add_parser("media-loss", help="the caller's network cut mid-reply (needs root)")
    loss.add_argument("--cuts", default="5,30", help="cut lengths in seconds, comma separated (default 5,30)")
    restart = sub.add_parser("livekit-restart", help="LiveKit's server restarted mid-call (a Chromium caller)")
    closed = sub.add_parser("tab-closed", help="a tab closed mid-reply, the next caller at once (one-call worker)")
    freeze = sub.add_parser("worker-freeze", help="the worker SIGSTOPped mid-reply (a Chromium caller)")
    freeze.add_argument("--stop-s", type=float, default=10.0, help="how long the worker stays stopped (default 10)")
    down = sub.add_parser("token-down", help="the token server down at a fresh page's Join, then back (Chromium)")
    two = sub.add_parser("two-callers", help="two people in one room, both in Chromium")
    for p in (kill, loss, restart, closed, freeze, down, two):
        p.add_argument("--tries", type=int, default=1 if p is loss else 10)
        p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    signal.signal(signal.SIGTERM, _unwind)
    report = asyncio.run(run_drill(args, out))
    name = f"worker-kill-{args.workers}" if args.drill == "worker-kill" else args.drill
    report.update(
        drill=args.drill, date=started.isoformat(timespec="seconds"), device=device(), versions=versions(),
        command="python -m lab.faults " + shlex.join(sys.argv[1:] if argv is None else argv),
        pass_=report["passed"] == len(report["results"]),
    )  # fmt: skip
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{name}.md").write_text(table(args.drill, report))
    print((out / f"{name}.md").read_text())
    return 0 if report["pass_"] else 1


if __name__ == "__main__":
    sys.exit(main())
