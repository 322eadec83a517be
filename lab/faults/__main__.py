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
from pathlib import Path
from typing import Any

from lab.callbench.bench import device, versions
from lab.callbench.speech import speech_wav
from lab.callbench.stack import LocalStack
from lab.faults import STACK_ENV

TARGET_S = {1: 15.0, 2: 5.0}


def question(out: Path) -> Path:
    """One question without a pause inside, then 12 s of silence: one turn per loop of the caller's WAV."""
    wav = out / "question.wav"
    speech_wav(wav, "Can you hear me now?", silence_after_s=12.0)
    return wav


def percentile(values: list[float], q: float) -> float | None:
    from common.percentiles import percentile as pct

    return round(pct(values, q), 1) if values else None


async def worker_kill(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from lab.faults import worker_kill as drill

    stack = LocalStack(out / "stack", **STACK_ENV)
    await asyncio.to_thread(stack.start)
    try:
        report = await drill.run(stack, question(out), workers=args.workers, tries=args.tries,
                                 target_s=TARGET_S[args.workers])  # fmt: skip
    finally:
        await asyncio.to_thread(stack.stop)
    heard = [r["heard_ms"] for r in report["results"] if r["heard_ms"] is not None]
    report["summary"] = {k: percentile(heard, q) for k, q in (("heard_p50_ms", 50), ("heard_p95_ms", 95))}
    report["summary"]["heard_max_ms"] = max(heard) if heard else None
    return report


async def media_loss(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from lab.faults import media_loss as drill
    from lab.faults.netns import CallerNetwork

    with CallerNetwork() as net:
        config = out / "livekit-media-loss.yaml"
        config.write_text(drill.livekit_config(net))
        stack = LocalStack(out / "stack", LIVEKIT_CONFIG_FILE=str(config), **STACK_ENV)
        await asyncio.to_thread(stack.start)
        try:
            cuts = [float(c) for c in args.cuts.split(",")]
            return await drill.run(stack, net, question(out), cuts=cuts, tries=args.tries)
        finally:
            await asyncio.to_thread(stack.stop)


async def livekit_restart(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from lab.faults import livekit_restart as drill

    stack = LocalStack(out / "stack", **STACK_ENV)
    await asyncio.to_thread(stack.start)
    try:
        report = await asyncio.to_thread(drill.run, stack, question(out), tries=args.tries, target_s=5.0)
    finally:
        await asyncio.to_thread(stack.stop)
    gaps = [r["without_agent_ms"] for r in report["results"] if r["without_agent_ms"] is not None]
    report["summary"] = {"without_agent_p50_ms": percentile(gaps, 50), "without_agent_max_ms": max(gaps, default=None),
                         "false_lost": sum(r["false_lost"] for r in report["results"]),
                         "stand_in_kept": sum(not r["same_agent"] for r in report["results"])}  # fmt: skip
    return report


async def tab_closed(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from lab.faults import tab_closed as drill

    stack = LocalStack(out / "stack", **{**STACK_ENV, **drill.STACK_ENV})
    await asyncio.to_thread(stack.start)
    try:
        report = await asyncio.to_thread(drill.run, stack, question(out), tries=args.tries, target_s=2.0)
    finally:
        await asyncio.to_thread(stack.stop)
    rows = report["results"]
    agent = [r["agent_ms"] for r in rows if r["agent_ms"] is not None]
    freed = [r["freed_ms"] for r in rows if r["freed_ms"] is not None]
    report["summary"] = {"agent_p50_ms": percentile(agent, 50), "agent_max_ms": max(agent, default=None),
                         "freed_p50_ms": percentile(freed, 50), "freed_max_ms": max(freed, default=None),
                         "first_answered": sum(r["first_question_answered"] for r in rows)}  # fmt: skip
    return report


async def browser_drill(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """worker-freeze, token-down and two-callers: the whole stack, the callers in Chromium."""
    from lab.faults import token_down, two_callers, worker_freeze

    stack = LocalStack(out / "stack", **STACK_ENV)
    await asyncio.to_thread(stack.start)
    try:
        if args.drill == "worker-freeze":
            return await asyncio.to_thread(worker_freeze.run, stack, question(out), tries=args.tries,
                                           stop_s=args.stop_s)  # fmt: skip
        if args.drill == "two-callers":
            report = await asyncio.to_thread(two_callers.run, stack, question(out), tries=args.tries)
            rows = report["results"]
            told = [r["told_ms"] for r in rows if r["told_ms"] is not None]
            turned = [r["turned_ms"] for r in rows if r["turned_ms"] is not None]
            answered = [r["second_answered_ms"] for r in rows if r["second_answered_ms"] is not None]
            report["summary"] = {"told_p50_ms": percentile(told, 50), "told_max_ms": max(told, default=None),
                                 "turned_p50_ms": percentile(turned, 50), "turned_max_ms": max(turned, default=None),
                                 "answered_p50_ms": percentile(answered, 50),
                                 "first_answered": sum(r["first_answered"] >= 1 for r in rows),
                                 "words_under_another_name": sum(r["second_heard_early"] + r["first_saw_other"]
                                                                 for r in rows)}  # fmt: skip
            return report
        return await asyncio.to_thread(token_down.run, stack, question(out), tries=args.tries)
    finally:
        await asyncio.to_thread(stack.stop)


def table(name: str, report: dict[str, Any]) -> str:
    if name == "two-callers":
        lines = [f"Two people in one room, both in Chromium; the first talks with the agent, the second joins, both "
                 f"stay {report['overlap_s']:g} s, then the first leaves. Target: the second told within 3 s, the "
                 f"first kept and heard, nothing published under another's name, no latency row on the second's page "
                 f"meanwhile, the second told within 3 s that the agent is theirs and answered. "
                 f"{report['passed']}/{report['tries']} passed.", "",
                 "| try | second told (ms) | first heard / answered meanwhile | words under another's name | second's "
                 "rows meanwhile | first page notices | turned to second (ms) | second heard (ms) | second answered "
                 "(ms) | ok |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in report["results"]:
            lines.append(f"| {r['try']} | {r['told_ms']} | {r['first_heard']} / {r['first_answered']} | "
                         f"{r['second_heard_early'] + r['first_saw_other']} | {r['second_rows_early']} | "
                         f"{len(r['first_notices'])} | {r['turned_ms']} | {r['second_heard_ms']} | "
                         f"{r['second_answered_ms']} | {'ok' if r['ok'] else 'FAIL'} |")  # fmt: skip
        s = report["summary"]
        lines += ["", f"second told: P50 {s['told_p50_ms']} ms, max {s['told_max_ms']} ms; turned to the second after "
                      f"the first left: P50 {s['turned_p50_ms']} ms, max {s['turned_max_ms']} ms; second answered: P50 "
                      f"{s['answered_p50_ms']} ms after the first left; the first caller answered while both were in: "
                      f"{s['first_answered']}/{report['tries']}; words under another's name: "
                      f"{s['words_under_another_name']}"]  # fmt: skip
        return "\n".join(lines) + "\n"
    if name == "worker-freeze":
        lines = [f"The worker SIGSTOPped {report['stop_s']:g} s mid-reply, the caller in Chromium; target: the stall "
                 f"logged within 2 s of SIGCONT, naming the whole process, a page notice while silent, the same agent "
                 f"after. {report['passed']}/{report['tries']} passed.", "",
                 "| try | page notice after SIGSTOP (ms) | stall logged after SIGCONT (ms) | whole process named | "
                 "notice gone after SIGCONT (ms) | same agent | ok |", "|---|---|---|---|---|---|---|"]
        for r in report["results"]:
            lines.append(f"| {r['try']} | {r['noticed_ms']} | {r['logged_ms']} | {r['named']} | {r['cleared_ms']} | "
                         f"{r['same_agent']} | {'ok' if r['ok'] else 'FAIL'} |")
        return "\n".join(lines) + "\n"
    if name == "token-down":
        lines = [f"The token server down when a fresh page presses Join, then back, in Chromium; target: a clear "
                 f"notice, then Join works without a reload. {report['passed']}/{report['tries']} passed.", "",
                 "| try | the page said | Join again without reload | agent after it (ms) | ok |",
                 "|---|---|---|---|---|"]
        for r in report["results"]:
            said = r.get("notice", "").split(":")[0]
            lines.append(f"| {r['try']} | {said} | {r['rejoined']} | {r['agent_ms']} | {'ok' if r['ok'] else 'FAIL'} |")
        return "\n".join(lines) + "\n"
    if name == "tab-closed":
        lines = [f"A caller closes the tab mid-reply, the next joins at once; one-call worker, both in Chromium. "
                 f"Target: the next caller's agent within {report['target_ms'] / 1000:g} s of Join, their question "
                 f"answered. {report['passed']}/{report['tries']} passed.", "",
                 "| try | worker free after the close (ms) | next caller's Join after the close (ms) | agent after "
                 "Join (ms) | first answer after Join (ms) | first question answered | ok |",
                 "|---|---|---|---|---|---|---|"]
        for r in report["results"]:
            lines.append(f"| {r['try']} | {r['freed_ms']} | {r['joined_after_close_ms']} | {r['agent_ms']} | "
                         f"{r['answered_ms']} | {r['first_question_answered']} | {'ok' if r['ok'] else 'FAIL'} |")
        s = report["summary"]
        lines += ["", f"agent after Join: P50 {s['agent_p50_ms']} ms, max {s['agent_max_ms']} ms; worker free: P50 "
                      f"{s['freed_p50_ms']} ms, max {s['freed_max_ms']} ms; first question answered "
                      f"{s['first_answered']}/{report['tries']}"]
        return "\n".join(lines) + "\n"
    if name == "livekit-restart":
        lines = [f"LiveKit's server restarted mid-call (the caller in Chromium); target: the page's agent back within "
                 f"{report['target_ms'] / 1000:g} s, its own agent, no false \"lost\" notice, a new latency row and "
                 f"transcript line. {report['passed']}/{report['tries']} passed.", "",
                 "| try | restart (s) | without an agent (ms) | agents after | same agent | false \"lost\" | "
                 "new row after (ms) | new line after (ms) | ok |", "|---|---|---|---|---|---|---|---|---|"]
        for r in report["results"]:
            lines.append(f"| {r['try']} | {r['restart_s']} | {r['without_agent_ms']} | {len(r['agents'])} | "
                         f"{r['same_agent']} | {r['false_lost']} | {r['turn_ms']} | {r['line_ms']} | "
                         f"{'ok' if r['ok'] else 'FAIL'} |")  # fmt: skip
        s = report["summary"]
        lines += ["", f"without an agent: P50 {s['without_agent_p50_ms']} ms, max {s['without_agent_max_ms']} ms; "
                      f"false \"lost\" notices {s['false_lost']}; a stand-in kept {s['stand_in_kept']}"]  # fmt: skip
        return "\n".join(lines) + "\n"
    if name == "worker-kill":
        lines = [f"Worker killed (SIGKILL) mid-reply, {report['workers']} worker(s); target: heard again within "
                 f"{report['target_ms'] / 1000:g} s. {report['passed']}/{report['tries']} passed.", "",
                 "| try | killed | dead agent gone (ms) | new agent joined (ms) | new agent heard (ms) | trace | "
                 "conversation goes on | ok |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in report["results"]:
            lines.append(f"| {r['try']} | {r['worker']} | {r['left_ms']} | {r['joined_ms']} | {r['heard_ms']} | "
                         f"{(r['trace'] or {}).get('outcome', 'MISSING')} | {r.get('answered_after', '-')} | "
                         f"{'ok' if r['ok'] else 'FAIL'} |")  # fmt: skip
        s = report["summary"]
        lines += ["", f"heard again: P50 {s['heard_p50_ms']} ms, P95 {s['heard_p95_ms']} ms, "
                      f"max {s['heard_max_ms']} ms"]  # fmt: skip
        return "\n".join(lines) + "\n"
    lines = [f"Caller's network cut mid-reply. {report['passed']}/{len(report['results'])} passed.", "",
             "| cut (s) | try | agent heard again after (ms) | caller transcribed after (ms) | first call closed | "
             "caller after the cut | jobs / load at the end | turns traced | ok |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["results"]:
        lines.append(f"| {r['cut_s']:g} | {r['try']} | {r.get('heard_after_ms', '-')} | "
                     f"{r.get('transcribed_after_ms', '-')} | {r.get('first_call_closed', '-')} | "
                     f"{r.get('caller') or ('connected' if r.get('recovered') else '-')} | "
                     f"{r['worker_jobs']} / {r['worker_load']} | {r['turns_traced']} | {'ok' if r['ok'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"


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
    run = {"worker-kill": worker_kill, "media-loss": media_loss, "livekit-restart": livekit_restart,
           "tab-closed": tab_closed, "worker-freeze": browser_drill, "token-down": browser_drill,
           "two-callers": browser_drill}[args.drill]
    signal.signal(signal.SIGTERM, _unwind)
    report = asyncio.run(run(args, out))
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
