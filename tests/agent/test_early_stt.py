"""agent/turn/early_stt.py on the real Silero plugin (as the worker loads it) and espeak-ng speech: the utterance goes
to STT at the pause, the transcript is the same audio the end of the turn would have sent less the rest of the
hangover, speech after the pause cancels the attempt, and the observer sees one request and one outcome per turn.

Audio is pushed faster than real time; nothing here asserts wall-clock timing, only what was sent and in which
order (the recording STT keeps every utterance it was asked for)."""

from __future__ import annotations

import asyncio
import shutil
import time

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import APIConnectionError, APIConnectOptions, stt, utils

from agent.config import AgentConfig
from agent.stt import ObservedSTT, STTObserver, final_transcript
from agent.turn.early_stt import EarlyTranscriber
from agent.vad import hangover_windows, load_vad
from tests.agent.espeak_audio import speech

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng speaks the test sentences")

RATE = 24_000  # the worker's input rate
WINDOW = RATE * 32 // 1000  # one Silero window of input samples
OPTIONS = APIConnectOptions(max_retry=0, timeout=10.0)


class RecordingSTT(ObservedSTT):
    """Transcribes to the number of samples it was given; keeps every utterance, and whether it was cancelled."""

    def __init__(self, observer: STTObserver, *, seconds: float = 0.05, fail: bool = False) -> None:
        super().__init__(observer=observer)
        self.seconds, self.fail = seconds, fail
        self.sent: list[tuple[float, np.ndarray]] = []  # (perf_counter, pcm)
        self.cancelled = 0

    async def _recognize_impl(self, buffer: utils.AudioBuffer, *, language, conn_options) -> stt.SpeechEvent:
        frame = rtc.combine_audio_frames(buffer) if isinstance(buffer, list) else buffer
        pcm = np.frombuffer(frame.data, np.int16).copy()
        self.sent.append((time.perf_counter(), pcm))
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail:
            raise APIConnectionError("the STT server went away")
        return final_transcript("r", f"{pcm.size} samples", language)


async def transcribe(pcm: np.ndarray, early_ms: int | None, **stt_kwargs):
    """Feed `pcm` in 20 ms frames (as the session does) through the adapter the worker builds; returns the
    events with their arrival times, the STT and what the observer saw."""
    seen: dict[str, list] = {"requests": [], "failures": [], "results": []}
    observer = STTObserver(on_request=seen["requests"].append, on_failure=seen["failures"].append,
                           on_result=seen["results"].append)  # fmt: skip
    recorder = RecordingSTT(observer, **stt_kwargs)
    vad = load_vad(AgentConfig.vad_silence_ms, AgentConfig.vad_quiet_db)
    adapter = EarlyTranscriber(stt=recorder, vad=vad, early_ms=early_ms) if early_ms else stt.StreamAdapter(
        stt=recorder, vad=vad
    )
    events: list[tuple[float, stt.SpeechEvent]] = []
    async with adapter.stream(conn_options=OPTIONS) as stream:
        frame = RATE // 50
        for i in range(0, len(pcm) - frame + 1, frame):
            stream.push_frame(rtc.AudioFrame(pcm[i : i + frame].tobytes(), RATE, 1, frame))
        stream.end_input()
        async for ev in stream:
            events.append((time.perf_counter(), ev))
    return events, recorder, seen, stream


def kinds(events: list) -> list[str]:
    return [ev.type.name for _, ev in events]


def test_the_turn_is_sent_at_the_pause_and_its_transcript_follows_the_end() -> None:
    pcm = speech("What is the capital of France?", RATE)
    events, recorder, seen, stream = asyncio.run(transcribe(pcm, 96))
    assert kinds(events) == ["START_OF_SPEECH", "END_OF_SPEECH", "FINAL_TRANSCRIPT"]
    sent_at, early = recorder.sent[-1]  # earlier attempts went at pauses inside the question, then were cancelled
    assert len(recorder.sent) - 1 <= stream.attempts_dropped
    end_at = events[1][0]
    (requested,) = seen["requests"]  # reported with the time it was sent, before the END
    assert requested <= sent_at and requested < end_at
    assert seen["results"] == [f"{early.size} samples"] and not seen["failures"]
    assert events[2][1].alternatives[0].text == f"{early.size} samples"

    # the same audio the end of the turn sends (LiveKit's adapter), less the rest of the hangover: the VAD
    # reports 3 silent windows with the fourth, the END comes with the seventh
    _, plain, _, _ = asyncio.run(transcribe(pcm, None))
    ((_, whole),) = plain.sent
    assert np.array_equal(whole[: early.size], early)
    assert whole.size - early.size == pytest.approx((hangover_windows(224) - 4) * WINDOW, abs=2)


def test_speech_after_the_pause_cancels_the_attempt_and_the_end_sends_it_all() -> None:
    pcm = speech("Thank you, goodbye.", RATE)  # its comma: ~170 ms quiet, past 96 ms and short of the 224 ms hangover
    events, recorder, seen, stream = asyncio.run(transcribe(pcm, 96, seconds=2.0))
    assert kinds(events) == ["START_OF_SPEECH", "END_OF_SPEECH", "FINAL_TRANSCRIPT"]  # one turn
    assert stream.attempts_dropped >= 1 and recorder.cancelled >= 1
    (_, first), (used_at, used) = recorder.sent[0], recorder.sent[-1]
    assert used.size > first.size + RATE // 4 and np.array_equal(used[: first.size], first)
    (requested,) = seen["requests"]  # the cancelled attempts are never reported
    assert recorder.sent[-2][0] < requested <= used_at
    assert events[2][1].alternatives[0].text == f"{used.size} samples"


def test_a_failed_attempt_is_one_failure_and_no_transcript() -> None:
    events, recorder, seen, _ = asyncio.run(transcribe(speech("Can you hear me now?", RATE), 64, fail=True))
    assert kinds(events) == ["START_OF_SPEECH", "END_OF_SPEECH"]  # the empty transcript is not emitted
    assert len(seen["requests"]) == 1 and len(seen["failures"]) == 1 and not seen["results"]
    assert "went away" in str(seen["failures"][0])

