"""OverlapWords (agent/turn/overlap_words.py): speech over the answer transcribed while it goes on; a cue cuts."""

from __future__ import annotations

import asyncio

import numpy as np
from livekit import rtc
from livekit.agents import stt

from agent.stt import final_transcript
from agent.turn.overlap_words import EVERY_S, FIRST_S, LEAD_S, MAX_ATTEMPTS, OverlapWords

RATE = 16000
FRAME_S = 0.02


def frame() -> rtc.AudioFrame:
    n = int(RATE * FRAME_S)
    return rtc.AudioFrame(np.zeros(n, dtype=np.int16).tobytes(), RATE, 1, n)


class Ear:
    """The call's side of OverlapWords: an STT that answers `texts` in turn, an interrupt that counts, a flag."""

    def __init__(self, *texts: str | Exception, delay_s: float = 0.01) -> None:
        self.texts = list(texts)
        self.delay_s = delay_s
        self.heard_s: list[float] = []  # the audio length of each request
        self.interrupts = 0
        self.overlapped = True
        self.words = OverlapWords(
            transcribe=self.transcribe, interrupt=self.interrupt, still_overlapped=lambda: self.overlapped
        )

    async def transcribe(self, buffer: rtc.AudioFrame) -> stt.SpeechEvent | Exception:
        self.heard_s.append(buffer.samples_per_channel / buffer.sample_rate)
        await asyncio.sleep(self.delay_s)
        text = self.texts.pop(0) if self.texts else ""
        return text if isinstance(text, Exception) else final_transcript("", text, "en")

    def interrupt(self) -> None:
        self.interrupts += 1

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / FRAME_S)):
            self.words.feed(frame())
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)  # the attempt that the last frame started has answered


async def test_a_cue_cuts_before_the_speech_ends() -> None:
    ear = Ear("Stop.")
    await ear.speak(1.0)  # before the utterance: the lead
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(FIRST_S)
    assert ear.interrupts == 1
    assert ear.heard_s[0] == round(LEAD_S + FIRST_S, 2)  # the lead before the VAD's start, then the speech
    await ear.speak(1.0)
    assert (ear.interrupts, ear.words.attempts, ear.words.cuts) == (1, 1, 1)  # one cut, no attempt after it
    await ear.words.aclose()


async def test_a_backchannel_is_left_to_the_overlap_verdict() -> None:
    ear = Ear("Mm-hmm.", "Mm-hmm.", "Mm-hmm.", "Mm-hmm.")
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(FIRST_S)
    for _ in range(MAX_ATTEMPTS + 2):
        await ear.speak(EVERY_S)
    assert ear.interrupts == 0
    assert ear.words.attempts == MAX_ATTEMPTS  # bounded, however long the speech
    await ear.words.aclose()


async def test_a_later_attempt_hears_the_cue() -> None:
    ear = Ear("Ah.", "Actually,")
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(FIRST_S + EVERY_S)
    assert (ear.interrupts, ear.words.attempts) == (1, 2)
    assert ear.heard_s[1] > ear.heard_s[0]  # each attempt hears the utterance so far
    await ear.words.aclose()


async def test_nothing_outside_an_overlap() -> None:
    ear = Ear("Stop.")
    ear.words.on_speech_started(overlapped=False)  # the caller speaks while the agent is silent: a turn
    await ear.speak(1.0)
    assert (ear.interrupts, ear.words.attempts) == (0, 0)
    await ear.words.aclose()


async def test_no_attempt_after_the_speech_ends_or_the_overlap_is_judged() -> None:
    ear = Ear("Stop.")
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(FIRST_S / 2)
    ear.words.on_speech_ended()  # shorter than the first attempt: its end's own transcript decides
    await ear.speak(1.0)
    assert ear.words.attempts == 0

    ear.words.on_speech_started(overlapped=True)
    ear.overlapped = False  # judged (a backchannel restored it, or the length rule cut it)
    await ear.speak(1.0)
    assert (ear.interrupts, ear.words.attempts) == (0, 0)
    await ear.words.aclose()


async def test_a_cue_that_comes_back_after_the_verdict_does_nothing() -> None:
    ear = Ear("Stop.", delay_s=0.1)
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(FIRST_S)  # the attempt is in flight
    ear.overlapped = False  # the answer was cut meanwhile (its length, or its end)
    await asyncio.sleep(0.15)
    assert ear.interrupts == 0
    await ear.words.aclose()


async def test_an_stt_failure_is_not_a_cut() -> None:
    ear = Ear(RuntimeError("stt down"), "Stop.")
    ear.words.on_speech_started(overlapped=True)
    await ear.speak(1.0)
    assert (ear.interrupts, ear.words.attempts) == (0, 1)  # the overlap's end decides, as without it
    await ear.words.aclose()
