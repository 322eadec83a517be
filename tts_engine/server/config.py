"""What `python -m tts_engine serve` is configured with beside the engine (whose settings are tts_engine/config.py):
where it listens, who may use it, and how long and how much one client may hold.

Contract:
- `ServerConfig.from_env(environ, **overrides)` reads the variables below (given flags win); a bad value raises
  `ConfigError` naming the variable, the value and what is allowed. `ServerConfig()` is the documented default.
  - `TTS_HOST` (127.0.0.1: loopback unless told otherwise) and `TTS_PORT` (9000; 0 = any free port).
  - `TTS_API_KEY`: empty = no key. One key, or several separated by commas (one per client); when set, every route
    but `GET /healthz` needs `Authorization: Bearer <key>`.
  - `TTS_STREAM_IDLE_TIMEOUT_S` (20): a stream whose client takes no audio, or sends no text to an open WebSocket
    utterance, for this long is cut and its slot freed.
  - `TTS_CLIENT_MAX_STREAMS`: streams one client may hold at once; `auto` (default) = half the engine's capacity
    (at least 1), a number, or 0 = no per-client limit. A client is its API key when several keys are set, else
    its peer address.
- `listen_sockets(host, port)` binds the listening sockets (every address the host resolves to), so a taken port
  fails before anything heavy loads; `is_loopback(sockets)` says whether they are reachable from this machine only.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.env import Env
from tts_engine.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9000
DEFAULT_IDLE_TIMEOUT_S = 20.0
BACKLOG = 128  # aiohttp's default


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_keys: tuple[str, ...] = ()
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    client_max_streams: int | None = None  # None = auto (half the capacity); 0 = no limit

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ServerConfig:
        """The variables of the module doc; each keyword given (a CLI flag) wins, None included (auto)."""
        env = Env(environ)
        config = cls(
            host=env.str("TTS_HOST", DEFAULT_HOST),
            port=env.int("TTS_PORT", DEFAULT_PORT, lo=0, hi=65535),
            api_keys=parse_api_keys(env.str("TTS_API_KEY", "")),
            idle_timeout_s=env.float("TTS_STREAM_IDLE_TIMEOUT_S", DEFAULT_IDLE_TIMEOUT_S, lo=0.05, hi=3600.0),
            client_max_streams=parse_client_limit(env.str("TTS_CLIENT_MAX_STREAMS", "auto")),
        )
        config = dataclasses.replace(config, **overrides) if overrides else config  # each given flag wins
        if not 0.05 <= config.idle_timeout_s <= 3600.0:
            raise ConfigError(f"idle timeout {config.idle_timeout_s!r} s is not allowed; give 0.05..3600 "
                              "(TTS_STREAM_IDLE_TIMEOUT_S, --idle-timeout)")
        return config

    def client_limit(self, capacity: int) -> int:
        """Streams one client may hold (0 = no limit): auto is half the engine's capacity, at least 1."""
        if self.client_max_streams is None:
            return max(1, capacity // 2)
        return self.client_max_streams


def parse_api_keys(value: str) -> tuple[str, ...]:
    keys = tuple(key.strip() for key in value.split(",") if key.strip())
    for key in keys:
        if not key.isprintable() or " " in key:
            raise ConfigError("TTS_API_KEY holds a key with spaces or control characters; give printable keys "
                              "separated by commas")
    return keys


def parse_client_limit(value: str) -> int | None:
    text = value.strip().lower()
    if text in ("", "auto"):
        return None
    if text.isdigit() and int(text) <= 100_000:
        return int(text)
    raise ConfigError(f"TTS_CLIENT_MAX_STREAMS={value!r} is not allowed; give auto, 0 (no limit) or a number "
                      "1..100000")


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address `host` resolves to (one port for all of them).
    Raises OSError (port taken, address not on this machine) before anything is loaded."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # the first socket's free port for the others too
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def is_loopback(sockets: list[socket.socket]) -> bool:
    return all(ipaddress.ip_address(sock.getsockname()[0].split("%")[0]).is_loopback for sock in sockets)
