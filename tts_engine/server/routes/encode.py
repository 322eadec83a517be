"""Audio encoders for the HTTP routes: 24 kHz mono int16 PCM in, container bytes out, as packets arrive.

Contract: `AudioEncoder(fmt)` for fmt in `FORMATS`; `push(pcm)` returns the bytes that are ready (possibly b""),
`finish()` the rest (encoder flush and trailer). `pcm` is raw s16le passed through; every other format is encoded
by FFmpeg through PyAV (`av`), never by hand: mp3 (libmp3lame), opus (libopus in Ogg, 20 ms pages so audio leaves
as it is made), aac (ADTS), flac, wav (pcm_s16le). Streamed (the default), the output is never seeked, so a WAV's
RIFF sizes are the open-ended placeholder 0xFFFFFFFF that players accept (and FLAC's STREAMINFO has no total).
`AudioEncoder(fmt, whole=True)` writes into a seekable buffer and hands everything out at `finish()`: the muxer
then fills in the real sizes (a WAV that `wave` reads to the right length). Encoding runs on the calling thread:
about 1-2 ms of CPU per 80 ms packet for mp3/aac, less for the others (PyAV releases the GIL inside FFmpeg).
"""

from __future__ import annotations

import io
from typing import Any

import av
import numpy as np

from common.audio_format import SAMPLE_RATE

#: format -> (container, codec, MIME type), in the order OpenAI lists them
FORMATS: dict[str, tuple[str, str, str]] = {
    "mp3": ("mp3", "libmp3lame", "audio/mpeg"),
    "opus": ("ogg", "libopus", "audio/ogg"),
    "aac": ("adts", "aac", "audio/aac"),
    "flac": ("flac", "flac", "audio/flac"),
    "wav": ("wav", "pcm_s16le", "audio/wav"),
    "pcm": ("", "", "audio/pcm"),
}


class _Sink:
    """A write-only, non-seekable file object collecting what the muxer writes."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def write(self, data: Any) -> int:
        self.buf += bytes(data)
        return len(data)

    def take(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


class AudioEncoder:
    def __init__(self, fmt: str, *, whole: bool = False) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r} is not supported; allowed: {', '.join(FORMATS)}")
        self.format = fmt
        self.content_type = FORMATS[fmt][2]
        self._samples = 0
        self._container: Any = None
        self._whole: io.BytesIO | None = io.BytesIO() if whole else None
        if fmt == "pcm":
            return
        container, codec, _ = FORMATS[fmt]
        self._sink = _Sink()
        options = {"page_duration": "20000"} if container == "ogg" else {}
        out = self._whole if self._whole is not None else self._sink
        self._container = av.open(out, mode="w", format=container, options=options)
        self._stream = self._container.add_stream(codec, rate=SAMPLE_RATE, layout="mono")

    def push(self, pcm: np.ndarray) -> bytes:
        pcm = np.ascontiguousarray(pcm, dtype="<i2")
        if self._container is None:
            if self._whole is not None:
                self._whole.write(pcm.tobytes())
                return b""
            return pcm.tobytes()
        frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._samples
        self._samples += pcm.shape[0]
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return b"" if self._whole is not None else self._sink.take()

    def finish(self) -> bytes:
        if self._container is not None:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()  # a seekable output (whole=True) gets its real sizes here
            self._container = None
        elif self._whole is None:
            return b""
        return self._whole.getvalue() if self._whole is not None else self._sink.take()

    def close(self) -> None:
        """Drop the encoder without a trailer (the client left)."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - nothing left to deliver
                pass
            self._container = None
