"""The engine's audio format, defined once: 24 kHz mono int16 PCM in 80 ms codec frames.

- One codec frame (12.5 frames per second) decodes to `SAMPLES_PER_FRAME` samples at `SAMPLE_RATE`.
- A packet is a run of whole frames: 1..`MAX_PACKET_FRAMES` of them (`packet_frames`, `first_packet_frames`).
- PCM is little-endian signed 16-bit (`SAMPLE_WIDTH` bytes), `CHANNELS` channel.
Every module of `tts_engine` imports these names from here; nothing else defines them.
"""

from __future__ import annotations

SAMPLE_RATE = 24_000
SAMPLES_PER_FRAME = 1920  # one codec frame = 80 ms
FRAME_MS = SAMPLES_PER_FRAME * 1000 // SAMPLE_RATE
FRAMES_PER_SECOND = SAMPLE_RATE / SAMPLES_PER_FRAME  # 12.5
SAMPLE_WIDTH = 2  # bytes per sample (int16)
CHANNELS = 1
MAX_PACKET_FRAMES = 64  # the largest packet a request may ask for (5.12 s)


def frames_to_seconds(frames: int) -> float:
    return frames * SAMPLES_PER_FRAME / SAMPLE_RATE


def samples_to_seconds(samples: int) -> float:
    return samples / SAMPLE_RATE
