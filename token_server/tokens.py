"""Token requests: validate the caller's JSON and mint a LiveKit access token with `livekit-api`.

Contract:
- `parse_token_request(body)` takes the decoded JSON body and returns a `TokenRequest`, or raises
  `RequestError(message, field)` naming the field, the value and what is allowed. `room` and `identity` are
  1-64 characters of `[A-Za-z0-9_-]` and are generated when omitted; `name` is optional display text.
- `mint_token(config, request)` returns a `MintedToken` whose JWT carries the identity, the room grant
  (room_join, can_publish, can_subscribe, can_publish_data), a TTL of `config.token_ttl_s` and a
  `RoomConfiguration` that dispatches `config.agent_name` into the room; `expires_at` equals the JWT's `exp`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jwt
from livekit.api import AccessToken, RoomAgentDispatch, RoomConfiguration, VideoGrants

from token_server.config import ServerConfig, is_valid_name

MAX_DISPLAY_NAME = 128
ALLOWED_FIELDS = ("room", "identity", "name")


class RequestError(ValueError):
    """A client mistake; the server answers 4xx with {"error": message, "field": field}."""

    def __init__(self, message: str, *, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class TokenRequest:
    room: str
    identity: str
    name: str


@dataclass(frozen=True)
class MintedToken:
    token: str
    room: str
    identity: str
    expires_at: int  # unix seconds, the JWT's `exp`


def parse_token_request(body: Any) -> TokenRequest:
    if not isinstance(body, dict):
        raise RequestError(f"body must be a JSON object, got {type(body).__name__}", field="body")
    unknown = sorted(set(body) - set(ALLOWED_FIELDS))
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}; allowed fields: {', '.join(ALLOWED_FIELDS)}", field=str(unknown[0])
        )
    room = _name_field(body, "room") or f"room-{secrets.token_hex(4)}"
    identity = _name_field(body, "identity") or f"user-{secrets.token_hex(4)}"
    name = body.get("name")
    if name is None:
        name = identity
    elif not isinstance(name, str) or not name.strip() or len(name) > MAX_DISPLAY_NAME or not name.isprintable():
        raise RequestError(
            f"name={_show(name)} is not allowed; use 1-{MAX_DISPLAY_NAME} printable characters", field="name"
        )
    return TokenRequest(room=room, identity=identity, name=name.strip())


def mint_token(config: ServerConfig, request: TokenRequest) -> MintedToken:
    grants = VideoGrants(
        room_join=True,
        room=request.room,
        can_publish=True,
        can_subscribe=True,
        can_publish_data=True,
    )
    dispatch = RoomConfiguration(agents=[RoomAgentDispatch(agent_name=config.agent_name)])
    token = (
        AccessToken(config.api_key, config.api_secret)
        .with_identity(request.identity)
        .with_name(request.name)
        .with_grants(grants)
        .with_room_config(dispatch)
        .with_ttl(timedelta(seconds=config.token_ttl_s))
        .to_jwt()
    )
    # read `exp` back from what was signed, so expires_at cannot drift from the token
    expires_at = int(jwt.decode(token, options={"verify_signature": False})["exp"])
    return MintedToken(token=token, room=request.room, identity=request.identity, expires_at=expires_at)


def _name_field(body: dict[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not is_valid_name(value):
        raise RequestError(
            f"{field}={_show(value)} is not allowed; use 1-64 characters of A-Z a-z 0-9 _ - (or omit it to get one)",
            field=field,
        )
    return value


def _show(value: Any) -> str:
    """repr of a client value, cut short so a huge value cannot flood an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
