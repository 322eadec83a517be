"""Packetizer: groups decoded codec frames (1920 int16 samples each) into packets.

Contract: the first packet holds `first_packet_frames` frames (a small first packet cuts time-to-first-
audio), every later packet `packet_frames`, and `flush()` returns the remainder when the stream ends.
It only regroups samples that already exist; it never touches their values, so concatenating the
packets gives the same bytes whatever the packet sizes are (the decoder runs at a fixed one-frame
granularity upstream of this class).
"""

from __future__ import annotations

import numpy as np

from common.audio_format import SAMPLES_PER_FRAME


class Packetizer:
    def __init__(self, first_packet_frames: int, packet_frames: int) -> None:
        if first_packet_frames < 1:
            raise ValueError(f"first_packet_frames={first_packet_frames} must be >= 1")
        if packet_frames < 1:
            raise ValueError(f"packet_frames={packet_frames} must be >= 1")
        self.first_packet_frames = first_packet_frames
        self.packet_frames = packet_frames
        self._pending: list[np.ndarray] = []
        self.packets_out = 0

    @property
    def _target(self) -> int:
        return self.first_packet_frames if self.packets_out == 0 else self.packet_frames

    @property
    def pending_frames(self) -> int:
        return len(self._pending)

    @property
    def next_packet_frames(self) -> int:
        """Frames the next packet will hold (the scheduler's deadline estimate uses it)."""
        return self._target

    def push(self, frame_pcm: np.ndarray) -> np.ndarray | None:
        """Add one frame; returns a packet's PCM (frames * 1920 samples) when one is complete."""
        if frame_pcm.shape != (SAMPLES_PER_FRAME,):
            raise ValueError(f"a frame has {SAMPLES_PER_FRAME} samples, got shape {frame_pcm.shape}")
        self._pending.append(frame_pcm)
        if len(self._pending) >= self._target:
            return self._emit()
        return None

    def flush(self) -> np.ndarray | None:
        """The last, possibly shorter, packet (None when nothing is pending)."""
        return self._emit() if self._pending else None

    def _emit(self) -> np.ndarray:
        pcm = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0].copy()
        self._pending = []
        self.packets_out += 1
        return pcm
