"""EarlyTranscriber: LiveKit's VAD + non-streaming STT adapter, except that an utterance goes to STT at the pause
that may end the turn, instead of after the whole hangover.

Contract: `EarlyTranscriber(stt=, vad=, early_ms=)` is a `stt.StreamAdapter` (a streaming `stt.STT`, handed to
the AgentSession as its STT). Its streams emit what LiveKit's adapter emits, in the same order:
START_OF_SPEECH, END_OF_SPEECH, then the utterance's FINAL_TRANSCRIPT (none when it is empty). What differs is
when the transcript is asked for:
- once the VAD has counted `early_ms` of silence inside a speech (its `raw_accumulated_silence`, in whole 32 ms
  windows: `early_ms` to the nearest window; the VAD reports the count with the next window, so the utterance
  goes at the end of that one: 96 ms after the speech for 64), the utterance so far is sent to STT in the
  background: START's frames and every window since, i.e. the frames END would carry, less the rest of the
  hangover;
- a window of speech after that (the VAD's count of silence falls) cancels the attempt: the pause was not the
  end of the turn;
- at END_OF_SPEECH the attempt is the utterance's transcript if no speech came after it was sent; otherwise
  END's frames are transcribed then, as LiveKit's adapter does.
The STT is an `ObservedSTT` (agent/stt.py): attempts run without its observer, and only the one the turn uses
is reported (`report_request` with the time it was sent, then `settle`), so the observer sees one request and
one outcome per turn either way. The reported time may lie before the end of the turn: the trace's
`stt_request` then precedes `vad_speech_end` (traces/README.md).

Why: the hangover (`VAD_SILENCE_MS`) is silence the turn waits through anyway, so the STT's time now overlaps
it instead of following it. The cost is one STT request per pause of `early_ms` inside a turn that then goes on
(cancelled; a CPU whisper run that already started finishes in its thread and is thrown away).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable
from dataclasses import dataclass

from livekit import rtc
from livekit.agents import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, stt, utils
from livekit.agents import vad as agents_vad
from livekit.agents.types import NOT_GIVEN, NotGivenOr

from agent.stt import ObservedSTT
from agent.vad import min_silence_duration_s

#: Longest utterance sent early; a longer one is transcribed at its end (the VAD caps what it buffers too).
MAX_EARLY_SECONDS = 60.0

_VAD = agents_vad.VADEventType


class EarlyTranscriber(stt.StreamAdapter):
    def __init__(self, *, stt: ObservedSTT, vad: agents_vad.VAD, early_ms: float) -> None:
        super().__init__(stt=stt, vad=vad)
        self.observed = stt
        self.source_vad = vad
        self.early_s = min_silence_duration_s(early_ms)  # the VAD's silence count crosses this at the window

    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.RecognizeStream:
        return EarlyStream(self, language=language, conn_options=conn_options)


@dataclass
class Utterance:
    """The speech since START as the VAD buffers it, and the transcription attempt sent at its last pause."""

    frames: list[rtc.AudioFrame]
    seconds: float = 0.0
    silence: float = 0.0  # the VAD's count of silence at the last window
    attempt: asyncio.Task[stt.SpeechEvent | Exception] | None = None
    sent_at: float = 0.0  # perf_counter

    def drop_attempt(self) -> None:
        if self.attempt is not None:
            self.attempt.cancel()
            self.attempt = None


class EarlyStream(stt.RecognizeStream):
    def __init__(self, adapter: EarlyTranscriber, *, language: NotGivenOr[str], conn_options: APIConnectOptions):
        # retries belong to the wrapped STT's recognize, as in LiveKit's adapter
        super().__init__(stt=adapter, conn_options=APIConnectOptions(max_retry=0, timeout=conn_options.timeout))
        self._adapter = adapter
        self._language = language
        self._stt_options = conn_options
        self.attempts_dropped = 0  # attempts sent at a pause the speaker went on after (tests read it)

    async def _metrics_monitor_task(self, event_aiter: AsyncIterable[stt.SpeechEvent]) -> None:
        async for _ in event_aiter:  # the wrapped STT reports its metrics per utterance
            pass

    async def _run(self) -> None:
        vad_stream = self._adapter.source_vad.stream()
        utterance: Utterance | None = None

        async def forward_input() -> None:
            async for item in self._input_ch:
                if isinstance(item, self._FlushSentinel):
                    vad_stream.flush()
                else:
                    vad_stream.push_frame(item)
            vad_stream.end_input()

        async def recognize() -> None:
            nonlocal utterance
            async for ev in vad_stream:
                if ev.type == _VAD.START_OF_SPEECH:
                    utterance = Utterance(frames=list(ev.frames), seconds=_seconds(ev.frames))
                    self._event_ch.send_nowait(stt.SpeechEvent(stt.SpeechEventType.START_OF_SPEECH))
                elif ev.type == _VAD.INFERENCE_DONE and utterance is not None:
                    self._window(utterance, ev)
                elif ev.type == _VAD.END_OF_SPEECH:
                    done, utterance = utterance, None
                    await self._end(done, ev)

        tasks = [asyncio.create_task(forward_input()), asyncio.create_task(recognize())]
        try:
            await asyncio.gather(*tasks)
        finally:
            if utterance is not None:
                utterance.drop_attempt()
            await utils.aio.cancel_and_wait(*tasks)
            await vad_stream.aclose()

    def _window(self, utterance: Utterance, ev: agents_vad.VADEvent) -> None:
        """One VAD window inside a speech (its frames are the ones the VAD adds to the speech it buffers)."""
        if ev.raw_accumulated_silence < utterance.silence and utterance.attempt is not None:
            utterance.drop_attempt()  # speech again after the pause: the attempt missed the rest
            self.attempts_dropped += 1
        utterance.silence = ev.raw_accumulated_silence
        if utterance.seconds > MAX_EARLY_SECONDS:
            return
        utterance.frames.extend(ev.frames)
        utterance.seconds += _seconds(ev.frames)
        if utterance.attempt is None and utterance.silence >= self._adapter.early_s:
            utterance.sent_at = time.perf_counter()
            utterance.attempt = asyncio.create_task(
                self._adapter.observed.attempt(
                    utils.merge_frames(utterance.frames), language=self._language, conn_options=self._stt_options
                )
            )

    async def _end(self, utterance: Utterance | None, ev: agents_vad.VADEvent) -> None:
        speech_end_time = time.time() - ev.silence_duration - ev.inference_duration
        self._event_ch.send_nowait(
            stt.SpeechEvent(type=stt.SpeechEventType.END_OF_SPEECH, speech_end_time=speech_end_time)
        )
        observed = self._adapter.observed
        if utterance is not None and utterance.attempt is not None:
            observed.report_request(utterance.sent_at)
            final = observed.settle(await utterance.attempt, self._language)
        else:
            final = await observed.recognize(
                utils.merge_frames(ev.frames), language=self._language, conn_options=self._stt_options
            )
        if not (final.alternatives and final.alternatives[0].text):
            return
        self._event_ch.send_nowait(
            stt.SpeechEvent(
                type=stt.SpeechEventType.FINAL_TRANSCRIPT,
                alternatives=[final.alternatives[0]],
                speech_end_time=final.speech_end_time if final.speech_end_time is not None else speech_end_time,
            )
        )


def _seconds(frames: list[rtc.AudioFrame]) -> float:
    return sum(f.samples_per_channel / f.sample_rate for f in frames)
