"""Offline decoding of dumped codes, behind `python -m tts_engine replay` (its command line: replay_cli.py).

Decodes codes saved by the engine's code dumps (TTS_CODE_DUMP_ENABLE=1, runtime/codedump.py) with the
checkpoint's codec decoder alone, offline, and writes a 24 kHz mono WAV. `single` (default) is one
unchunked pass (`CodecDecoder.forward`); `stream` steps one frame at a time exactly like the engine,
so comparing the two isolates the incremental decoder. The int16 conversion is the engine's own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tts_engine.model.codec import CodecDecoder
from tts_engine.model.layout import CODEC_DIR
from tts_engine.model.loader import resolve_device
from tts_engine.runtime.frame_step import pcm_to_int16


def decode_codes(decoder: CodecDecoder, codes: np.ndarray, mode: str = "single") -> np.ndarray:
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


def load_decoder(model_dir: str | Path, device: str = "auto") -> CodecDecoder:
    folder = Path(model_dir) / CODEC_DIR
    return CodecDecoder.from_pretrained(folder, resolve_device(device))
