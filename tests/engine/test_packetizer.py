"""Packetizer: sizes of the first and later packets, remainder on flush, samples untouched."""

from __future__ import annotations

import numpy as np
import pytest

from tts_engine.runtime.packetizer import SAMPLES_PER_FRAME, Packetizer


@pytest.mark.parametrize(("first", "size", "frames"), [(1, 2, 7), (1, 1, 3), (3, 2, 2), (2, 4, 11), (5, 5, 10)])
def test_packet_sizes_and_bytes(first: int, size: int, frames: int) -> None:
    rng = np.random.default_rng(0)
    frame_pcm = [rng.integers(-32768, 32767, SAMPLES_PER_FRAME, dtype=np.int16) for _ in range(frames)]
    packer = Packetizer(first, size)
    packets = [p for f in frame_pcm if (p := packer.push(f)) is not None]
    tail = packer.flush()
    if tail is not None:
        packets.append(tail)
    sizes = [len(p) // SAMPLES_PER_FRAME for p in packets]
    expected = [min(first, frames)]
    left = frames - expected[0]
    while left > 0:
        expected.append(min(size, left))
        left -= expected[-1]
    assert sizes == expected
    assert np.array_equal(np.concatenate(packets), np.concatenate(frame_pcm))
    assert packer.flush() is None


def test_rejects_bad_sizes_and_frames() -> None:
    with pytest.raises(ValueError, match="first_packet_frames"):
        Packetizer(0, 2)
    with pytest.raises(ValueError, match="packet_frames"):
        Packetizer(1, 0)
    with pytest.raises(ValueError, match="1920"):
        Packetizer(1, 1).push(np.zeros(100, dtype=np.int16))
