"""agent/vad.py: the hangover the worker asks for is the hangover Silero waits, to the nearest 32 ms window.

The real plugin and model run on espeak-ng speech (no timing is asserted: the END event reports how much
silence it counted, which is exact)."""

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
from agent.vad import WINDOW_MS, effective_hangover_ms, hangover_windows, load_vad, min_silence_duration_s


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
    assert effective_hangover_ms(AgentConfig.vad_silence_ms) == AgentConfig.vad_silence_ms == 192


async def _silence_counted_at_end(silence_ms: int) -> list[float]:
    from agent.tools.callbench.speech import RATE, speak

    pcm = speak("Can you hear me now?")
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), pcm, np.zeros(RATE, np.int16)])
    stream = load_vad(silence_ms).stream()
    frame = RATE // 100
    for i in range(0, len(pcm) - frame + 1, frame):
        stream.push_frame(rtc.AudioFrame(pcm[i : i + frame].tobytes(), RATE, 1, frame))
    stream.end_input()
    return [ev.silence_duration async for ev in stream if ev.type == agents_vad.VADEventType.END_OF_SPEECH]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng speaks the test sentence")
@pytest.mark.parametrize("silence_ms", [192, 200, 250])
def test_silero_ends_the_turn_after_the_configured_silence(silence_ms: int) -> None:
    ends = asyncio.run(_silence_counted_at_end(silence_ms))
    assert len(ends) == 1, ends
    # passed to the plugin as is, 200 ms waited 7 windows (224 ms)
    assert ends[0] == pytest.approx(effective_hangover_ms(silence_ms) / 1000.0, abs=1e-6)
