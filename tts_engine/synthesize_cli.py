"""`python -m tts_engine synthesize`: offline synthesis of one text to a 24 kHz mono 16-bit WAV.

Contract: loads the checkpoint (`--model`), generates codes frame by frame with `CodeGenerator` (greedy by default,
`--sample` uses generation_config.json's sampling with `--seed`), decodes them with the codec decoder's streaming
step in fixed chunks (an exact continuation of the single-pass decode), and writes exactly frames x 1920 samples.
Progress goes to stderr about once a second, so long texts show that work is happening. Bad input (unknown
speaker/language, empty text, missing checkpoint, a bad TTS_* value) prints one line naming the problem and exits
with status 2. Positions per stream (prompt + frames): `TTS_DEEP_STREAM_MAX_POSITIONS`, default 4,096 here (one
offline stream can afford more than each of the server's many slots, whose default is 768).
"""

from __future__ import annotations

import argparse
import sys

from tts_engine.errors import CheckpointError, TTSInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint directory (real HF layout)")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="text to speak")
    text.add_argument("--text-file", help="read the text from this UTF-8 file")
    parser.add_argument("--speaker", default="serena", help="CustomVoice speaker (default: serena)")
    parser.add_argument("--language", default="auto", help="language or auto (default: auto)")
    parser.add_argument("--instruct", default=None, help="style instruction (1.7B models only; ignored on 0.6B)")
    parser.add_argument("--out", required=True, help="output WAV path")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"))
    parser.add_argument("--sample", action="store_true", help="sample with generation_config.json defaults")
    parser.add_argument("--seed", type=int, default=42, help="seed for --sample (per-stream, reproducible)")
    parser.add_argument("--max-frames", type=int, default=None, help="override the text-length frame cap")


def run(args: argparse.Namespace) -> int:
    from tts_engine.synthesize import synthesize  # torch and the model: after --help, only to do the work

    try:
        return synthesize(args)
    except (CheckpointError, TTSInputError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
