"""`python -m tts_engine replay --model DIR --codes DUMP.npz [--out out.wav] [--mode single|stream]`.

Contract: decodes a code dump (tts_engine/replay.py) and writes a 24 kHz mono WAV next to it (or `--out`), printing
one JSON line (out, frames, samples, mode, and the dump's request id, speaker, language, end reason). Only the
standard library at the top, so `--help` works before numpy or torch load. Exit status 2 for a bad dump or checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tts_engine.errors import CheckpointError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint directory (its speech_tokenizer/ is used)")
    parser.add_argument("--codes", required=True, help="a code dump .npz written by the engine")
    parser.add_argument("--out", help="WAV to write (default: next to the dump, .wav)")
    parser.add_argument("--mode", choices=("single", "stream"), default="single")
    parser.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
    # heavy (numpy, torch): imported once the arguments are parsed
    from tts_engine.replay import decode_codes, load_decoder
    from tts_engine.runtime.codedump import load_code_dump
    from tts_engine.runtime.wav import wav_bytes

    try:
        codes, meta = load_code_dump(args.codes)
        decoder = load_decoder(args.model, args.device)
    except (ValueError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pcm = decode_codes(decoder, codes, args.mode)
    out = Path(args.out) if args.out else Path(args.codes).with_suffix(".wav")
    out.write_bytes(wav_bytes(pcm))
    info = {"out": str(out), "frames": int(codes.shape[0]), "samples": int(pcm.shape[0]), "mode": args.mode}
    info.update({k: meta[k] for k in ("request_id", "speaker", "language", "end_reason") if k in meta})
    print(json.dumps(info, ensure_ascii=False))
    return 0
