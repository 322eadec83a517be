"""Silero VAD as the worker loads it: the hangover on Silero's window grid, counted from the end of the sound.

Contract: `load_vad(silence_ms, quiet_db=-50.0)` returns LiveKit's Silero VAD at 16 kHz (a `silero.VAD`, so
the session and the STT adapter use it as the plugin) whose END_OF_SPEECH comes after
`hangover_windows(silence_ms)` windows of silence, i.e. after `effective_hangover_ms(silence_ms)`: the
configured `VAD_SILENCE_MS` to the nearest 32 ms window (never less than one window), so within 16 ms of it.
A window counts as silence when Silero's probability is below its deactivation threshold, or when no ~10 ms
third of the window reaches `quiet_db` (RMS, dBFS; `VAD_QUIET_DB`, None = off): `QuietGate`.

Why the window grid: the plugin counts silence in whole windows (512 samples at 16 kHz) and ends the turn at
the first count >= `min_silence_duration`. Passed as is, 200 ms meant 7 windows, 224 ms: every turn ended up
to a window later than configured. The default `VAD_SILENCE_MS` is 224, seven windows; the page's end of
speech uses the same value and the same -50 dBFS, so with the gate both ends hear the same silence.

Why the quiet gate: Silero's probability stays above the deactivation threshold for about three windows after
the last sound (its recurrent state), so the turn ended ~100 ms after the configured silence had passed; with the
gate, ~17 ms (docs/agent.md, "The quiet gate", has the A/B). Speech quieter than `quiet_db` throughout
(a whisper far from the microphone) no longer starts a turn: lower `VAD_QUIET_DB` or set it off for that.
A window with no sound in it is not speech whatever the model's state says. The gate only ever turns speech
into silence, and only in windows below `quiet_db`: where background sound keeps every window above it, the
VAD is Silero alone. Silero still runs on every window, so its state follows the audio. With the gate the
hangover is the silence a pause may hold without ending the turn; 192 ended callbench's "Thank you, goodbye."
at its comma (170 ms quiet, then a plosive Silero calls silence), hence 224 (docs/agent.md).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from livekit.plugins import silero
from livekit.plugins.silero import onnx_model

from agent import livekit_internals
from agent.config import QUIET_DB
from common.audio_format import SPEECH_SAMPLE_RATE

VAD_SAMPLE_RATE: Final = SPEECH_SAMPLE_RATE  # Silero runs at 16 kHz
WINDOW_SAMPLES = 512  # Silero's window at 16 kHz
WINDOW_MS = WINDOW_SAMPLES * 1000 / VAD_SAMPLE_RATE  # 32 ms


def hangover_windows(silence_ms: float) -> int:
    """Windows of silence that end a turn: `silence_ms` to the nearest window, at least one."""
    return max(1, round(silence_ms / WINDOW_MS))


def effective_hangover_ms(silence_ms: float) -> float:
    return hangover_windows(silence_ms) * WINDOW_MS


def min_silence_duration_s(silence_ms: float) -> float:
    """The plugin's `min_silence_duration` that ends a turn after exactly `hangover_windows(silence_ms)` windows.

    Half a window below the last one: the plugin compares a float sum of window durations, and a threshold on
    the exact multiple would end a window late wherever that sum rounds a hair low."""
    return (hangover_windows(silence_ms) - 0.5) * WINDOW_MS / 1000.0


def window_level_db(window: np.ndarray, parts: int = 3) -> float:
    """The level (dBFS) of the loudest of `parts` equal slices of a float window in [-1, 1] (a 32 ms window in
    thirds: ~10 ms, the page's frame); -inf for digital silence. The loudest slice, not the whole window: a
    window that holds the last 10 ms of a word is not quiet, though its average may be."""
    rms = max(math.sqrt(float(np.dot(s, s)) / max(1, s.size)) for s in np.array_split(window, parts))
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


class QuietGate:
    """Silero's model with a floor on sound: the probability of a window quieter than `quiet_db` is 0.

    Stands in for the plugin's `OnnxModel` (same window size, rate and reset). The plugin smooths the
    probability (new = 0.35 * old + 0.65 * p), so a gated window after speech reads at most 0.35, which is not
    above the default deactivation threshold (0.5 - 0.15): the first quiet window already counts as silence."""

    def __init__(self, model: onnx_model.OnnxModel, quiet_db: float) -> None:
        self.model, self.quiet_db = model, quiet_db

    @property
    def sample_rate(self) -> int:
        return self.model.sample_rate

    @property
    def window_size_samples(self) -> int:
        return self.model.window_size_samples

    @property
    def context_size(self) -> int:
        return self.model.context_size

    def reset(self) -> None:
        self.model.reset()

    def __call__(self, window: np.ndarray) -> float:
        p = self.model(window)  # always run: Silero's state must follow the audio, quiet windows included
        return 0.0 if window_level_db(window) < self.quiet_db else p


class GatedSileroVAD(silero.VAD):
    """`silero.VAD` whose streams run the model behind a `QuietGate` (None: the plugin's own streams)."""

    quiet_db: float | None = None

    def stream(self) -> silero.VADStream:
        if self.quiet_db is None:
            return super().stream()
        quiet_db = self.quiet_db
        stream = livekit_internals.silero_stream_with_model(self, lambda model: QuietGate(model, quiet_db))
        return stream if stream is not None else super().stream()  # the plugin changed: Silero alone, warned


def load_vad(silence_ms: float, quiet_db: float | None = QUIET_DB) -> silero.VAD:
    vad = GatedSileroVAD.load(min_silence_duration=min_silence_duration_s(silence_ms), sample_rate=VAD_SAMPLE_RATE)
    if not isinstance(vad, GatedSileroVAD):  # load() is annotated as returning the base class; it builds `cls`
        raise TypeError(f"silero.VAD.load() built a {type(vad).__name__}, not the gated VAD: the plugin changed")
    vad.quiet_db = quiet_db
    return vad
