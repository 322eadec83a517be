"""`python -m agent <command>`.

- `preflight`: what is missing to run the stack (weights, LiveKit, vLLM).
- `dev` / `start` (and the other LiveKit CLI commands, e.g. `download-files`): the LiveKit worker
  (agent/worker.py) through `livekit.agents.cli`, so LiveKit's conventions and flags apply
  (`dev` = development mode with reload off; `start` = production).
- `simulate --turns N [--barge-in] --out DIR`: a complete call without a LiveKit server (agent/tools/simulate.py).
- `standby --fifo PATH [COMMAND]`: a worker that imports everything, then waits for its supervisor's `go` to run
  COMMAND (`start`) in place of a dead worker (agent/standby.py; scripts/run_worker.sh starts it).
- `recover [--pid PID] [--reason TEXT]`: after a worker died: close its open turns (`worker_lost`) and take its
  agents out of their rooms (agent/recovery.py; scripts/run_worker.sh runs it).
"""

from __future__ import annotations

import argparse
import os
import sys

from tts_engine.env import load_dotenv
from tts_engine.errors import ConfigError

WORKER_COMMANDS = ("dev", "start", "connect", "download-files", "console")
USAGE = "usage: python -m agent {preflight|dev|start|simulate|recover|standby} [options]  (python -m agent CMD --help)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    load_dotenv(os.environ.get("ENV_FILE") or ".env")  # the same file scripts/start_all.sh reads
    command = argv[0] if argv else ""
    if command == "preflight":
        from agent.config import AgentConfig
        from agent.preflight import report, run_checks
        from tts_engine.config import EngineConfig

        try:
            agent_cfg, engine_cfg = AgentConfig.from_env(), EngineConfig.from_env()
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
        print("preflight:")
        return 0 if report(run_checks(agent_cfg, engine_cfg)) else 1
    if command == "simulate":
        from agent.tools import simulate

        parser = argparse.ArgumentParser(prog="python -m agent simulate", description=simulate.__doc__.splitlines()[0])
        simulate.add_arguments(parser)
        args = parser.parse_args(argv[1:])
        try:
            return simulate.run(args)
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
    if command == "standby":
        from agent import standby

        try:
            return standby.main(argv[1:])
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
    if command == "recover":
        from agent import recovery

        try:
            return recovery.main(argv[1:])
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
    if command in WORKER_COMMANDS:
        from agent import worker

        try:
            return worker.run_cli(argv)
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
