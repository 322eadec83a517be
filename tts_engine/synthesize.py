"""Offline synthesis of one text to a 24 kHz mono 16-bit WAV, behind `python -m tts_engine synthesize` (its command
line: synthesize_cli.py).

- Loads the checkpoint, generates codes frame by frame with `CodeGenerator` (greedy, or sampled with a seed),
  decodes them with the codec decoder's streaming step in fixed chunks (an exact continuation of the single-pass
  decode) and writes exactly frames x 1920 samples; progress to stderr about once a second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from common.env import Env
from tts_engine.model.loader import load_model
from tts_engine.runtime.codegen import CodeGenerator, SamplingParams
from tts_engine.runtime.wav import wav_bytes

DECODE_CHUNK_FRAMES = 25
DEFAULT_MAX_POSITIONS = 4096


def synthesize(args: argparse.Namespace) -> int:
    """The command's work, its arguments parsed (synthesize_cli.py): the WAV written, 0 returned."""
    max_positions = Env().int("TTS_DEEP_STREAM_MAX_POSITIONS", DEFAULT_MAX_POSITIONS, lo=128, hi=32768)
    text = Path(args.text_file).read_text(encoding="utf-8") if args.text_file else args.text
    start = time.monotonic()
    model = load_model(args.model, device=args.device, dtype=args.dtype)
    load_s = time.monotonic() - start
    gen = CodeGenerator(model, max_slots=1, max_seq_len=max_positions)
    prompt = gen.prepare(text, args.speaker, args.language, instruct=args.instruct, max_frames=args.max_frames)
    if args.sample:
        params = SamplingParams.from_generation_config(model.config, seed=args.seed)
    else:
        params = SamplingParams.greedy(repetition_penalty=model.config.generation.repetition_penalty)
    print(f"loaded {args.model} on {model.device} ({model.dtype}) in {load_s:.1f} s; prompt {prompt.embeds.shape[0]} "
          f"positions, {prompt.n_text_tokens} text tokens, cap {prompt.max_frames} frames, max_seq_len {max_positions}",
          file=sys.stderr)

    gen_start = time.monotonic()
    last_report = gen_start
    frames: list[torch.Tensor] = []
    with torch.no_grad():
        gen.admit(0, prompt, params)
        for _ in range(prompt.max_frames):
            codes, done = gen.step(1)
            ended = bool(done[0])
            if not (ended and int(codes[0, 0]) == model.config.codec_eos_id):
                frames.append(codes[0].clone())
            if time.monotonic() - last_report > 1.0:
                last_report = time.monotonic()
                print(f"  {len(frames)} frames ({len(frames) * 0.08:.1f} s of audio)", file=sys.stderr, flush=True)
            if ended:
                break
        gen.release(0)
        gen_s = time.monotonic() - gen_start
        if not frames:
            raise ValueError("the model produced no audio frames (EOS at the first frame)")
        all_codes = torch.stack(frames).T[None]  # [1, 16, T]
        dec_start = time.monotonic()
        state = model.codec.new_state(1)
        pcm = torch.cat([
            model.codec.step(all_codes[:, :, i : i + DECODE_CHUNK_FRAMES], state)
            for i in range(0, all_codes.shape[2], DECODE_CHUNK_FRAMES)
        ], dim=1)[0]
        dec_s = time.monotonic() - dec_start
    samples = np.clip(pcm.float().cpu().numpy(), -1.0, 1.0)
    assert samples.shape[0] == len(frames) * SAMPLES_PER_FRAME
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(wav_bytes(np.round(samples * 32767.0).astype(np.int16)))
    audio_s = samples.shape[0] / SAMPLE_RATE
    print(f"wrote {out}: {len(frames)} frames, {samples.shape[0]} samples ({audio_s:.2f} s); codegen {gen_s:.2f} s, "
          f"decode {dec_s:.2f} s, RTF {(gen_s + dec_s) / audio_s:.3f}")
    return 0
