"""24 kHz mono int16 WAV bytes in and out (stdlib `wave`; used by the server, replay and regression)."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np

from common.audio_format import CHANNELS, SAMPLE_RATE, SAMPLE_WIDTH


def wav_bytes(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(CHANNELS)
        out.setsampwidth(SAMPLE_WIDTH)
        out.setframerate(sample_rate)
        out.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return buf.getvalue()


def read_wav(source: str | Path | bytes) -> tuple[np.ndarray, int]:
    """(int16 samples, sample rate) of a mono 16-bit WAV; ValueError for anything else."""
    handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
    with handle, wave.open(handle, "rb") as wav:
        if wav.getnchannels() != CHANNELS or wav.getsampwidth() != SAMPLE_WIDTH:
            raise ValueError(f"expected mono 16-bit WAV, got {wav.getnchannels()} channels, {wav.getsampwidth()} bytes")
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16), wav.getframerate()
