"""`python -m tts_engine check --model DIR`: the checkpoint doctor's command line (doctor.py does the work).

- Prints `ok: DIR (...)` and exits 0, or each problem as one `error:` line on stderr and exits 2.
- Standard library only at the top: `--help` works where torch is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint directory (real Hugging Face layout)")


def run(args: argparse.Namespace) -> int:
    from tts_engine.doctor import diagnose  # torch and safetensors: after --help, only to do the work

    diag = diagnose(args.model)
    if diag.problems:
        for problem in diag.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{Path(p).relative_to(diag.model_dir)}: {n} tensors" for p, n in diag.tensors.items())
    print(f"ok: {diag.model_dir} ({counts}; configs agree with every tensor shape)")
    return 0
