"""`python -m lab.callbench --turns 10 --out DIR`: voice-to-voice latency and barge-in, measured in a browser.

Starts the local stack (scripts/start_all.sh on free ports, embedded defaults), calls it from headless
Chromium with a WAV of questions as the microphone, and writes DIR/callbench.json and DIR/callbench.md
(lab/callbench/bench.py says what is measured). Exit 0 when every question was heard and answered and
both latency targets hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from lab.callbench.bench import markdown, run, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.callbench", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="questions in the call (default 10)")
    parser.add_argument("--gap", type=float, default=7.0, help="seconds after each question (default 7)")
    parser.add_argument("--out", type=Path, required=True, help="folder for callbench.json and callbench.md")
    parser.add_argument("--text-input", choices=("segments", "tokens"), default="tokens",
                        help="how the agent hands LLM text to the engine (TTS_TEXT_INPUT; default tokens)")
    args = parser.parse_args(argv)
    if not 1 <= args.turns <= 50:
        parser.error(f"--turns={args.turns} is out of range (allowed: 1..50)")
    if not 3.0 <= args.gap <= 60.0:
        parser.error(f"--gap={args.gap} is out of range (allowed: 3..60 seconds)")
    with tempfile.TemporaryDirectory(prefix="callbench-") as tmp:
        report = run(Path(tmp), turns=args.turns, gap_s=args.gap, text_input=args.text_input)
    write(report, args.out)
    print(markdown(report))
    c = report["counts"]
    ok = c["transcripts"] == c["replies_heard"] == c["traces_complete"] == args.turns and c["errors"] == 0
    return 0 if ok and all(v == "pass" for v in report["verdict"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
