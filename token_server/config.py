"""Token server configuration, read from the environment (and a `.env` file) with errors that name the variable.

Contract: `ServerConfig.from_env(environ, dev=..., host=..., port=...)` returns a validated, frozen config or
raises `ConfigError` whose message names the variable, the bad value and what is allowed. It never puts the
API secret into a message. CLI flags (host, port, dev) override the environment.

`token_server` may not import `agent` or `tts_engine`; it shares the top-level `common` package with them for
`.env` loading and typed reads (same names and ranges as the agent where they overlap, e.g. `VAD_SILENCE_MS`
50..5000, default 200).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from common.env import ConfigError, Env
from common.env import load_dotenv as _load_dotenv

# The key pair `livekit-server --dev` starts with; only ever used with --dev.
DEV_API_KEY = "devkey"
DEV_API_SECRET = "secret"
DEV_LIVEKIT_URL = "ws://127.0.0.1:7880"

MAX_TOKEN_TTL_S = 3600
#: room, identity and agent names; always applied to the whole string (`is_valid_name`): `$` alone would let
#: a value that ends in a newline through, and that newline would land in the JWT and split log lines
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_WEB_DIR = Path(__file__).resolve().parent.parent / "web"


def is_valid_name(value: object) -> bool:
    """True for 1-64 characters of A-Z a-z 0-9 _ - and nothing else (no trailing newline)."""
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


@dataclass(frozen=True)
class ServerConfig:
    livekit_url: str
    api_key: str
    api_secret: str = field(repr=False)  # never printed
    agent_name: str = "voice-agent"
    token_ttl_s: int = 900
    allowed_origins: tuple[str, ...] = ()
    rate_limit_per_min: int = 30
    host: str = "127.0.0.1"
    port: int = 3000
    vad_silence_ms: int = 224
    dev: bool = False
    web_dir: Path = DEFAULT_WEB_DIR

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        dev: bool = False,
        host: str | None = None,
        port: int | None = None,
        web_dir: Path | None = None,
    ) -> ServerConfig:
        env = Env(environ, error=ConfigError)
        api_key = env.raw("LIVEKIT_API_KEY")
        api_secret = env.raw("LIVEKIT_API_SECRET")
        livekit_url = env.raw("LIVEKIT_URL")
        if dev:
            api_key = api_key or DEV_API_KEY
            api_secret = api_secret or DEV_API_SECRET
            livekit_url = livekit_url or DEV_LIVEKIT_URL
        missing = [n for n, v in (("LIVEKIT_API_KEY", api_key), ("LIVEKIT_API_SECRET", api_secret)) if not v]
        if missing:
            raise ConfigError(
                f"{' and '.join(missing)} not set: the token server needs the LiveKit API key pair to sign tokens "
                "(set them in the environment or .env, or pass --dev to use the `livekit-server --dev` pair)"
            )
        if not livekit_url:
            raise ConfigError("LIVEKIT_URL not set: the browser needs it to connect (e.g. wss://my.livekit.cloud)")
        _check_livekit_url(livekit_url)

        agent_name = env.raw("AGENT_NAME") or "voice-agent"
        if not is_valid_name(agent_name):
            raise ConfigError(f"AGENT_NAME={agent_name!r} is not allowed; use 1-64 characters of A-Z a-z 0-9 _ -")

        port_value = port if port is not None else env.int("TOKEN_SERVER_PORT", 3000, lo=0, hi=65535)
        if not 0 <= port_value <= 65535:
            raise ConfigError(f"--port={port_value} is out of range (allowed: 0..65535)")
        return cls(
            livekit_url=livekit_url,
            api_key=api_key or "",
            api_secret=api_secret or "",
            agent_name=agent_name,
            token_ttl_s=env.int("TOKEN_TTL_S", 900, lo=60, hi=MAX_TOKEN_TTL_S),
            allowed_origins=_origins(env),
            rate_limit_per_min=env.int("TOKEN_RATE_LIMIT_PER_MIN", 30, lo=1, hi=100_000),
            host=host or env.raw("TOKEN_SERVER_HOST") or "127.0.0.1",
            port=port_value,
            vad_silence_ms=env.int("VAD_SILENCE_MS", 224, lo=50, hi=5000),
            dev=dev,
            web_dir=web_dir or DEFAULT_WEB_DIR,
        )


def load_dotenv(path: str | os.PathLike[str] = ".env") -> dict[str, str]:
    """Read KEY=VALUE lines into os.environ; variables already set win. Returns what the file held.

    A malformed line raises ConfigError naming the file and line number (never the line: it may hold a secret).
    """
    return _load_dotenv(path, error=ConfigError)


def _check_livekit_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss", "http", "https") or not parts.netloc:
        raise ConfigError(f"LIVEKIT_URL={url!r} is not a LiveKit URL (allowed: ws://, wss://, http:// or https://HOST)")


def _origins(env: Env) -> tuple[str, ...]:
    value = env.raw("ALLOWED_ORIGINS")
    if value is None:
        return ()
    origins = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
            raise ConfigError(
                f"ALLOWED_ORIGINS item {item!r} is not an origin (allowed: a comma list of scheme://host[:port], "
                "e.g. https://app.example.com,http://localhost:5173; '*' is not accepted)"
            )
        origins.append(f"{parts.scheme}://{parts.netloc}".lower())
    return tuple(origins)
