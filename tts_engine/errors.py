"""Error types of the engine.

Every mistake a caller can make is a `ValueError` subclass whose message names the field, the value
and what is allowed, so servers can map it to a 4xx and the engine stays usable for the next request.
"""

from __future__ import annotations

from common.env import ConfigError  # the project's one configuration error, re-exported for the engine's callers

__all__ = ["CheckpointError", "ConfigError", "EmptyTextError", "EngineBusyError", "TTSInputError", "TextFeedFull",
           "TextTooLongError", "UnknownLanguageError", "UnknownSpeakerError"]


class TTSInputError(ValueError):
    """A request the engine refuses (bad text, speaker, language or option)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownSpeakerError(TTSInputError):
    def __init__(self, speaker: str, valid: list[str]) -> None:
        super().__init__(f"unknown speaker {speaker!r}; valid speakers: {', '.join(sorted(valid))}", field="speaker")


class UnknownLanguageError(TTSInputError):
    def __init__(self, language: str, valid: list[str]) -> None:
        super().__init__(
            f"unknown language {language!r}; valid languages: {', '.join(sorted(valid))}", field="language"
        )


class EmptyTextError(TTSInputError):
    def __init__(self) -> None:
        super().__init__("text is empty; give at least one non-space character", field="text")


class TextTooLongError(TTSInputError):
    """Over the per-request cap (servers answer 413); longer than one stream is fine: the engine cuts it."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            f"text has {length} characters; at most {limit} are allowed per request "
            "(TTS_DEEP_STREAM_MAX_TEXT_CHARS)", field="text"
        )
        self.length, self.limit = length, limit


class TextFeedFull(TTSInputError):
    """A piece pushed into a streaming-text stream would take it past the text tokens its KV positions can speak;
    the piece was not taken and the stream is intact (close it, and speak the rest as another stream)."""


class CheckpointError(ValueError):
    """A checkpoint directory that is missing, incomplete or of the wrong shape. Names the file."""


class EngineBusyError(RuntimeError):
    """All stream slots are in use; retry later."""
