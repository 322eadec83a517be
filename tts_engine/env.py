"""Typed reading of environment variables (and `.env` files) with errors that name the variable.

Shared by the engine and the agent (the agent may import the engine; never the other way round).
A thin layer over the top-level `envfile` package (which `token_server` shares too): same rules, but
errors are `tts_engine.errors.ConfigError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import envfile
from tts_engine.errors import ConfigError

__all__ = ["ConfigError", "Env", "load_dotenv"]


def load_dotenv(path: str | os.PathLike[str] = ".env", *, override: bool = False) -> dict[str, str]:
    """Read KEY=VALUE lines into os.environ (existing variables win unless override). Returns what was read.

    A malformed line raises ConfigError naming the file and line number (never the line: it may hold a secret).
    """
    return envfile.load_dotenv(path, override=override, error=ConfigError)


class Env(envfile.Env):
    """Reads typed values from a mapping (os.environ by default); bad values raise ConfigError."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(environ, error=ConfigError)
