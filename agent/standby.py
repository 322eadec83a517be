"""A standby worker: a process that has done a worker's slow imports and waits to take over from a dead one.

`python -m agent standby --fifo PATH [-- start ...]` (scripts/run_worker.sh starts it once the running worker has
registered, with AGENT_STANDBY=1, the default under start_all):
- imports what a worker imports before it can register (LiveKit Agents and its plugins, torch, transformers'
  tokenizers, faster-whisper, the engine's model code), then prints `standby: ready` and blocks opening `PATH`
  (a FIFO), holding no model, no GPU context, no LiveKit connection;
- when the supervisor writes `go` into the FIFO (the running worker died), it runs the worker command (`start`
  by default) in this same process: only the model load and warm-up are left to do. Anything else read (or the
  writer closing without `go`) ends it with status 0.
Why: a restarted worker spent most of its start-up importing Python modules, and the callers of a lone worker
wait for all of it. The cost is one idle process's memory (docs/operations.md, "Faults", gives both measured).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import time

logger = logging.getLogger("agent.standby")

#: what the worker imports lazily on its way to registering (agent.worker imports the rest at its top)
PRELOAD = (
    "agent.worker",
    "tts_engine",
    "tts_engine.engine",
    "tts_engine.model.loader",
    "transformers.models.auto.tokenization_auto",
    "faster_whisper",
    "livekit.api",
    "livekit.agents.__main__",  # the entry point `python -m agent start` hands the worker to
)


def preload() -> list[str]:
    """Import PRELOAD; returns what could not be imported (an optional part not installed: the worker says why)."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def wait_for_go(argv: list[str]) -> list[str] | None:
    """Preload, say `standby: ready`, wait on the FIFO; the worker command to run (`python -m agent COMMAND`) on
    `go`, None on anything else."""
    parser = argparse.ArgumentParser(prog="python -m agent standby", description=__doc__.splitlines()[0])
    parser.add_argument("--fifo", required=True, help="the FIFO the supervisor writes 'go' into")
    parser.add_argument("command", nargs="*", default=["start"], help="the worker command to run on 'go'")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    missing = preload()
    extra = f" (not installed: {', '.join(missing)})" if missing else ""
    print(f"standby: ready after {time.monotonic() - t0:.1f}s of imports{extra}", flush=True)
    with open(args.fifo, encoding="utf-8") as fifo:  # blocks until the supervisor opens it for writing
        word = fifo.readline().strip()
    if word != "go":
        return None
    print("standby: taking over", flush=True)
    return args.command or ["start"]
