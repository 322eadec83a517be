"""`python -m lab.faults.ns_caller --url URL --token TOKEN --wav WAV`: a FaultCaller run as its own process
(the media-loss drill starts it inside the caller's network namespace), printing each event as one JSON line
`{"t": <time.monotonic()>, "what": "..."}` on stdout (the monotonic clock is the host's: the drill compares it
with its own). It hangs up when its stdin closes or after `--seconds`, and prints `{"what": "end"}`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from lab.faults.caller import FaultCaller


def emit(t: float, what: str) -> None:
    print(json.dumps({"t": round(t, 4), "what": what}), flush=True)


async def main(args: argparse.Namespace) -> int:
    caller = await FaultCaller.connect(args.url, args.token, Path(args.wav))
    caller.on_event = emit
    for t, what in caller.events:
        emit(t, what)
    emit(time.monotonic(), f"connected: {caller.room.local_participant.identity}")
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)  # the drill closes our stdin to hang up
    try:
        await asyncio.wait({stdin_closed, asyncio.ensure_future(caller.disconnected.wait())}, timeout=args.seconds,
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
    finally:
        await caller.aclose()
        emit(time.monotonic(), "end")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--wav", required=True)
    parser.add_argument("--seconds", type=float, default=300.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
