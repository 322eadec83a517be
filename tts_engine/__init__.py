"""Embedded deep-streaming Qwen3-TTS engine.

The engine knows nothing about LiveKit, agents or HTTP clients; it turns (text, speaker, language) into 24 kHz PCM
packets. The names below are its whole public surface: the agent and the lab use the engine only through them
(tests/agent/test_layout.py), and `import tts_engine` stays light (torch loads only with the names marked lazy).
- `Engine`, `Packet` (lazy: torch): the engine and what its streams yield (docs/engine.md).
- `EngineConfig`: its settings from the environment. The error types: every caller mistake is a `TTSInputError`.
- `StreamSegmenter`, `SegmenterOptions`: streaming text cut into speakable segments (the design's TextBridge).
- `diagnose` (lazy: torch): the checkpoint doctor, run before any load. `make_checkpoint` (lazy: torch): a
  random-weight checkpoint in the real layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.config import EngineConfig
from tts_engine.errors import (
    CheckpointError,
    ConfigError,
    EmptyTextError,
    EngineBusyError,
    TextFeedFull,
    TextTooLongError,
    TTSInputError,
    UnknownLanguageError,
    UnknownSpeakerError,
)
from tts_engine.text.segment import SegmenterOptions, StreamSegmenter

if TYPE_CHECKING:
    from tts_engine.doctor import diagnose
    from tts_engine.engine import Engine, Packet
    from tts_engine.model.factory import make_checkpoint


__all__ = [
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "CheckpointError",
    "ConfigError",
    "EmptyTextError",
    "Engine",
    "EngineBusyError",
    "EngineConfig",
    "Packet",
    "SegmenterOptions",
    "StreamSegmenter",
    "TTSInputError",
    "TextFeedFull",
    "TextTooLongError",
    "UnknownLanguageError",
    "UnknownSpeakerError",
    "diagnose",
    "make_checkpoint",
]

_LAZY = {"Engine": "tts_engine.engine", "Packet": "tts_engine.engine", "diagnose": "tts_engine.doctor",
         "make_checkpoint": "tts_engine.model.factory"}


def __getattr__(name: str) -> object:
    # these pull in torch; keep `import tts_engine` light for the agent's config and the command lines
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
