"""Embedded deep-streaming Qwen3-TTS engine.

Public API: `Engine`, `EngineConfig`, `Packet` and the error types. The engine knows nothing about
LiveKit, agents or HTTP clients; it turns (text, speaker, language) into 24 kHz PCM packets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tts_engine.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.config import EngineConfig
from tts_engine.errors import (
    CheckpointError,
    ConfigError,
    EmptyTextError,
    EngineBusyError,
    TextTooLongError,
    TTSInputError,
    UnknownLanguageError,
    UnknownSpeakerError,
)

if TYPE_CHECKING:
    from tts_engine.engine import Engine, Packet


__all__ = [
    "SAMPLE_RATE",
    "SAMPLES_PER_FRAME",
    "CheckpointError",
    "ConfigError",
    "EmptyTextError",
    "Engine",
    "EngineBusyError",
    "EngineConfig",
    "Packet",
    "TTSInputError",
    "TextTooLongError",
    "UnknownLanguageError",
    "UnknownSpeakerError",
]


def __getattr__(name: str) -> object:
    # Engine pulls in torch; keep `import tts_engine` light for the agent's config and the CLI.
    if name in ("Engine", "Packet"):
        from tts_engine import engine

        return getattr(engine, name)
    raise AttributeError(name)
