"""agent/vad.py: the hangover the worker asks for is the hangover Silero waits, to the nearest 32 ms window,
counted from the end of the sound when the quiet gate is on.

The real plugin and model run on espeak-ng speech (no wall-clock timing is asserted: the END event reports how
much silence it counted and the sample it fell on, which are exact)."""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from livekit import rtc
from livekit.agents import vad as agents_vad

from agent.config import AgentConfig
from agent.vad import (
    QUIET_DB,
    WINDOW_MS,
    WINDOW_SAMPLES,
    QuietGate,
    effective_hangover_ms,
    hangover_windows,
    load_vad,
    min_silence_duration_s,
    window_level_db,
)
from tests.agent.espeak_audio import speech

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng speaks the test sentence")


@given(st.integers(min_value=50, max_value=5000))
def test_the_threshold_is_crossed_at_the_window_nearest_the_setting(silence_ms: int) -> None:
    windows = hangover_windows(silence_ms)
    assert abs(effective_hangover_ms(silence_ms) - silence_ms) <= WINDOW_MS / 2
    # the plugin sums window durations as floats and ends the turn at the first sum >= min_silence_duration
    threshold, total, counted = min_silence_duration_s(silence_ms), 0.0, 0
    while total < threshold:
        total += WINDOW_MS / 1000.0
        counted += 1
    assert counted == windows


def test_the_default_is_a_whole_number_of_windows() -> None:
    assert effective_hangover_ms(AgentConfig.vad_silence_ms) == AgentConfig.vad_silence_ms == 224
    assert AgentConfig.vad_quiet_db == QUIET_DB == -50.0


def test_a_window_is_as_loud_as_its_loudest_third() -> None:
    window = np.zeros(WINDOW_SAMPLES, np.float32)
    assert window_level_db(window) == -np.inf
    window[-100:] = 0.1  # the last ~6 ms: a word's tail (-20 dBFS) in a window otherwise silent
    assert window_level_db(window) > -30.0  # the whole window's RMS would read about -27
    assert window_level_db(np.full(WINDOW_SAMPLES, 10 ** (-60 / 20), np.float32)) == pytest.approx(-60.0)


class _Sure:
    """A model that always hears speech, with the plugin's model interface."""

    sample_rate, window_size_samples, context_size = 16_000, WINDOW_SAMPLES, 64
    calls = 0

    def reset(self) -> None:
        pass

    def __call__(self, window: np.ndarray) -> float:
        self.calls += 1
        return 0.99


def test_the_gate_silences_only_quiet_windows_and_always_runs_the_model() -> None:
    model = _Sure()
    gate = QuietGate(model, -50.0)
    assert gate(np.zeros(WINDOW_SAMPLES, np.float32)) == 0.0
    assert gate(np.full(WINDOW_SAMPLES, 10 ** (-55 / 20), np.float32)) == 0.0
    assert gate(np.full(WINDOW_SAMPLES, 10 ** (-45 / 20), np.float32)) == 0.99
    assert model.calls == 3  # the quiet windows too: the model's state follows the audio


def _last_sound(pcm: np.ndarray, rate: int) -> int:
    """The sample after the last 10 ms frame at or above -50 dBFS (the page's end-of-speech rule)."""
    frame = rate // 100
    levels = [window_level_db(pcm[i : i + frame] / 32768.0, 1) for i in range(0, len(pcm) - frame + 1, frame)]
    return (max(i for i, db in enumerate(levels) if db >= -50.0) + 1) * frame


async def _ends(pcm: np.ndarray, rate: int, silence_ms: int, quiet_db: float | None) -> list[agents_vad.VADEvent]:
    stream = load_vad(silence_ms, quiet_db).stream()
    frame = rate // 50  # 20 ms, as the session feeds it (INPUT_FRAME_MS)
    for i in range(0, len(pcm) - frame + 1, frame):
        stream.push_frame(rtc.AudioFrame(pcm[i : i + frame].tobytes(), rate, 1, frame))
    stream.end_input()
    return [ev async for ev in stream if ev.type == agents_vad.VADEventType.END_OF_SPEECH]


@needs_espeak
@pytest.mark.parametrize("quiet_db", [QUIET_DB, None])
@pytest.mark.parametrize("silence_ms", [192, 200, 250])
def test_silero_ends_the_turn_after_the_configured_silence(silence_ms: int, quiet_db: float | None) -> None:
    ends = asyncio.run(_ends(speech("Can you hear me now?", 48_000), 48_000, silence_ms, quiet_db))
    assert len(ends) == 1, ends
    # passed to the plugin as is, 200 ms waited 7 windows (224 ms)
    assert ends[0].silence_duration == pytest.approx(effective_hangover_ms(silence_ms) / 1000.0, abs=1e-6)


@needs_espeak
@pytest.mark.parametrize("noise_db", [None, -65.0, -55.0])
def test_with_the_gate_the_turn_ends_the_hangover_after_the_last_sound(noise_db: float | None) -> None:
    """Without the gate Silero's probability stays up for a few windows after the sound stops; with it the END
    falls in the window that completes the hangover counted from the last loud 10 ms (within one window and
    the resampler's few samples), also over a noise floor below the gate."""
    rate, hangover = 24_000, effective_hangover_ms(AgentConfig.vad_silence_ms)
    pcm = speech("What is the capital of France?", rate, noise_db=noise_db)
    last = _last_sound(pcm, rate) / rate * 1000.0

    def lag(quiet_db: float | None) -> float:
        (end,) = asyncio.run(_ends(pcm, rate, AgentConfig.vad_silence_ms, quiet_db))
        return end.samples_index / 16.0 - last - hangover  # samples_index counts 16 kHz samples

    gated, alone = lag(QUIET_DB), lag(None)
    print(f"END beyond the hangover after the last sound: gated {gated:.1f} ms, Silero alone {alone:.1f} ms")
    assert -2.0 <= gated <= WINDOW_MS + 2.0, gated
    assert alone > gated, (alone, gated)  # Silero alone: 46 ms on this sentence, 75 ms P50 over callbench's ten


@needs_espeak
def test_the_gate_stays_out_of_the_way_of_sound_above_it() -> None:
    """Noise above the gate: every window is loud, so the gated VAD is Silero alone, END for END."""
    rate = 24_000
    pcm = speech("What is the capital of France?", rate, noise_db=-45.0)
    gated = asyncio.run(_ends(pcm, rate, AgentConfig.vad_silence_ms, QUIET_DB))
    alone = asyncio.run(_ends(pcm, rate, AgentConfig.vad_silence_ms, None))
    assert len(alone) == 1  # the noise is not speech: Silero ends the turn
    assert [e.samples_index for e in gated] == [e.samples_index for e in alone]
