"""Typed reading of environment variables (and `.env` files) with errors that name the variable.

Shared by the engine and the agent (the agent may import the engine; never the other way round).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tts_engine.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def load_dotenv(path: str | os.PathLike[str] = ".env", *, override: bool = False) -> dict[str, str]:
    """Read KEY=VALUE lines into os.environ (existing variables win unless override). Returns what was read."""
    p = Path(path)
    if not p.is_file():
        return {}
    values: dict[str, str] = {}
    for lineno, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        if "=" not in line:
            raise ConfigError(f"{p}:{lineno}: expected KEY=VALUE, got {raw!r}")
        key, value = line.split("=", 1)
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
        if override or key not in os.environ:
            os.environ[key] = value
    return values


class Env:
    """Reads typed values from a mapping (os.environ by default)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def str(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else value

    def int(self, name: str, default: int, *, lo: int | None = None, hi: int | None = None) -> int:
        value = self.raw(name)
        if value is None:
            return default
        try:
            parsed = int(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not an integer{_range_text(lo, hi)}") from None
        _check_range(name, parsed, lo, hi)
        return parsed

    def float(self, name: str, default: float, *, lo: float | None = None, hi: float | None = None) -> float:
        value = self.raw(name)
        if value is None:
            return default
        try:
            parsed = float(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not a number{_range_text(lo, hi)}") from None
        _check_range(name, parsed, lo, hi)
        return parsed

    def bool(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{name}={value!r} is not a boolean; allowed: 1/0, true/false, yes/no, on/off")

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        value = self.raw(name)
        if value is None:
            return default
        if value not in allowed:
            raise ConfigError(f"{name}={value!r} is not allowed; allowed values: {', '.join(allowed)}")
        return value


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" (allowed: {lo}..{hi})"
    if lo is not None:
        return f" (allowed: >= {lo})"
    if hi is not None:
        return f" (allowed: <= {hi})"
    return ""


def _check_range(name: str, value: float, lo: float | None, hi: float | None) -> None:
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{name}={value} is out of range{_range_text(lo, hi)}")
