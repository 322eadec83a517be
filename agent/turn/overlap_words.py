"""OverlapWords: while the caller speaks over the agent's answer, listen for a barge-in cue before they stop.

- The voice node hands it every frame of the caller's audio (`feed`) and the VAD's start and end of each utterance
  (`on_speech_started(overlapped)`, `on_speech_ended`). `overlapped` says the utterance began over a playing
  answer (the controller ducks it and judges it: agent/turn/controller.py).
- Such an utterance is transcribed while it goes on: at `FIRST_S` of speech, then every `EVERY_S`, at most
  `MAX_ATTEMPTS` times and never after its end, each time over its audio so far (with `LEAD_S` before the VAD's
  start, which comes late), through the call's STT without its observer. The utterance's own transcript still
  comes at its end, as before; these are extra requests.
- A transcript with a barge-in cue (`words.barge_in_cue`: "stop", "wait", "no", "actually" ...) calls
  `interrupt` (the call passes the framework's public `AgentSession.interrupt`). The controller then cuts the
  answer as it cuts any framework interruption of an overlapped answer: silence at once, the overlap becomes the
  next user turn.
- Anything else (a backchannel, a noise, words without a cue) does nothing here: the overlap is judged on its whole
  transcript, or cut by its length (`OVERLAP_CONFIRM_S`), as before.
- `still_overlapped()` is asked before each attempt and before acting on one: once the overlap is judged, cut or
  its answer is over, the attempts stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from livekit import rtc
from livekit.agents import stt, utils

from agent.turn.words import barge_in_cue

logger = logging.getLogger("agent.turn.overlap_words")

FIRST_S = 0.2  # speech after the VAD's start before the first attempt: with the lead, one short word ("stop", "wait")
EVERY_S = 0.2  # more speech before the next attempt (an attempt starts only once the one before has answered)
MAX_ATTEMPTS = 3  # by then (0.6 s and more) the length rule (OVERLAP_CONFIRM_S) or the end of the utterance decides
LEAD_S = 0.3  # audio kept from before the VAD's start: its onset comes some windows into the word

Transcribe = Callable[[rtc.AudioFrame], Awaitable["stt.SpeechEvent | Exception"]]


class OverlapWords:
    def __init__(
        self,
        *,
        transcribe: Transcribe,
        interrupt: Callable[[], None],
        still_overlapped: Callable[[], bool],
    ) -> None:
        self.transcribe = transcribe
        self.interrupt = interrupt
        self.still_overlapped = still_overlapped
        self._lead: deque[rtc.AudioFrame] = deque()
        self._lead_s = 0.0
        self._frames: list[rtc.AudioFrame] | None = None  # the overlapping utterance's audio; None outside one
        self._heard_s = 0.0  # its speech since the VAD's start
        self._more = asyncio.Event()  # set by feed once the next attempt's length is reached
        self._next_at = FIRST_S
        self._task: asyncio.Task[None] | None = None
        self.attempts = 0  # over the call (tests and logs read it)
        self.cuts = 0

    def feed(self, frame: rtc.AudioFrame) -> None:
        seconds = frame.samples_per_channel / frame.sample_rate
        if self._frames is not None:
            self._frames.append(frame)
            self._heard_s += seconds
            if self._heard_s >= self._next_at - 1e-6:  # ten 20 ms frames are 0.2 s, not 0.19999...
                self._more.set()
            return
        self._lead.append(frame)
        self._lead_s += seconds
        while self._lead and self._lead_s - self._lead[0].samples_per_channel / self._lead[0].sample_rate >= LEAD_S:
            old = self._lead.popleft()
            self._lead_s -= old.samples_per_channel / old.sample_rate

    def on_speech_started(self, *, overlapped: bool) -> None:
        lead = list(self._lead)
        self._stop_listening()
        if not overlapped:
            return
        self._frames, self._heard_s, self._next_at = lead, 0.0, FIRST_S
        self._more.clear()
        self._task = asyncio.create_task(self._listen(), name="overlap-words")

    def on_speech_ended(self) -> None:
        """No attempt starts after the utterance's end (one in flight still acts: it is ahead of the end's own)."""
        self._frames = None
        self._more.set()  # wakes a waiting listener, which then finds no utterance and ends

    async def aclose(self) -> None:
        self._frames = None
        if self._task is not None:
            await utils.aio.cancel_and_wait(self._task)
            self._task = None

    def _stop_listening(self) -> None:
        self._frames = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self._lead.clear()
        self._lead_s = 0.0

    async def _listen(self) -> None:
        for _ in range(MAX_ATTEMPTS):
            await self._more.wait()
            self._more.clear()
            frames = self._frames
            if frames is None or not self.still_overlapped():
                return
            self._next_at = self._heard_s + EVERY_S
            self.attempts += 1
            outcome = await self.transcribe(utils.merge_frames(frames))
            if isinstance(outcome, Exception):
                logger.debug("overlap words: the STT failed (%s); the overlap's end decides", outcome)
                return
            text = outcome.alternatives[0].text if outcome.alternatives else ""
            if barge_in_cue(text) and self.still_overlapped():
                logger.info("overlap words: a barge-in cue after %.2f s of speech; interrupting", self._heard_s)
                self.cuts += 1
                self.interrupt()
                return
            if self._frames is None:
                return


__all__ = ["EVERY_S", "FIRST_S", "LEAD_S", "MAX_ATTEMPTS", "OverlapWords"]
