"""Read py-spy's raw (collapsed) stacks and the dispatch probe's events into the tables of
results/profiles/*/README.md (issue 41). Not product code.

    python -m lab.profile.summarize stacks FILE [--top 20] [--match TEXT]  # threads, self and inclusive frames
    python -m lab.profile.summarize loop FILE [--thread MainThread]         # an event loop thread: waits vs callbacks
    python -m lab.profile.summarize dispatch PROBE.jsonl [AGENT_LOG]        # offer -> call start, step by step
    python -m lab.profile.summarize fold FILE [--probe P] [--flame]         # the stacks for flamegraph.pl
    python -m lab.profile.summarize call-start LIVEKIT_LOG                  # caller joined -> agent in, per room

`--probe` (the dispatch probe's jsonl) names each job process by its room.

A raw line is `frame;frame;...;frame COUNT`, the root first; with --threads the first frame is `thread (TID): NAME`
and with --subprocesses a `process PID:"CMD"` frame comes before it. A frame is `function (file:line)`: the tables
drop the line number.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from common.percentiles import percentiles

LINE = re.compile(r":\d+\)$")
SELECT = tuple(f"{kind}Selector.select (selectors.py)" for kind in ("Epoll", "Poll", "Select"))  # the loop waits here
RUN = "Handle._run (asyncio/events.py)"
WRAPPERS = ("log_exceptions.<locals>.deco.<locals>.async_fn_logs",)
RUN_ONCE = "BaseEventLoop._run_once (asyncio/base_events.py)"


def read(path: Path, labels: dict[int, str] | None = None) -> list[tuple[list[str], int]]:
    """The stacks of a raw file, each `process PID:"CMD"` frame (a command line may hold `;`, which splits it)
    folded into one `process PID (label)` frame, and only the innermost process frame kept."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((fold_processes(stack.split(";"), labels or {}), int(count)))
    return out


def fold_processes(frames: list[str], labels: dict[int, str]) -> list[str]:
    procs: list[str] = []
    i = 0
    while i < len(frames) and frames[i].startswith("process "):
        head = frames[i]
        while not head.endswith('"') and i + 1 < len(frames):  # the command line went on past a `;`
            i += 1
            head += ";" + frames[i]
        pid = int(re.match(r"process (\d+)", head).group(1))
        cmd = head.split(":", 1)[1]
        role = labels.get(pid) or ("forked, no job" if "forkserver" in cmd else "worker main" if "agent" in cmd
                                   else "?")  # fmt: skip
        procs.append(f"process {pid} ({role})")
        i += 1
    return procs[-1:] + frames[i:]


def labels_from_probe(probe: Path | None) -> dict[int, str]:
    """pid -> `job <room>` for the job processes the dispatch probe saw."""
    if probe is None or not probe.is_file():
        return {}
    out = {}
    for line in probe.read_text().splitlines():
        e = json.loads(line)
        if e.get("ev") == "dispatch":
            out[int(e["pid"])] = f"job {e['room']}"
    return out


def plain(frame: str) -> str:
    return LINE.sub(")", frame)


def split_roots(frames: list[str]) -> tuple[str, str, list[str]]:
    """(process, thread, Python frames) of one stack."""
    process = thread = ""
    rest = frames
    if rest and rest[0].startswith("process "):
        process, rest = rest[0], rest[1:]
    if rest and rest[0].startswith("thread "):
        thread, rest = rest[0], rest[1:]
    return process, thread, rest


def thread_name(thread: str) -> str:
    return thread.split(": ", 1)[-1] if thread else ""


def stacks(path: Path, top: int, match: str | None, labels: dict[int, str] | None = None) -> str:
    rows = [(f, c) for f, c in read(path, labels) if match is None or match in ";".join(f)]
    total = sum(c for _, c in rows)
    by_proc: Counter = Counter()
    by_thread: Counter = Counter()
    self_t: Counter = Counter()
    incl: Counter = Counter()
    for frames, count in rows:
        process, thread, py = split_roots(frames)
        by_proc[process[:90]] += count
        by_thread[(process[:40], re.sub(r"\d+", "N", thread_name(thread)))] += count
        if py:
            self_t[plain(py[-1])] += count
        for f in {plain(x) for x in py}:
            incl[f] += count
    out = [f"{path.name}: {total} samples" + (f" (stacks containing {match!r})" if match else "")]
    if len(by_proc) > 1:
        out += ["", "| process | samples | share |", "|---|---|---|"]
        out += [f"| {p or '-'} | {c} | {c / total:.1%} |" for p, c in by_proc.most_common(top)]
    out += ["", "| process | thread (digits as N) | samples | share |", "|---|---|---|---|"]
    out += [f"| {p[:40] or '-'} | {t or '-'} | {c} | {c / total:.1%} |" for (p, t), c in by_thread.most_common(top)]
    out += ["", "| self (leaf) frame | samples | share |", "|---|---|---|"]
    out += [f"| `{f}` | {c} | {c / total:.1%} |" for f, c in self_t.most_common(top)]
    out += ["", "| inclusive frame | samples | share |", "|---|---|---|"]
    out += [f"| `{f}` | {c} | {c / total:.1%} |" for f, c in incl.most_common(top)]
    return "\n".join(out)


