"""The text tokenizer of a checkpoint (Qwen2 byte-level BPE from vocab.json + merges.txt + tokenizer_config.json).

Contract: `TextTokenizer.from_dir(model_dir)` loads it through transformers' AutoTokenizer (the same files the
official processor reads, so ids match the official tokenization exactly, for the real tokenizer and for our
small test tokenizer alike); `encode(text)` returns the ids without adding any special tokens of its own.
A missing or unreadable file raises `CheckpointError` naming it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tts_engine.errors import CheckpointError
from tts_engine.model.layout import TOKENIZER_FILES


class TextTokenizer:
    def __init__(self, backend: Callable[..., Any], source: Path) -> None:  # a transformers tokenizer
        self._backend = backend
        self.source = source

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TextTokenizer:
        model_dir = Path(model_dir)
        for name in TOKENIZER_FILES:
            if not (model_dir / name).is_file():
                raise CheckpointError(f"{model_dir / name}: required tokenizer file is missing")
        from transformers import AutoTokenizer  # heavy (seconds to import): only when a checkpoint loads

        # transformers logs advisory warnings about regex/special tokens for local folders; they are noise here
        tf_logger = logging.getLogger("transformers")
        level = tf_logger.level
        tf_logger.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # tokenizers' BPE-from-files notice
                backend = AutoTokenizer.from_pretrained(str(model_dir))
        except Exception as exc:  # any parse failure is a broken checkpoint
            raise CheckpointError(f"{model_dir}: cannot load the text tokenizer ({type(exc).__name__}: {exc})") from exc
        finally:
            tf_logger.setLevel(level)
        return cls(backend, model_dir)

    def encode(self, text: str) -> list[int]:
        return list(self._backend(text, add_special_tokens=False)["input_ids"])
