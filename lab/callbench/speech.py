"""Test speech: espeak-ng says a sentence, padded with silence, as a 48 kHz mono 16-bit WAV.

Chromium loops a fake-capture file, so the silence after the sentence is the time the agent has to
answer before the "user" speaks again; a short gap makes the next sentence land while the agent talks
(a barge-in).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

RATE = 48_000  # what WebRTC (Opus) carries: the lab's callers speak and listen at it; defined here only


def speak(text: str, *, voice: str = "en-us", words_per_minute: int = 165, pitch: int | None = None) -> np.ndarray:
    """espeak-ng's speech for `text` as int16 samples at 48 kHz (`pitch` 0..99, espeak's default 50)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng is not installed (Debian package espeak-ng; scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "speech.wav"
        pitch_args = [] if pitch is None else ["-p", str(pitch)]
        subprocess.run([exe, "-v", voice, "-s", str(words_per_minute), *pitch_args, "-w", str(raw), text], check=True)
        with wave.open(str(raw)) as w:
            rate = w.getframerate()
            samples = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32)
    positions = np.arange(0, len(samples), rate / RATE)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.int16)


def speech_wav(path: Path, text: str, *, lead_s: float = 0.5, silence_after_s: float = 8.0) -> dict[str, float]:
    """Write lead silence + speech + trailing silence to `path`; returns the layout in seconds."""
    speech = speak(text)
    lead = np.zeros(int(lead_s * RATE), dtype=np.int16)
    tail = np.zeros(int(silence_after_s * RATE), dtype=np.int16)
    pcm = np.concatenate([lead, speech, tail])
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return {"lead_s": lead_s, "speech_s": len(speech) / RATE, "loop_s": len(pcm) / RATE}
