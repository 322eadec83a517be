"""The caller's network to the LiveKit server cut in the middle of the agent's reply, for a few seconds or for long.

The caller is an SDK caller (lab/faults/ns_caller.py) in its own network namespace, joined to this host by
a veth pair (netns.py); the LiveKit server also listens on the pair's host end and advertises it as its ICE
address, the worker and everything else stay on this host. (Chromium is not used: its offline emulation cuts
only signalling, and the whole browser would have to run inside the namespace.) The cut takes this host's end of
the link down (packets dropped, connections stalled, nothing closed), then up again.

What is expected, and checked per try:
- a short cut (5 s): the call survives. The agent keeps speaking in real time, and what it says during the cut
  is lost for the caller (skipped, as on a phone line that drops out: LiveKit tells the agent nothing while its
  own timeouts have not fired). After the link is back the caller hears the agent (`heard_after_ms`) and the
  agent hears the caller (`transcribed_after_ms`: the caller's next question is transcribed). Then the caller
  hangs up normally.
- a long cut (30 s): LiveKit drops the caller (its ICE and ping timeouts, ~15-20 s), the agent is left alone,
  LiveKit closes the room after its departure timeout and the job ends, every turn written (`first_call_closed`:
  its journal entry is gone). The caller's SDK tries to reconnect meanwhile; when the link is back while it still
  tries, it joins the room again, which is a new call with a new agent (LiveKit's Python SDK did so in every try
  here; the page then says the agent was lost and is back), else it gives up and reports the disconnect
  (`caller`). The caller then hangs up.
Either way, once the caller hung up and the last job ended: the worker reports no job and no load (no call, no
engine stream), no journal entry of the room is left (every turn, the one in flight at the cut included, was
written by the call itself: `turns_traced`), and the worker's log has no ERROR line and no "still running" task
line (agent/worker.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from agent.journal import journal_dir
from lab.callbench.rtc_caller import worker_info
from lab.callbench.stack import ROOT, LocalStack
from lab.faults.netns import CallerNetwork
from lab.faults.report import markdown, verdict

#: the load of a worker with no call and no engine stream: agent/worker.py reports 1e-9 then (its float sums'
#: margin), when the stack runs with AGENT_CPU_LIMIT=off (the drills' STACK_ENV: the CPU term is not about leftovers)
IDLE_LOAD = 1e-6


def livekit_config(net: CallerNetwork) -> str:
    """scripts/local/livekit.yaml, also listening on the veth's host end and advertising it (the caller's way in)."""
    return f"""# the media-loss drill's LiveKit config (lab/faults/media_loss.py)
port: 7880
bind_addresses: [127.0.0.1, {net.host_ip}]
rtc:
  tcp_port: 7881
  port_range_start: 50100
  port_range_end: 50200
  use_external_ip: false
  node_ip: {net.host_ip}
  enable_loopback_candidate: true
  interfaces:
    includes: [lo, {net.host_if}]
logging:
  level: info
  json: false
room:
  empty_timeout: 30
  departure_timeout: 5
agents:
  target_load: 1.0
