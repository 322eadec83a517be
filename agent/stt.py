"""OmniSTT: a non-streaming LiveKit `stt.STT` that transcribes one utterance with Qwen3-Omni on vLLM.

Request (OpenAI chat completions through the `openai` SDK, no SDK-side retries):
  messages = [{"role": "user", "content": [
      {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,<16 kHz mono s16 WAV>"}},
      {"type": "text", "text": <transcription instruction>}]}]
  temperature 0, max_tokens `max_tokens`, thinking off (`chat_template_kwargs.enable_thinking=false`).
Errors map onto LiveKit's API errors so the framework's retry loop works: timeouts and connection
failures -> `APITimeoutError` / `APIConnectionError` (retryable), HTTP status -> `APIStatusError`
(5xx/408/429 retryable), a malformed answer -> `APIError(retryable=False)`.

Failure policy (why `recognize` is overridden): the session recovers from every STT failure by going
back to listening (the observer may speak a short apology), so a failed utterance yields an empty final
transcript (dropped by the framework) and its error event is marked recoverable; otherwise
`max_unrecoverable_errors` consecutive failures would close the whole call. The failure is logged once,
with the turn id, by the observer.

`recognize` = `report_request` + `attempt` + `settle`. The early transcriber (agent/turn/early_stt.py) calls the
three apart: it attempts an utterance at a pause, before the turn has ended, and reports to the observer only
the attempt the turn uses, so the observer sees exactly one request and one outcome per turn either way.

The caller's language: each final transcript carries `SpeechData.language`, the language the STT was told or,
for OmniSTT, the one its transcript's script names (`language_of_text`: kana -> ja, hangul -> ko, Han -> zh; ""
where the script says too little, e.g. Latin). `settle` hands it to `observer.on_language`, which the call
uses to set the TTS language of its replies (agent/tts.py, docs/agent.md "The caller's language").
"""

from __future__ import annotations

import base64
import logging
import re
import time
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import openai
from livekit import rtc
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    APITimeoutError,
    stt,
    utils,
)
from livekit.agents.language import LanguageCode
from livekit.agents.types import NOT_GIVEN, NotGivenOr
from openai.types.chat import ChatCompletionMessageParam

from agent.openai_client import openai_client
from common.audio_format import SPEECH_SAMPLE_RATE

logger = logging.getLogger("agent.stt")

STT_SAMPLE_RATE = SPEECH_SAMPLE_RATE  # the WAV posted to the STT server
DEFAULT_PROMPT = (
    "Transcribe this audio exactly as spoken, in its original language. "
    "Output only the transcript, without any explanation."
)


@dataclass
class STTObserver:
    """Hooks for tracing and failure handling; all optional, all called on the session's loop."""

    on_request: Callable[[float], None] | None = None  # perf_counter time the utterance was sent
    on_failure: Callable[[Exception], None] | None = None
    on_result: Callable[[str], None] | None = None  # the transcript (the framework drops an empty one unseen)
    on_language: Callable[[str], None] | None = None  # a transcript's language (ISO 639-1, "" = unknown)


