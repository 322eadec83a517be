"""Who a request's client is, and how much of the TTS server it may hold: the optional API key, per-client limits.

Contract:
- Keys (`TTS_API_KEY`): with none configured every request passes. With keys, every route but `GET /healthz` needs
  `Authorization: Bearer <key>` (compared in constant time); otherwise 401 + `WWW-Authenticate: Bearer`, in the
  route's error shape (errors.py). `Clients.middleware` checks this and records the request's client.
- A client is its key when several keys are configured (one key per client), else its peer address. Behind a reverse
  proxy every peer is the proxy: give each client its own key, or lift the limit (TTS_CLIENT_MAX_STREAMS=0).
- `claim(client)` counts one more open stream for the client and returns True, or returns False when the client
  already holds `limit` (0 = no limit): the route answers 429 + Retry-After. `release(client)` gives one back. A
  count exists only while the client holds a stream, so memory is bounded by the open streams.
"""

from __future__ import annotations

import hmac
from typing import Any

from aiohttp import web

from tts_engine.server.errors import unauthorized_response

OPEN_PATHS = ("/healthz",)  # reachable without a key: liveness probes carry none
CLIENT = web.RequestKey("tts_client", str)


class Clients:
    def __init__(self, keys: tuple[str, ...] = (), limit: int = 0) -> None:
        self._keys = [key.encode() for key in keys]
        self.limit = limit
        self._held: dict[str, int] = {}

    # ---- identity ---------------------------------------------------------------------------
    def identify(self, request: web.Request) -> tuple[str | None, str | None]:
        """(client, None) for a request that may pass, or (None, why not) for a missing or wrong key."""
        peer = request.remote or "unknown"
        if not self._keys:
            return peer, None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None, ("this server needs an API key: send the header 'Authorization: Bearer <key>' "
                          "(the server's TTS_API_KEY)")
        token = given.strip().encode()
        matches = [hmac.compare_digest(token, key) for key in self._keys]  # every key compared: constant time
        if not any(matches):
            return None, "the API key is not valid for this server (Authorization: Bearer <key>, TTS_API_KEY)"
        return (f"key #{matches.index(True) + 1}" if len(self._keys) > 1 else peer), None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        client, refused = self.identify(request)
        if client is None and request.path not in OPEN_PATHS:
            return unauthorized_response(request.path, refused or "unauthorized")
        request[CLIENT] = client or request.remote or "unknown"
        return await handler(request)

    # ---- shares -------------------------------------------------------------------------------
    def claim(self, client: str) -> bool:
        held = self._held.get(client, 0)
        if self.limit and held >= self.limit:
            return False
        self._held[client] = held + 1
        return True

    def release(self, client: str) -> None:
        held = self._held.get(client, 0) - 1
        if held > 0:
            self._held[client] = held
        else:
            self._held.pop(client, None)

    def held(self, client: str) -> int:
        return self._held.get(client, 0)

    @property
    def open_streams(self) -> int:
        return sum(self._held.values())
