"""Test clips: a 220 Hz tone with silence around it, written as a WAV of any rate and channel count."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from lab.convbench.audio import RATE


def tone(path: Path, seconds: float = 0.5, *, rate: int = RATE, channels: int = 1, level: float = 0.2,
         lead_s: float = 0.1) -> Path:  # fmt: skip
    t = np.arange(int(seconds * rate)) / rate
    x = (level * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    x = np.concatenate([np.zeros(int(lead_s * rate), np.int16), x, np.zeros(int(lead_s * rate), np.int16)])
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(x, channels).tobytes())
    return path
