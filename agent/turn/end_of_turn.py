"""EndOfTurn: the turn detector of `TURN_HANDLING=ours`: has the caller finished, judged from their voice and words.

- Voice: LiveKit's audio end-of-turn model `turn-detector-v1-mini` (shipped in `livekit-local-inference`, run on
  the CPU through the framework's `livekit.agents.inference.TurnDetector`; its MODEL_LICENSE allows it only
  inside LiveKit Agents, which is where the worker runs it) over the caller's last 1.2 s of audio (`feed`), asked
  when their speech ends (`on_speech_ended`), so the answer is in before the transcript.
- Words: `agent.turn.words.completeness` of the turn's transcript so far (a trailing "and", "the", "um", a "...",
  a phone number too short to be whole: UNFINISHED; a question: FINISHED).
- `predict_end_of_turn(chat_ctx)` is the framework's turn-detector protocol (`livekit.agents.voice.turn
  ._TurnDetector`), called once the transcript is in, and chooses one of three waits, each counted from the
  caller's last sound: short (FINISHED words, or the voice at or above `threshold`: the framework's `min_delay`),
  long (UNFINISHED words: it returns 0, so the framework waits `max_delay`, the bounded maximum), or medium
  (neither: it waits itself until `medium_s` after the last sound, then returns the threshold). Speech in between
  cancels the framework's wait, ours included, and the turn goes on. No `stream()` method: the framework must
  treat this as a text-protocol detector, not a streaming one.
- The words must be the latest speech's: the framework's VAD can end a speech before the STT side has its words,
  and asks then on the transcript of the speech before ("Can you play some music?" before "something relaxing"
  is in). Such a judgement is the long wait (`words_current` False in the trace); the transcript's arrival makes the
  framework ask again, cancelling it.
- The speech's end is the one this detector saw (`on_speech_ended`, from the STT side's VAD). The framework can ask
  before it (its own VAD and the early transcript run apart and may be ahead): the judgement then waits for that
  end, bounded by `hangover_s + voice_wait_s`, and never measures a wait from an earlier speech's end.
- Every judgement is handed to `on_decision` (the turn's trace keeps it: `turn_decision`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from livekit import rtc
from livekit.agents import llm
from livekit.agents.inference import TurnDetector
from livekit.agents.language import LanguageCode

from agent.turn.options import VOICE_MODEL, TurnOptions
from agent.turn.words import Completeness, completeness

logger = logging.getLogger("agent.turn.end_of_turn")

class Wait(enum.Enum):
    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


def choose_wait(words: Completeness, p_voice: float | None, threshold: float) -> Wait:
    """How long the turn waits for more, from what the words and the voice say."""
    if words is Completeness.UNFINISHED:
        return Wait.LONG
    if words is Completeness.FINISHED or (p_voice is not None and p_voice >= threshold):
        return Wait.SHORT
    return Wait.MEDIUM


def last_user_text(chat_ctx: llm.ChatContext) -> str:
    for item in reversed(chat_ctx.items):
        if isinstance(item, llm.ChatMessage) and item.role == "user":  # the other items are calls, handoffs...
            return item.text_content or ""
    return ""


class EndOfTurn:
    def __init__(
        self,
        *,
        threshold: float,
        medium_s: float,
        hangover_s: float,
        voice_wait_s: float = TurnOptions.voice_wait_s,
        on_decision: Callable[[dict[str, Any]], None] | None = None,
        words_current: Callable[[], bool] | None = None,
    ) -> None:
        """`hangover_s`: the VAD's silence before it ends a speech (its end of speech is that long after the last
        sound); `medium_s`: the medium wait, from the last sound; `words_current`: whether the transcript the
        framework judges covers the caller's latest speech (DuplexController.words_current; None: always)."""
        self.threshold = threshold
        self.medium_s = medium_s
        self.hangover_s = hangover_s
        self.voice_wait_s = voice_wait_s  # how long a decision waits for the voice model once the words are in
        self.on_decision = on_decision
        self.words_current = words_current
        self._ended_at: float | None = None  # perf_counter of the end of the caller's speech; None while they speak
        self._ended = asyncio.Event()  # set with _ended_at
        self._voice = TurnDetector(version=VOICE_MODEL)
        self._stream: Any = None  # the voice model's stream, made on the first frame (it needs the running loop)
        self._prediction: asyncio.Future[Any] | None = None

    # -- the framework's turn-detector protocol ----------------------------------------------
    @property
    def model(self) -> str:
        return "voice-agent-eot(turn-detector-v1-mini+words)"

    @property
    def provider(self) -> str:
        return "local"

    async def unlikely_threshold(self, language: LanguageCode | None) -> float | None:
        return self.threshold

    async def supports_language(self, language: LanguageCode | None) -> bool:
        return True  # the voice model is multilingual; the word rules read other languages as NEUTRAL

    async def predict_end_of_turn(self, chat_ctx: llm.ChatContext, *, timeout: float | None = None) -> float:
        words = completeness(last_user_text(chat_ctx))
        ended_at = await self._speech_end()
        p_voice = await self._voice_probability()
        current = self.words_current is None or self.words_current()
        # words of an earlier speech say nothing of this one: no end on them (its transcript judges anew)
        wait = choose_wait(words, p_voice, self.threshold) if current else Wait.LONG
        logger.debug("judged %s: words %s%s, voice %s, speech ended %.0f ms ago", wait.value, words.value,
                     "" if current else " (of an earlier speech)", p_voice, (time.perf_counter() - ended_at) * 1e3)
        if self.on_decision is not None:
            self.on_decision(
                {
                    "words": words.value,
                    "words_current": current,
                    "p_voice": None if p_voice is None else round(p_voice, 3),
                    "threshold": self.threshold,
                    "wait": wait.value,
                }
            )
        if wait is Wait.LONG:
            return 0.0
        if wait is Wait.MEDIUM:  # cancelled with the framework's wait if the caller goes on
            await asyncio.sleep(max(0.0, ended_at - self.hangover_s + self.medium_s - time.perf_counter()))
            return self.threshold
        return max(self.threshold, p_voice if p_voice is not None else 1.0)

    # -- the caller's audio ------------------------------------------------------------------
    def feed(self, frame: rtc.AudioFrame) -> None:
        """Every frame of the caller's audio, in order (the voice model keeps the last 1.2 s)."""
        if self._stream is None:
            self._stream = self._voice.stream()
        self._stream.push_audio(frame)

    def on_speech_started(self) -> None:
        self._prediction = None  # the caller goes on: a judgement of the pause before is moot
        self._ended_at = None
        self._ended.clear()

    def on_speech_ended(self) -> None:
        """Ask the voice model now, so its answer is ready when the transcript is."""
        self._ended_at = time.perf_counter()
        self._ended.set()
        if self._stream is None:
            return
        self._prediction = self._stream.predict()

    async def _speech_end(self) -> float:
        """When the caller's current speech ended; if this detector has not seen that end yet, it waits for it (see the
        module docstring), and past the bound takes now as the end."""
        if self._ended_at is None:
            try:
                await asyncio.wait_for(self._ended.wait(), self.hangover_s + self.voice_wait_s)
            except TimeoutError:
                logger.debug("no end of speech seen %.0f ms into the judgement; counting from now",
                             (self.hangover_s + self.voice_wait_s) * 1e3)
        return self._ended_at if self._ended_at is not None else time.perf_counter()

    async def _voice_probability(self) -> float | None:
        fut = self._prediction
        if fut is None:
            return None
        try:
            event = await asyncio.wait_for(asyncio.shield(fut), self.voice_wait_s)
        except TimeoutError:
            logger.warning("the voice end-of-turn model took over %.0f ms; deciding on the words",
                           self.voice_wait_s * 1e3)
            return None
        return float(event.end_of_turn_probability)

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None
