"""Audio rules shared by the format, the callers and the scoring: one rate, one frame, one "voiced" rule.

- Every clip is 48 kHz mono 16-bit PCM (`RATE`); callers publish it in 10 ms frames (`FRAME`).
- A sample is *voiced* when it lies in a 10 ms frame at or above `VOICED_DB` dBFS (RMS) and its own magnitude
  reaches that level: -50 dBFS is the page's end-of-speech level (web/app.js EnergyVad) and the worker's quiet
  gate (agent/config.py QUIET_DB), so "the last voiced sample" means the same thing at the caller and the agent.
- `read_wav(path)` returns the samples or raises `WavError` saying what is wrong and how to convert the file.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from agent.config import QUIET_DB
from lab.callbench.speech import RATE

FRAME = RATE // 100  # 10 ms
VOICED_DB = QUIET_DB  # the worker's quiet gate: quieter is silence
_VOICED_AMPLITUDE = 32768.0 * 10 ** (VOICED_DB / 20)


class WavError(ValueError):
    pass


def read_wav(path: Path) -> np.ndarray:
    """The int16 samples of a 48 kHz mono 16-bit PCM WAV."""
    convert = f"(convert with: sox IN.wav -r {RATE} -c 1 -b 16 OUT.wav)"
    try:
        with wave.open(str(path)) as w:
            rate, channels, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            data = w.readframes(n)
    except FileNotFoundError:
        raise WavError(f"{path} does not exist") from None
    except (wave.Error, EOFError) as exc:
        raise WavError(f"{path} is not a PCM WAV file ({exc}) {convert}") from None
    if rate != RATE:
        raise WavError(f"{path} is {rate} Hz; clips must be {RATE} Hz {convert}")
    if channels != 1:
        raise WavError(f"{path} has {channels} channels; clips must be mono {convert}")
    if width != 2:
        raise WavError(f"{path} has {8 * width}-bit samples; clips must be 16-bit PCM {convert}")
    if n == 0:
        raise WavError(f"{path} holds no samples")
    return np.frombuffer(data, dtype=np.int16)


def write_wav(path: Path, pcm: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.asarray(pcm, dtype=np.int16).tobytes())


def level_db(pcm: np.ndarray) -> float:
    """RMS level in dBFS (-inf for digital silence)."""
    x = np.asarray(pcm, dtype=np.float32) / 32768.0
    rms = float(np.sqrt(np.mean(x * x))) if x.size else 0.0
    return 20.0 * np.log10(rms) if rms > 0 else float("-inf")


def frame_levels(pcm: np.ndarray) -> np.ndarray:
    """dBFS of each whole 10 ms frame (a last partial frame counts as one)."""
    n = -(-len(pcm) // FRAME)
    padded = np.zeros(n * FRAME, dtype=np.float32)
    padded[: len(pcm)] = pcm
    rms = np.sqrt(np.mean((padded.reshape(n, FRAME) / 32768.0) ** 2, axis=1))
    with np.errstate(divide="ignore"):
        return 20.0 * np.log10(rms)


def voiced_span(pcm: np.ndarray) -> tuple[int, int] | None:
    """(first, last) voiced sample index, or None when no frame reaches `VOICED_DB`."""
    loud = np.flatnonzero(frame_levels(pcm) >= VOICED_DB)
    if loud.size == 0:
        return None
    first_frame = pcm[loud[0] * FRAME : (loud[0] + 1) * FRAME]
    last_frame = pcm[loud[-1] * FRAME : (loud[-1] + 1) * FRAME]
    above_first = np.flatnonzero(np.abs(first_frame.astype(np.int32)) >= _VOICED_AMPLITUDE)
    above_last = np.flatnonzero(np.abs(last_frame.astype(np.int32)) >= _VOICED_AMPLITUDE)
    first = loud[0] * FRAME + (int(above_first[0]) if above_first.size else 0)
    last = loud[-1] * FRAME + (int(above_last[-1]) if above_last.size else FRAME - 1)
    return first, min(last, len(pcm) - 1)
