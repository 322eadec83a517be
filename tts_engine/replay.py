"""`python -m tts_engine replay --model DIR --codes DUMP.npz [--out out.wav] [--mode single|stream]`.

Decodes codes saved by the engine's code dumps (TTS_CODE_DUMP_ENABLE=1, runtime/codedump.py) with the
checkpoint's codec decoder alone, offline, and writes a 24 kHz mono WAV. `single` (default) is one
unchunked pass (`CodecDecoder.forward`); `stream` steps one frame at a time exactly like the engine,
so comparing the two isolates the incremental decoder. The int16 conversion is the engine's own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from tts_engine.errors import CheckpointError
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.loader import resolve_device
from tts_engine.runtime.codedump import load_code_dump
from tts_engine.runtime.frame_step import pcm_to_int16
from tts_engine.runtime.wav import wav_bytes


def decode_codes(decoder: torch.nn.Module, codes: np.ndarray, mode: str = "single") -> np.ndarray:
    """codes [T, 16] -> int16 PCM [T * 1920] via the engine's conversion."""
    if codes.shape[0] == 0:
        return np.zeros(0, dtype=np.int16)
    device = next(iter(decoder.buffers())).device
    batch = torch.as_tensor(codes, dtype=torch.long, device=device).T[None]  # [1, 16, T]
    with torch.no_grad():
        if mode == "single":
            pcm = decoder(batch)
        elif mode == "stream":
            state = decoder.new_state(1)
            pcm = torch.cat([decoder.step(batch[:, :, t : t + 1], state) for t in range(batch.shape[2])], dim=1)
        else:
            raise ValueError(f"mode={mode!r} is not allowed; allowed values: single, stream")
    return pcm_to_int16(pcm[0])[0].cpu().numpy()


def load_decoder(model_dir: str | Path, device: str = "auto") -> torch.nn.Module:

    folder = Path(model_dir) / "speech_tokenizer"
    return CodecDecoder.from_pretrained(folder, resolve_device(device))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint directory (its speech_tokenizer/ is used)")
    parser.add_argument("--codes", required=True, help="a code dump .npz written by the engine")
    parser.add_argument("--out", help="WAV to write (default: next to the dump, .wav)")
    parser.add_argument("--mode", choices=("single", "stream"), default="single")
    parser.add_argument("--device", default="auto")


def run(args: argparse.Namespace) -> int:
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
