"""The project's audio rates, defined once: the engine's 24 kHz speech, and the 16 kHz the speech models hear.

- One codec frame (12.5 frames per second) decodes to `SAMPLES_PER_FRAME` samples at `SAMPLE_RATE`.
- A packet is a run of whole frames: 1..`MAX_PACKET_FRAMES` of them (`packet_frames`, `first_packet_frames`).
- PCM is little-endian signed 16-bit (`SAMPLE_WIDTH` bytes), `CHANNELS` channel.
- `SPEECH_SAMPLE_RATE`: what the caller's speech is resampled to for the models that hear it (Silero VAD, the STT
  request's WAV, faster-whisper) and what the lab's simulated microphone plays.
Every module imports these names from here; nothing else defines them (tests/agent/test_layout.py).
"""

from __future__ import annotations

from typing import Final

SAMPLE_RATE = 24_000
SAMPLES_PER_FRAME = 1920  # one codec frame = 80 ms
FRAMES_PER_SECOND = SAMPLE_RATE / SAMPLES_PER_FRAME  # 12.5
SAMPLE_WIDTH = 2  # bytes per sample (int16)
CHANNELS = 1
MAX_PACKET_FRAMES = 64  # the largest packet a request may ask for (5.12 s)
SPEECH_SAMPLE_RATE: Final = 16_000  # the speech models' input (VAD, STT); Final: Silero's load() takes a literal


def frames_to_seconds(frames: int) -> float:
    return frames * SAMPLES_PER_FRAME / SAMPLE_RATE


def samples_to_seconds(samples: int) -> float:
    return samples / SAMPLE_RATE
