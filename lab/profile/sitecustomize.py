"""Dispatch probe (issue 41, "Profile first"): where a job's start goes, offer -> call started, per job.

A measurement instrument, not product code: put this folder first on PYTHONPATH (the GPU run copies this file into
its SITE) and set `DISPATCH_PROBE=/path/file.jsonl`; every Python process of the stack then imports it at start,
and with the variable unset it does nothing. It installs an import hook that, once these modules load, wraps:

- `livekit.agents.ipc.job_proc_lazy_main._record_dispatch_timeline`: LiveKit's own stage stamps of a job
  (received = the offer reached the worker, accepted = our on_request answered, assigned = the server's
  assignment came back, launched = a warm process/thread was taken from the pool, entrypoint_started);
- `_JobProc._start_job`: the StartJobRequest reached the job's process (or thread);
- `JobContext.connect` (begin, end) and `agent.voice.Call.start` (begin, end): the entrypoint's two long awaits.

Each event is one JSON line {ev, t (Unix s), pid, job, ...} appended to the file (O_APPEND, one write each).
The worker's "call ... started" log line is the call start (agent/worker.py logs it last in the entrypoint).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time

_PATH = os.environ.get("DISPATCH_PROBE")


def _emit(ev: str, **fields: object) -> None:
    line = json.dumps({"ev": ev, "t": time.time(), "pid": os.getpid(), "thread": threading.current_thread().name,
                       **fields}, default=str) + "\n"  # fmt: skip
    fd = os.open(_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _job_id(ctx: object) -> str | None:
    try:
        return ctx.job.id
    except Exception:  # noqa: BLE001 - the probe reads a private shape that may change: no id then
        return None


def _patch_lazy_main(mod: object) -> None:
    original = mod._record_dispatch_timeline

    @functools.wraps(original)
    def record(span, info, entrypoint_started_at):
        _emit("dispatch", job=info.job.id, room=info.job.room.name, received=info.received_at,
              accepted=info.accepted_at, assigned=info.assigned_at, launched=info.launched_at,
              entrypoint_started=entrypoint_started_at)  # fmt: skip
        return original(span, info, entrypoint_started_at)

    mod._record_dispatch_timeline = record
    cls = mod._JobProc
    start_job = cls._start_job

    @functools.wraps(start_job)
    def _start_job(self, msg):
        _emit("start_job_request", job=msg.running_job.job.id, room=msg.running_job.job.room.name)
        return start_job(self, msg)

    cls._start_job = _start_job


def _patch_job(mod: object) -> None:
    cls = mod.JobContext
    connect = cls.connect

    @functools.wraps(connect)
    async def wrapped(self, *args, **kwargs):
        _emit("connect_begin", job=_job_id(self))
        try:
            return await connect(self, *args, **kwargs)
        finally:
            _emit("connect_end", job=_job_id(self))

    cls.connect = wrapped


def _patch_voice(mod: object) -> None:
    cls = mod.Call
    start = cls.start

    @functools.wraps(start)
    async def wrapped(self, *args, **kwargs):
        sid = getattr(self, "session_id", None)
        _emit("call_start_begin", session=sid)
        try:
            return await start(self, *args, **kwargs)
        finally:
            _emit("call_start_end", session=sid)

    cls.start = wrapped


_PATCHES = {
    "livekit.agents.ipc.job_proc_lazy_main": _patch_lazy_main,
    "livekit.agents.job": _patch_job,
    "agent.voice": _patch_voice,
}


class _Hook:
    """A meta-path finder that finds nothing itself: for the modules above it takes the next finder's spec and
    runs the patch once the module's code has run."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def run(module):
            exec_module(module)
            try:
                _PATCHES[name](module)
                _emit("patched", module=name)
            except Exception as e:  # noqa: BLE001 - a probe that cannot patch must not stop the worker
                _emit("patch_failed", module=name, error=repr(e))

        loader.exec_module = run
        return spec


if _PATH:
    sys.meta_path.insert(0, _Hook())
