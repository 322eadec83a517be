"""The simulated user's microphone for the harness runs (simulate, stress, instants).

`WavMicrophone` is a LiveKit `AudioInput` that plays queued utterances in real time as 10 ms 16 kHz frames
with silence between them, paced by the wall clock like a real microphone, so the real Silero VAD and the
session see speech exactly as a call would; `play()` returns a future holding the time its last frame went
out (the user's end of speech). `espeak_pcm` speaks a line with espeak-ng (cached as a WAV) at 16 kHz.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
import wave
from collections import deque
from pathlib import Path

import numpy as np
from livekit import rtc
from livekit.agents.voice import io

from common.audio_format import SPEECH_SAMPLE_RATE

MIC_RATE = SPEECH_SAMPLE_RATE
MIC_FRAME_MS = 10


class WavMicrophone(io.AudioInput):
    """An `AudioInput` that plays queued utterances in real time as 10 ms 16 kHz frames, silence between."""

    def __init__(self) -> None:
        super().__init__(label="sim-microphone")
        self.spf = MIC_RATE * MIC_FRAME_MS // 1000
        self._queue: deque[tuple[np.ndarray, asyncio.Future[float]]] = deque()
        self._current: tuple[np.ndarray, asyncio.Future[float]] | None = None
        self._pos = 0
        self._t_next: float | None = None
        self._closed = False
        self._silence = np.zeros(self.spf, dtype=np.int16)

    def play(self, pcm: np.ndarray) -> asyncio.Future[float]:
        """Queue an utterance; the future resolves with the perf_counter time its last frame went out."""
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._queue.append((pcm.astype(np.int16), fut))
        return fut

    def close(self) -> None:
        self._closed = True

    async def __anext__(self) -> rtc.AudioFrame:
        if self._closed:
            raise StopAsyncIteration
        now = time.perf_counter()
        if self._t_next is None:
            self._t_next = now
        delay = self._t_next - now
        if delay > 0:
            await asyncio.sleep(delay)
        self._t_next += MIC_FRAME_MS / 1000
        if self._current is None and self._queue:
            self._current, self._pos = self._queue.popleft(), 0
        chunk = self._silence
        if self._current is not None:
            pcm, fut = self._current
            chunk = pcm[self._pos : self._pos + self.spf]
            self._pos += self.spf
            if chunk.size < self.spf:
                chunk = np.concatenate([chunk, np.zeros(self.spf - chunk.size, dtype=np.int16)])
            if self._pos >= pcm.size:
                if not fut.done():
                    fut.set_result(time.perf_counter())
                self._current = None
        return rtc.AudioFrame(chunk.tobytes(), MIC_RATE, 1, self.spf)


def espeak_pcm(text: str, cache_dir: Path) -> np.ndarray:
    """16 kHz int16 speech for `text`, made with espeak-ng (cached as WAV)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng); the simulator speaks with it")
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{uuid.uuid5(uuid.NAMESPACE_OID, text).hex[:16]}.wav"
    if not path.exists():
        subprocess.run([exe, "-s", "160", "-w", str(path), text], check=True, capture_output=True)
    with wave.open(str(path)) as w:
        rate, data = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    frame = rtc.AudioFrame(data.tobytes(), rate, 1, data.size)
    resampler = rtc.AudioResampler(input_rate=rate, output_rate=MIC_RATE, num_channels=1)
    out = resampler.push(frame) + resampler.flush()
    return np.frombuffer(rtc.combine_audio_frames(out).data, dtype=np.int16).copy()
