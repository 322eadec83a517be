"""`.env` files and typed environment variables, shared by every service and the worker.

Contract:

- `load_dotenv(path=".env", *, override=False, error=ConfigError) -> dict[str, str]` reads KEY=VALUE lines
  (an `export ` prefix is dropped, one pair of matching quotes around the value is stripped, blank lines and
  `#` comments are skipped) into `os.environ`; variables already set win unless `override`. It returns what
  the file held ({} when there is no file). A malformed line raises `error` naming the file and line number,
  never echoing the line: it may hold a secret.
- `Env(environ=None, *, error=ConfigError)` reads typed values from a mapping (`os.environ` by default):
  `raw`, `str`, `int`, `float`, `bool`, `choice`. A blank value counts as unset (the default is used). A bad
  value raises `error` whose message names the variable, the value and what is allowed.

`ConfigError` (a ValueError) is the one configuration error of the project: the engine, the worker and the token
server all raise and catch it; `error` lets a caller raise another class instead.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["ConfigError", "Env", "load_dotenv"]



class ConfigError(ValueError):
    """A setting that is missing, does not parse or is out of range; the message names the variable."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def load_dotenv(
    path: str | os.PathLike[str] = ".env", *, override: bool = False, error: type[Exception] = ConfigError
) -> dict[str, str]:
    """Read KEY=VALUE lines into os.environ (existing variables win unless override). Returns what was read."""
    p = Path(path)
    if not p.is_file():
        return {}
    values: dict[str, str] = {}
    for lineno, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ")
        if "=" not in line:
            # do not echo the line: it may hold a secret
            raise error(f"{p}:{lineno}: expected KEY=VALUE")
        key, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
        if override or key not in os.environ:
            os.environ[key] = value
    return values


class Env:
    """Reads typed values from a mapping (os.environ by default); bad values raise `error` naming the variable."""

    def __init__(self, environ: Mapping[str, str] | None = None, *, error: type[Exception] = ConfigError) -> None:
        self.environ = os.environ if environ is None else environ
        self.error = error

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def str(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else value

    # Below `def str`, a bare `str` (and so on) in an annotation would name the method, not the type.
    def int(
        self, name: builtins.str, default: builtins.int, *, lo: builtins.int | None = None,
        hi: builtins.int | None = None,
    ) -> builtins.int:
        value = self.raw(name)
        if value is None:
            return default
        try:
            parsed = int(value)
        except ValueError:
            raise self.error(f"{name}={value!r} is not an integer{_range_text(lo, hi)}") from None
        self._check_range(name, parsed, lo, hi)
        return parsed

    def float(
        self, name: builtins.str, default: builtins.float, *, lo: builtins.float | None = None,
        hi: builtins.float | None = None,
    ) -> builtins.float:
        value = self.raw(name)
        if value is None:
            return default
        try:
            parsed = float(value)
        except ValueError:
            raise self.error(f"{name}={value!r} is not a number{_range_text(lo, hi)}") from None
        self._check_range(name, parsed, lo, hi)
        return parsed

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self.raw(name)
        if value is None:
            return default
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise self.error(f"{name}={value!r} is not a boolean; allowed: 1/0, true/false, yes/no, on/off")

    def choice(
        self, name: builtins.str, default: builtins.str, allowed: tuple[builtins.str, ...]
    ) -> builtins.str:
        value = self.raw(name)
        if value is None:
            return default
        if value not in allowed:
            raise self.error(f"{name}={value!r} is not allowed; allowed values: {', '.join(allowed)}")
        return value

    def _check_range(
        self, name: builtins.str, value: builtins.float, lo: builtins.float | None, hi: builtins.float | None
    ) -> None:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.error(f"{name}={value} is out of range{_range_text(lo, hi)}")


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" (allowed: {lo}..{hi})"
    if lo is not None:
        return f" (allowed: >= {lo})"
    if hi is not None:
        return f" (allowed: <= {hi})"
    return ""