def loop(path: Path, thread: str, top: int, labels: dict[int, str] | None = None) -> str:
    """An event loop thread's samples: waiting in the selector, else which callback (the frame run by
    Handle._run) and what under it."""
    per_proc: dict[str, Counter] = defaultdict(Counter)
    leaf_proc: dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for frames, count in read(path, labels):
        process, th, py = split_roots(frames)
        if not thread_name(th).startswith(thread):
            continue
        totals[process] += count
        names = [plain(f) for f in py]
        if names and names[-1] in SELECT:
            per_proc[process]["(waiting in the selector: idle)"] += count
            continue
        if RUN in names:
            i = names.index(RUN)
            rest = [n for n in names[i + 1 :] if not n.startswith(WRAPPERS)]  # the coroutine, not its decorator
            cb = rest[0] if rest else "(Handle._run itself)"
            per_proc[process][cb] += count
            leaf_proc[process][names[-1]] += count
        elif RUN_ONCE in names:
            per_proc[process]["(the loop itself: " + names[-1] + ")"] += count
            leaf_proc[process][names[-1]] += count
        else:
            per_proc[process]["(outside the loop: " + (names[-1] if names else "?") + ")"] += count
    out = []
    for process, total in totals.most_common():
        out += [f"{process or path.name} {thread}: {total} samples", "", "| loop callback / state | samples | share |",
                "|---|---|---|"]  # fmt: skip
        out += [f"| `{k}` | {c} | {c / total:.1%} |" for k, c in per_proc[process].most_common(top)]
        out += ["", "| leaf frame when not waiting in the selector | samples | share of all |", "|---|---|---|"]
        out += [f"| `{k}` | {c} | {c / total:.1%} |" for k, c in leaf_proc[process].most_common(top)]
        out.append("")
    return "\n".join(out)


def dispatch(path: Path, agent_log: Path | None) -> str:
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    jobs: dict[str, dict] = defaultdict(dict)
    by_pid_session: dict[int, dict] = {}
    for e in events:
        # the first of each: AgentSession.start calls ctx.connect again (it returns at once, connected)
        if e["ev"] == "dispatch":
            jobs[e["job"]].update(e, job_pid=e["pid"])
        elif e["ev"] == "start_job_request":
            jobs[e["job"]].setdefault("start_job_request", e["t"])
        elif e["ev"] in ("connect_begin", "connect_end") and e.get("job"):
            jobs[e["job"]].setdefault(e["ev"], e["t"])
        elif e["ev"] in ("call_start_begin", "call_start_end"):
            by_pid_session.setdefault(e.get("session") or "", {}).setdefault(e["ev"], e["t"])
    started: dict[str, float] = {}
    if agent_log is not None and agent_log.is_file():
        for line in agent_log.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            msg = str(rec.get("message", ""))
            m = re.match(r"call (\S+) started in room (\S+)", msg)
            if m:
                started[m.group(1)] = _log_time(rec)
    for job in jobs.values():  # the session id is `<room>-<job id's last 6>` (agent/worker.py)
        sid = f"{job.get('room')}-{str(job.get('job'))[-6:]}"
        job.update(by_pid_session.get(sid, {}))
        if sid in started:
            job["call_started_log"] = started[sid]
    steps = [("received", "accepted", "offer -> accepted (our on_request)"),
             ("accepted", "assigned", "accepted -> server's assignment"),
             ("assigned", "launched", "assignment -> warm process taken (pool)"),
             ("launched", "start_job_request", "-> StartJobRequest read in the job process"),
             ("start_job_request", "entrypoint_started", "-> entrypoint started"),
             ("entrypoint_started", "connect_begin", "-> ctx.connect called"),
             ("connect_begin", "connect_end", "ctx.connect (room join)"),
             ("connect_end", "call_start_begin", "-> Call.start called"),
             ("call_start_begin", "call_start_end", "Call.start (AgentSession start)"),
             ("call_start_end", "call_started_log", "-> 'call started' logged"),
             ("received", "call_started_log", "offer -> call started (total)")]  # fmt: skip
    rows = sorted(jobs.values(), key=lambda j: j.get("received") or 0)
    t0 = min((j["received"] for j in rows if j.get("received")), default=0)
    head = "| job (room) | offer at (s) | " + " | ".join(s[2] for s in steps) + " |"
    out = [head, "|" + "---|" * (len(steps) + 2)]
    for j in rows:
        cells = []
        for a, b, _ in steps:
            cells.append(f"{j[b] - j[a]:.2f}" if j.get(a) and j.get(b) else "–")
        out.append(f"| {j.get('room')} | {(j.get('received') or 0) - t0:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


#: a line of LiveKit's server log (its console format): time, level, logger, source, message, then the fields as JSON
LIVEKIT_LINE = re.compile(r"^(\S+)\s+\w+\s+\S+\s+\S+\s+(.+?)\s+(\{.*\})\s*$")
LEVEL = re.compile(r"-n(\d+)-")  # many's room names: mc-<run>-n<N>-<index>


def call_start(path: Path) -> dict[str, Any]:
    """Per room, from LiveKit's own log: the caller's session start (its first participant that is not an agent) ->
    the job assigned to a worker -> the agent's join -> the agent active, in seconds; grouped by many's level (the
    `-n<N>-` in a room's name, else one group) with P50 / P95 / max of caller -> agent active; and the dispatches
    the server refused ("no servers available")."""
    rooms: dict[str, dict[str, float]] = {}
    refused = 0
    for line in path.read_text(errors="replace").splitlines():
        if "no servers available" in line:
            refused += 1
        m = LIVEKIT_LINE.match(line)
        if not m:
            continue
        try:
            fields = json.loads(m.group(3))
        except ValueError:
            continue
        room, who, msg = fields.get("room"), str(fields.get("participant", "")), m.group(2)
        if not isinstance(room, str):
            continue
        t = _log_time({"timestamp": m.group(1)})
        r = rooms.setdefault(room, {})
        agent = who.startswith("agent-")
        if msg == "starting RTC session":
            r.setdefault("agent_join" if agent else "caller", t)
        elif msg == "participant active" and agent:
            r.setdefault("agent_active", t)
        elif msg == "assigned job to worker":
            r.setdefault("assigned", t)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for room, r in rooms.items():
        if "caller" not in r:
            continue
        level = LEVEL.search(room)
        rel = {k: (round(r[k] - r["caller"], 3) if k in r else None) for k in ("assigned", "agent_join",
                                                                                "agent_active")}  # fmt: skip
        groups[level.group(1) if level else "all"].append({"room": room, **rel})
    summary = {}
    for level, rows in groups.items():
        got = [float(x["agent_active"]) for x in rows if x["agent_active"] is not None]
        pct = percentiles(got, (50, 95), digits=2)
        summary[level] = {"rooms": len(rows), "no_agent": len(rows) - len(got), "p50_s": pct["p50"],
                          "p95_s": pct["p95"], "max_s": max(got, default=None), "rows": rows}  # fmt: skip
    return {"refused_dispatches": refused, "levels": summary}


def call_start_table(report: dict[str, Any]) -> str:
    out = [f"dispatches refused by the server: {report['refused_dispatches']}", "",
           "| level | rooms | no agent | caller -> agent active P50 / P95 / max (s) |", "|---|---|---|---|"]
    for level, s in sorted(report["levels"].items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit()
                                                                     else 0)):  # fmt: skip
        out.append(f"| {level} | {s['rooms']} | {s['no_agent']} | {s['p50_s']} / {s['p95_s']} / {s['max_s']} |")
    return "\n".join(out)


