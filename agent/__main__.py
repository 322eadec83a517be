"""`python -m agent <command>` (`--help` lists the commands, `COMMAND --help` each one's options).

- `preflight`: what is missing to run the stack (weights, LiveKit, vLLM) and which parts run as embedded defaults.
- `dev` / `start`: the LiveKit worker (agent/worker.py) through LiveKit's current entry point,
  `python -m livekit.agents start agent/app.py` (`dev` adds `--dev`: colored DEBUG logs, no drain on exit).
- `download-files`: LiveKit's own `python -m livekit.agents download-files` (the plugins' model files).
- `simulate --turns N [--barge-in] --out DIR`: a complete call without a LiveKit server (lab/simulate.py).
- `stress --rounds N --out DIR` / `stress --turns N --out DIR`: the barge-in stress run and the soak (lab/stress.py).
- `trace-review FILES... [--plot PNG]`: P50/P95 per trace segment and the slowest turns (lab/trace_review.py).
  The lab ships with a source checkout, not in the worker's package: these three run `python -m lab.<module>` in a
  process of their own, so the worker never imports the lab, and say so clearly when the lab is not there.
- `standby --fifo PATH [COMMAND ...]`: a worker that has done its slow imports and waits for its supervisor's `go`
  to run COMMAND (`start`) in place of a dead worker (agent/standby.py; scripts/run_worker.sh starts it).
- `recover [--pid PID] [--reason TEXT]`: after a worker died: close its open turns (`worker_lost`) and take its
  agents out of their rooms (agent/recovery.py; scripts/run_worker.sh runs it).
- `console`, `connect`: accepted by LiveKit's deprecated CLI, refused here with a message that says why and what
  to use instead (exit 2).
Heavy modules (the worker, torch) are imported only by the command that runs, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common.env import ConfigError, load_dotenv

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "CRITICAL")
COMMANDS = {  # one line each in --help
    "preflight": "check what the stack needs (weights, LiveKit, vLLM) and which parts run as embedded defaults",
    "dev": "run the worker in development mode (colored DEBUG logs, no drain on exit)",
    "start": "run the worker in production mode (JSON logs; on SIGTERM calls drain for AGENT_DRAIN_TIMEOUT_S)",
    "download-files": "fetch the model files LiveKit's plugins need ahead of a start (none today: Silero's ships)",
    "simulate": "a complete call without LiveKit: espeak-ng speech, fake vLLM, the real engine (traces + summary)",
    "stress": "many simulated calls with barge-ins at random and at reply milestones, or a long soak (the lab's)",
    "trace-review": "P50/P95 per latency segment and the slowest turns from traces/*.jsonl (--plot draws them)",
    "standby": "a worker with its imports done, waiting for its supervisor's 'go' to replace a dead one",
    "recover": "after a worker died: close its open turns as worker_lost and take its agents out of their rooms",
    "console": "not supported: says why (LiveKit's console replaces this agent's audio path) and what to use",
    "connect": "not supported: says why (rooms get this agent by dispatch) and how to dispatch it into a room",
}
CONSOLE_REFUSAL = """\
python -m agent console: not supported by this worker.
LiveKit Agents 1.8.9's console is driven by the LiveKit CLI (`lk agent console`, Go, not installed by
setup), and it swaps the session's audio output for its own: this agent's output (the barge-in cut,
the exact 20 ms frames, the trace's first_frame_published) would not run. To talk to the agent:
  scripts/demo.sh, then open the printed URL          (the browser page, your microphone)
  python -m agent simulate --turns 3 --out /tmp/sim    (a scripted call without LiveKit: no microphone needed)"""
CONNECT_REFUSAL = """\
python -m agent connect: not supported by this worker.
LiveKit Agents 1.8.9 dropped `connect` from its current CLI. This worker joins a room when LiveKit
dispatches it there by name (AGENT_NAME): a token from the token server carries that dispatch, or
dispatch it into any room with LiveKit's API, e.g. `lk dispatch create --agent-name voice-agent
--room NAME`, or livekit-api's `LiveKitAPI().agent_dispatch.create_dispatch(...)`, with `python -m agent
start` running."""
REFUSALS = {"console": CONSOLE_REFUSAL, "connect": CONNECT_REFUSAL}
# run as `python -m MODULE` in a process of their own
LAB_COMMANDS = {"simulate": "lab.simulate", "stress": "lab.stress", "trace-review": "lab.trace_review"}
CHECKOUT = Path(__file__).resolve().parents[1]  # a source checkout's root: lab/ sits here beside agent/


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agent",
        description="The voice agent's LiveKit worker and its tools.",
        epilog="Settings come from the environment and .env (ENV_FILE); see .env.example and docs/agent.md.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser("preflight", help=COMMANDS["preflight"], description=COMMANDS["preflight"])
    for name in ("dev", "start"):
        worker = sub.add_parser(name, help=COMMANDS[name], description=COMMANDS[name])
        worker.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS,
                            help="LiveKit's log level (default: LIVEKIT_LOG_LEVEL, else %s)"
                            % ("DEBUG" if name == "dev" else "INFO"))
        worker.add_argument("--url", help="LiveKit server URL (default: LIVEKIT_URL)")
        worker.add_argument("--api-key", help="LiveKit API key (default: LIVEKIT_API_KEY)")
        worker.add_argument("--api-secret", help="LiveKit API secret (default: LIVEKIT_API_SECRET)")
    sub.add_parser("download-files", help=COMMANDS["download-files"], description=COMMANDS["download-files"])
    # their options belong to the lab's modules (lab/simulate.py, stress.py, trace_review.py): main() hands them over
    for name in LAB_COMMANDS:
        sub.add_parser(name, help=COMMANDS[name], add_help=False)
    # their options belong to agent/standby.py and agent/recovery.py: main() parses them there
    sub.add_parser("standby", help=COMMANDS["standby"], add_help=False)
    sub.add_parser("recover", help=COMMANDS["recover"], add_help=False)
    for name in REFUSALS:  # main() answers them whatever their options (LiveKit's had many)
        sub.add_parser(name, help=COMMANDS[name], add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in LAB_COMMANDS:
        return run_lab(argv[0], argv[1:])
    if argv[:1] == ["standby"]:
        from agent import standby

        command = standby.wait_for_go(argv[1:])  # the worker's slow imports, then the supervisor's word
        return 0 if command is None else main(command)
    if argv[:1] == ["recover"]:
        load_dotenv(os.environ.get("ENV_FILE") or ".env")
        from agent import recovery

        try:
            return recovery.main(argv[1:])
        except ConfigError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
    if argv and argv[0] in REFUSALS:
        if {"-h", "--help"} & set(argv[1:]):
            print(REFUSALS[argv[0]])
            return 0
        print(REFUSALS[argv[0]], file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.command == "download-files":
        from livekit.agents.__main__ import main as livekit_main  # it imports every installed livekit.plugins.*

        return livekit_main(["download-files"])
    load_dotenv(os.environ.get("ENV_FILE") or ".env")  # the same file scripts/start_all.sh reads
    try:
        if args.command == "preflight":
            from agent.config import AgentConfig
            from agent.preflight import report, run_checks
            from tts_engine import EngineConfig

            agent_cfg, engine_cfg = AgentConfig.from_env(), EngineConfig.from_env()
            print("preflight:")
            return 0 if report(run_checks(agent_cfg, engine_cfg)) else 1
        from agent import worker

        return worker.run_cli(dev=args.command == "dev", log_level=args.log_level, url=args.url,
                              api_key=args.api_key, api_secret=args.api_secret)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2


def run_lab(command: str, argv: list[str]) -> int:
    """`python -m agent simulate|stress|trace-review ...`: the lab's module in a child process, its exit status."""
    module = LAB_COMMANDS[command]
    if not (CHECKOUT / "lab" / "__init__.py").is_file():
        print(f"python -m agent {command}: the lab (lab/, beside agent/ in a source checkout) is not here; "
              f"this command needs the project's source tree (git clone, then scripts/setup.sh)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
