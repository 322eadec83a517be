"""`python -m tts_engine regression --mode fast|full --out DIR`: the command line of the regression suite.

Contract: the arguments only, with the standard library, so `--help` works before numpy or torch load; `run` imports
the suite (tts_engine/regression.py: the cases, the gates, summary.json) and runs it. Exit status 0 when every gate
passes, 1 when one fails, 2 on a configuration error.
"""

from __future__ import annotations

import argparse

MODES = ("fast", "full")  # tts_engine/regression.py MODES says what each runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="fast")
    parser.add_argument("--model", help="checkpoint directory (TTS_DEEP_STREAM_MODEL_DIR)")
    parser.add_argument("--out", required=True, help="output folder (summary.json, WAVs, code dumps)")
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float16", "float32"))
    parser.add_argument("--baseline", help="golden summary.json (default: TTS_REGRESSION_BASELINE)")
    parser.add_argument("--runs", type=int, help="determinism runs per case (default: fast 3, full 10)")
    parser.add_argument("--max-frames", type=int, help="fixed frame cap per run (random-weight checkpoints)")
    parser.add_argument("--ttfa-target-ms", type=float, help="override the device's TTFA P95 target")
    parser.add_argument("--env-file", default=".env")


def run(args: argparse.Namespace) -> int:
    from tts_engine import regression  # heavy (numpy, the engine: torch): imported once the arguments are parsed

    return regression.run(args)