class ObservedSTT(stt.STT):
    """A non-streaming `stt.STT` whose failures never end the call (see the module docstring).

    Subclasses implement `_recognize_impl`; this class calls the observer once per utterance
    (`on_request` when it is sent, then `on_failure` or `on_result`) and turns a failure into an empty final
    transcript.
    """

    def __init__(self, *, observer: STTObserver | None = None) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self.observer = observer or STTObserver()

    def _emit_error(self, api_error: Exception, recoverable: bool) -> None:
        # see module docstring: an STT failure never ends the call
        super()._emit_error(api_error, recoverable=True)

    async def recognize(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.SpeechEvent:
        self.report_request(time.perf_counter())  # once per utterance (retries do not move the trace point)
        outcome = await self.attempt(buffer, language=language, conn_options=conn_options)
        return self.settle(outcome, language)

    async def attempt(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.SpeechEvent | Exception:
        """Transcribe one utterance (LiveKit's retries and metrics included) without telling the observer:
        the final transcript, or the error it failed with."""
        try:
            return await super().recognize(buffer, language=language, conn_options=conn_options)
        except Exception as exc:  # noqa: BLE001 - the outcome: handed to the caller, which reports it
            return exc

    def report_request(self, requested_at: float) -> None:
        if self.observer.on_request is not None:
            self.observer.on_request(requested_at)

    def settle(self, outcome: stt.SpeechEvent | Exception, language: NotGivenOr[str]) -> stt.SpeechEvent:
        """The outcome of an utterance the turn uses, told to the observer; a failure becomes an empty
        transcript."""
        if isinstance(outcome, Exception):
            if self.observer.on_failure is not None:
                self.observer.on_failure(outcome)
            else:
                logger.error("speech recognition failed: %s", outcome)
            return final_transcript("", "", language)
        if self.observer.on_result is not None:
            self.observer.on_result(outcome.alternatives[0].text if outcome.alternatives else "")
        if self.observer.on_language is not None and outcome.alternatives and outcome.alternatives[0].text:
            self.observer.on_language(outcome.alternatives[0].language.language)
        return outcome


class OmniSTT(ObservedSTT):
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        prompt: str = DEFAULT_PROMPT,
        max_tokens: int = 256,
        client: openai.AsyncOpenAI | None = None,
        observer: STTObserver | None = None,
    ) -> None:
        super().__init__(observer=observer)
        self._model = model
        self._prompt = prompt
        self._max_tokens = max_tokens
        self._owns_client = client is None  # a client handed in belongs to the caller, who closes it
        # each request sets its own timeout (conn_options.timeout); the client's is only a backstop
        self._client = client or openai_client(base_url=base_url, api_key=api_key, timeout=60.0)

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "vllm-omni"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        wav = wav_bytes_16k(buffer)
        data_url = "data:audio/wav;base64," + base64.b64encode(wav).decode("ascii")
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "audio_url", "audio_url": {"url": data_url}},
                    {"type": "text", "text": self._prompt},
                ],
            }
        ]
        try:
            resp = await self._client.chat.completions.create(
                model=self._model,
                # an audio_url content part is vLLM's extension, not one of the openai package's types
                messages=cast("list[ChatCompletionMessageParam]", messages),
                temperature=0.0,
                max_tokens=self._max_tokens,
                stream=False,
                timeout=conn_options.timeout,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}},
            )
        except openai.APITimeoutError:
            raise APITimeoutError(f"STT request to {self._client.base_url} timed out") from None
        except openai.APIStatusError as exc:
            raise APIStatusError(
                f"STT request failed: {exc.message}",
                status_code=exc.status_code,
                request_id=exc.request_id,
                body=exc.body,
            ) from None
        except openai.APIConnectionError as exc:
            raise APIConnectionError(f"cannot reach STT at {self._client.base_url}") from exc
        except (ValueError, TypeError) as exc:  # unparsable JSON body
            raise APIError(f"malformed STT response: {exc}", retryable=False) from None
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            text = None
        if not isinstance(text, str):
            raise APIError(f"malformed STT response: no text in {str(resp)[:200]!r}", retryable=False)
        return final_transcript(resp.id or uuid.uuid4().hex, text.strip(), language)


def final_transcript(request_id: str, text: str, language: NotGivenOr[str]) -> stt.SpeechEvent:
    """A final transcript in `language` (the one the STT was told), else in the language its script names."""
    lang = LanguageCode(language if isinstance(language, str) and language else language_of_text(text))
    return stt.SpeechEvent(
        type=stt.SpeechEventType.FINAL_TRANSCRIPT,
        request_id=request_id,
        alternatives=[stt.SpeechData(language=lang, text=text)],
    )


def language_of_text(text: str) -> str:
    """The ISO 639-1 code a transcript's script names: "ja" for any kana, else "ko" for hangul, else "zh" for Han
    ideographs, each only when they outnumber the words in other letters ("我用iPhone" is zh); "" otherwise (Latin,
    Cyrillic and the rest are shared by many languages: the TTS then decides from the text)."""
    counts = {"kana": 0, "hangul": 0, "han": 0}
    other_words = 0
    for word in re.findall(r"[^\W\d_]+", text):
        kinds = [_script(ch) for ch in word]
        for kind in kinds:
            if kind:
                counts[kind] += 1
        other_words += not all(kinds)
    if counts["kana"] and counts["kana"] + counts["han"] >= other_words:
        return "ja"
    if counts["hangul"] and counts["hangul"] >= other_words:
        return "ko"
    if counts["han"] and counts["han"] >= other_words:
        return "zh"
    return ""


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    if name.startswith(("HIRAGANA", "KATAKANA")):
        return "kana"
    if name.startswith("HANGUL"):
        return "hangul"
    if name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH")):
        return "han"
    return ""


def frame_16k(buffer: utils.AudioBuffer) -> rtc.AudioFrame:
    """Merge the utterance's frames (mono: no downmix needed) and resample them to 16 kHz."""
    frame = rtc.combine_audio_frames(buffer) if isinstance(buffer, list) else buffer
    if frame.sample_rate != STT_SAMPLE_RATE:
        resampler = rtc.AudioResampler(
            input_rate=frame.sample_rate, output_rate=STT_SAMPLE_RATE, num_channels=frame.num_channels
        )
        out = resampler.push(frame) + resampler.flush()
        frame = rtc.combine_audio_frames(out) if out else frame
    return frame


def wav_bytes_16k(buffer: utils.AudioBuffer) -> bytes:
    """The utterance as a 16 kHz mono s16 WAV file."""
    return frame_16k(buffer).to_wav_bytes()
