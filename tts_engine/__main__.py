"""`python -m tts_engine <command>`: one entry point, each command in its own module.

A command module exposes `add_arguments(parser)` and `run(args) -> int`; it is imported only when its command is
used, and imports only the standard library and light tts_engine modules at its top (heavy ones: torch, numpy,
aiohttp, inside `run`), so every `--help` works, and fast, on a machine where those are missing
(tests/server/test_cli_help.py). A CPU machine never imports CUDA-only code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "make-checkpoint": ("tts_engine.make_checkpoint_cli", "write a random-weight checkpoint in the real HF layout"),
    "check": ("tts_engine.doctor_cli", "validate a checkpoint: configs against tensor headers, no weights loaded"),
    "synthesize": ("tts_engine.synthesize_cli", "offline synthesis of one text to a 24 kHz WAV"),
    "serve": ("tts_engine.server.cli", "HTTP server: /tts/stream, /v1/audio/speech, /tts/ws, /healthz, /metrics"),
    "regression": ("tts_engine.regression_cli", "regression suite and release gates; writes summary.json"),
    "replay": ("tts_engine.replay_cli", "decode dumped codes offline to WAV"),
    "bench": ("tts_engine.bench.cli", "GPU benchmarks (CUDA only)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tts_engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        parser.error(f"unknown command {name!r}; choose from: {', '.join(COMMANDS)}")
    module = importlib.import_module(COMMANDS[name][0])
    cmd_parser = argparse.ArgumentParser(prog=f"python -m tts_engine {name}", description=COMMANDS[name][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