def _log_time(rec: dict) -> float:
    import datetime as dt

    ts = rec.get("timestamp") or rec.get("time") or rec.get("asctime")
    if isinstance(ts, (int, float)):
        return float(ts)
    return dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.profile.summarize")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stacks")
    s.add_argument("file", type=Path)
    s.add_argument("--top", type=int, default=20)
    s.add_argument("--match")
    lp = sub.add_parser("loop")
    lp.add_argument("file", type=Path)
    lp.add_argument("--thread", default="MainThread", help="threads whose name starts with this")
    lp.add_argument("--top", type=int, default=15)
    for sp in (s, lp):
        sp.add_argument("--probe", type=Path, help="the dispatch probe's jsonl: job processes named by their room")
    n = sub.add_parser("fold", help="the raw file with process frames folded (for flamegraph.pl)")
    n.add_argument("file", type=Path)
    n.add_argument("--probe", type=Path)
    n.add_argument("--flame", action="store_true", help="threads by name, no line numbers (the SVGs)")
    d = sub.add_parser("dispatch")
    d.add_argument("probe", type=Path)
    d.add_argument("agent_log", type=Path, nargs="?")
    c = sub.add_parser("call-start", help="caller joined -> agent active per room, from LiveKit's log")
    c.add_argument("livekit_log", type=Path)
    c.add_argument("--json", type=Path, help="also write every room's times here")
    a = p.parse_args(argv)
    if a.cmd == "stacks":
        print(stacks(a.file, a.top, a.match, labels_from_probe(a.probe)))
    elif a.cmd == "loop":
        print(loop(a.file, a.thread, a.top, labels_from_probe(a.probe)))
    elif a.cmd == "fold":
        merged: Counter = Counter()
        for frames, count in read(a.file, labels_from_probe(a.probe)):
            if a.flame:  # threads by name (digits as N), frames without line numbers: what the SVGs show
                frames = [f"thread {re.sub(r'[0-9]+', 'N', thread_name(f))}" if f.startswith("thread (") else
                          f if f.startswith("process ") else plain(f) for f in frames]  # fmt: skip
            merged[";".join(frames)] += count
        for stack, count in merged.items():
            print(stack, count)
    elif a.cmd == "call-start":
        report = call_start(a.livekit_log)
        if a.json:
            a.json.write_text(json.dumps(report, indent=1) + "\n")
        print(call_start_table(report))
    else:
        print(dispatch(a.probe, a.agent_log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
