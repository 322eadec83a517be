"""espeak-ng sentences as int16 PCM at any rate, with silence around them: the speech the VAD tests hear."""

from __future__ import annotations

import numpy as np


def speech(text: str, rate: int, *, lead_s: float = 0.5, noise_db: float | None = None) -> np.ndarray:
    """`text` spoken at `rate` Hz after `lead_s` of silence and before 1 s of it; over white noise at `noise_db`
    dBFS if given."""
    from lab.callbench.speech import RATE, speak

    pcm = speak(text).astype(np.float64)
    pcm = np.interp(np.arange(0, len(pcm), RATE / rate), np.arange(len(pcm)), pcm)
    pcm = np.concatenate([np.zeros(int(lead_s * rate)), pcm, np.zeros(rate)])
    if noise_db is not None:
        pcm += np.random.default_rng(7).standard_normal(len(pcm)) * 32768 * 10 ** (noise_db / 20)
    return np.clip(pcm, -32768, 32767).astype(np.int16)
