"""Silero VAD as the worker loads it, with the hangover on Silero's window grid.

Contract: `load_vad(silence_ms)` returns LiveKit's Silero VAD at 16 kHz whose END_OF_SPEECH comes after
`hangover_windows(silence_ms)` inference windows below the deactivation threshold, i.e. after
`effective_hangover_ms(silence_ms)` of silence: the configured `VAD_SILENCE_MS` to the nearest 32 ms window
(never less than one window), so within 16 ms of it.

Why: the plugin counts silence in whole windows (512 samples at 16 kHz) and ends the turn at the first count
>= `min_silence_duration`. Passed as is, 200 ms meant 7 windows, 224 ms: every turn ended up to a window later
than configured. The default `VAD_SILENCE_MS` is 192, six windows, so the page's end of speech (which uses the
same value) and the agent's agree exactly.
"""

from __future__ import annotations

from livekit.plugins import silero

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 512  # Silero's window at 16 kHz
WINDOW_MS = WINDOW_SAMPLES * 1000 / SAMPLE_RATE  # 32 ms


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


def load_vad(silence_ms: float) -> silero.VAD:
    return silero.VAD.load(min_silence_duration=min_silence_duration_s(silence_ms), sample_rate=SAMPLE_RATE)