"""


class NsCaller:
    """The namespaced caller process and the events it printed (times on this host's monotonic clock)."""

    def __init__(self, net: CallerNetwork, url: str, token: str, wav: Path) -> None:
        self.events: list[tuple[float, str]] = []
        self.proc = net.popen(
            [sys.executable, "-m", "lab.faults.ns_caller", "--url", url, "--token", token, "--wav", str(wav)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.append((float(event["t"]), str(event["what"])))

    def first_what(self, prefix: str) -> str:
        return next((what for _, what in self.events if what.startswith(prefix)), "")

    def first(self, prefix: str, after: float = 0.0) -> float | None:
        return next((t for t, what in self.events if what.startswith(prefix) and t >= after), None)

    async def wait(self, prefix: str, timeout: float, after: float = 0.0) -> float | None:
        deadline = time.monotonic() + timeout
        while (t := self.first(prefix, after)) is None and time.monotonic() < deadline:
            if self.proc.poll() is not None and self._reader.done():
                return None
            await asyncio.sleep(0.05)
        return t

    async def hang_up(self, timeout: float = 20.0) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
        except TimeoutError:
            self.proc.kill()
        await self._reader


async def grant(stack: LocalStack, room: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(f"{stack.page_url}api/token", json={"room": room})
        resp.raise_for_status()
        return await resp.json()


def worker_log_problems(log: Path, since: int) -> list[str]:
    text = log.read_bytes()[since:].decode(errors="replace")
    return [ln[:300] for ln in text.splitlines() if '"level": "ERROR"' in ln or "still running:" in ln]


async def loss_try(stack: LocalStack, net: CallerNetwork, wav: Path, *, cut_s: float, index: int) -> dict[str, Any]:
    room = f"loss-{int(cut_s)}s-{index}-{secrets.token_hex(3)}"
    port = stack.ports["AGENT_HTTP_PORT"]
    log = stack.log("agent")
    log_start = log.stat().st_size
    g = await grant(stack, room)
    caller = NsCaller(net, f"ws://{net.host_ip}:{stack.ports['LIVEKIT_PORT']}", g["token"], wav)
    me = g["identity"]
    result: dict[str, Any] = {"try": index, "cut_s": cut_s, "room": room}
    t_cut = t_up = time.monotonic()
    ms = lambda t: None if t is None else round((t - t_up) * 1000.0)  # noqa: E731 - a one-line conversion
    try:
        if await caller.wait("heard: agent-", 90) is None:
            raise RuntimeError(f"the agent was never heard in {room}: {caller.events}")
        await asyncio.sleep(0.7)  # in the middle of the reply
        t_cut = time.monotonic()
        net.cut()
        try:
            await asyncio.sleep(cut_s)
        finally:
            net.restore()
        t_up = time.monotonic()
        first_agent = next(w.split(": ", 1)[1] for _, w in caller.events if w.startswith("agent joined: "))
        if cut_s <= 10:
            heard = await caller.wait("heard: agent-", 45, after=t_up)
            said = await caller.wait(f"transcript: {me}:", 45, after=t_up)
            result.update(heard_after_ms=ms(heard), transcribed_after_ms=ms(said))
            result["recovered"] = heard is not None and said is not None
        else:
            # the first call is over on the agent's side once its job wrote its turns and closed its journal entry
            job = first_agent.removeprefix("agent-")
            deadline = time.monotonic() + 60
            while open_entries(stack, job) and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
            result["first_call_closed"] = not open_entries(stack, job)
            # the caller's SDK either gives up (disconnected) or, the link being back, joins the room again: a new
            # call (LiveKit closed the first room), whose new agent it hears
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                gone = caller.first("disconnected", after=t_cut)
                rejoined = caller.first("reconnected", after=t_cut) is not None
                newcomer = caller.first("heard: agent-", after=t_up) if rejoined else None
                if gone is not None or newcomer is not None:
                    break
                await asyncio.sleep(0.25)
            result["caller"] = (f"disconnected: {caller.first_what('disconnected')}" if gone is not None
                                else f"rejoined, a new agent heard after {ms(newcomer)} ms" if newcomer is not None
                                else "neither")  # fmt: skip
        await caller.hang_up()
        # the (last) call ends: its room closes after LiveKit's departure timeout and the job ends
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = worker_info(port)  # protobuf JSON leaves out zeros
            if not info.get("active_jobs") and info.get("worker_load", 0.0) < IDLE_LOAD:
                break
            await asyncio.sleep(0.5)
    finally:
        if caller.proc.poll() is None:
            await caller.hang_up()
        result["events"] = [(ms(t), what) for t, what in caller.events if not what.startswith("transcript")]
    info = worker_info(port)
    info = {"active_jobs": info.get("active_jobs", 0), "worker_load": info.get("worker_load", 0.0)}
    session_traces = [r for r in stack.traces() if r["session_id"].startswith(f"{room}-")]
    left_open = open_entries(stack, room)
    result.update(
        worker_jobs=info["active_jobs"], worker_load=info["worker_load"], turns_traced=len(session_traces),
        outcomes=[r["outcome"] for r in session_traces], open_journal_entries=left_open,
        worker_log_problems=worker_log_problems(log, log_start),
    )  # fmt: skip
    clean = info["active_jobs"] == 0 and info["worker_load"] < IDLE_LOAD and not left_open and \
        not result["worker_log_problems"] and len(session_traces) > 0  # fmt: skip
    if cut_s <= 10:
        result["ok"] = bool(result.get("recovered")) and clean
    else:
        result["ok"] = bool(result.get("first_call_closed")) and result.get("caller", "neither") != "neither" and clean
    return result


def open_entries(stack: LocalStack, needle: str) -> list[str]:
    """The call journal's entries (agent/journal.py) that mention `needle` (a room or a job id): open calls."""
    found = []
    for path in journal_dir(stack.workdir / "traces").glob("*.json"):
        try:
            if needle in path.read_text():
                found.append(path.name)
        except FileNotFoundError:  # the call closed between the listing and the read
            continue
    return found


async def run(stack: LocalStack, net: CallerNetwork, wav: Path, *, cuts: list[float], tries: int) -> dict[str, Any]:
    results = []
    for cut_s in cuts:
        for i in range(1, tries + 1):
            r = await loss_try(stack, net, wav, cut_s=cut_s, index=i)
            results.append(r)
            print(f"[faults] media-loss {cut_s:g} s try {i}/{tries}: "
                  + ", ".join(f"{k}={r.get(k)}" for k in ("recovered", "heard_after_ms", "transcribed_after_ms",
                                                          "first_call_closed", "caller", "worker_jobs",
                                                          "turns_traced") if k in r)
                  + f"; {'ok' if r['ok'] else 'FAIL'}", flush=True)  # fmt: skip
    return {"cuts": cuts, "tries": tries, "results": results, "passed": sum(r["ok"] for r in results)}


def table(report: dict[str, Any]) -> str:
    return markdown(
        f"Caller's network cut mid-reply. {report['passed']}/{len(report['results'])} passed.",
        ["cut (s)", "try", "agent heard again after (ms)", "caller transcribed after (ms)", "first call closed",
         "caller after the cut", "jobs / load at the end", "turns traced", "ok"],
        ([f"{r['cut_s']:g}", r["try"], r.get("heard_after_ms", "-"), r.get("transcribed_after_ms", "-"),
          r.get("first_call_closed", "-"), r.get("caller") or ("connected" if r.get("recovered") else "-"),
          f"{r['worker_jobs']} / {r['worker_load']}", r["turns_traced"], verdict(r)] for r in report["results"]))
