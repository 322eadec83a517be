"""`python -m tts_engine make-checkpoint --preset tiny|0.6b|1.7b --out DIR [--seed N]`.

Contract: writes a random-weight checkpoint in the real Hugging Face layout (tts_engine/model/factory.py) and prints
its size and build time. Only the standard library at the top, so `--help` works before torch loads.
"""

from __future__ import annotations

import argparse
import sys
import time

from tts_engine.model.layout import PRESETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, choices=PRESETS, help="tiny (CPU tests) or a real model shape")
    parser.add_argument("--out", required=True, help="output directory (created)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed -> same files)")


def run(args: argparse.Namespace) -> int:
    from tts_engine.model.factory import make_checkpoint  # heavy (torch): imported once the arguments are parsed

    start = time.monotonic()
    print(f"building {args.preset} checkpoint in {args.out} (seed {args.seed})", file=sys.stderr)
    out = make_checkpoint(args.preset, args.out, seed=args.seed, progress=args.preset != "tiny")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({size / 1e6:.1f} MB) in {time.monotonic() - start:.1f} s")
    return 0
