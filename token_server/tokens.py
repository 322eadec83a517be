"""Token requests: validate the caller's JSON and mint a LiveKit access token with `livekit-api`.

Contract:
- `parse_token_request(body)` takes the decoded JSON body and returns a `TokenRequest`, or raises
  `RequestError(message, field)` naming the field, the value and what is allowed. Two sets of names, never
  mixed in one body:
  - LiveKit's standard token endpoint (what `TokenSource.endpoint` of the client SDKs sends; docs/token_server.md
    cites the contract): `room_name`, `participant_identity`, `participant_name`, `participant_metadata`,
    `participant_attributes`, `room_config`;
  - this server's first names: `room`, `identity`, `name`.
  Room and identity are 1-64 characters of `[A-Za-z0-9_-]` and are generated when omitted; the name is optional
  display text. `room_config` may only name this server's own agent (`agents: [{"agent_name": AGENT_NAME}]`):
  any other agent, agent metadata or room setting is refused, so a caller can neither dispatch another agent nor
  change the room or the grants.
- `mint_token(config, request)` returns a `MintedToken` whose JWT carries the identity, name, metadata and
  attributes, the room grant (room_join, can_publish, can_subscribe, can_publish_data), a TTL of
  `config.token_ttl_s` and a `RoomConfiguration` that dispatches `config.agent_name` into the room; `expires_at`
  equals the JWT's `exp`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import jwt
from livekit.api import AccessToken, RoomAgentDispatch, RoomConfiguration, VideoGrants

from token_server.config import ServerConfig, is_valid_name

MAX_DISPLAY_NAME = 128
MAX_METADATA = 1024
MAX_ATTRIBUTES = 16
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 256
RESERVED_ATTRIBUTE_PREFIX = "lk."  # LiveKit's own attributes (the agent's lk.agent.state, lk.publish_on_behalf, ...)
LEGACY_FIELDS = ("room", "identity", "name")
STANDARD_FIELDS = (
    "room_name",
    "participant_identity",
    "participant_name",
    "participant_metadata",
    "participant_attributes",
    "room_config",
)
ALLOWED_FIELDS = STANDARD_FIELDS + LEGACY_FIELDS
#: RoomConfiguration fields (livekit_room.proto) a caller may not set: a value other than the proto default is a 400
ROOM_SETTINGS = ("name", "empty_timeout", "departure_timeout", "max_participants", "metadata", "egress",
                 "min_playout_delay", "max_playout_delay", "sync_streams", "tags")
#: RoomAgentDispatch fields (livekit_agent_dispatch.proto) other than agent_name: refused unless the proto default
DISPATCH_SETTINGS = ("metadata", "restart_policy", "deployment", "attributes")


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
    metadata: str = ""
    attributes: dict[str, str] = field(default_factory=dict)
    standard: bool = False  # the body used LiveKit's standard names (the answer is then 201 Created)


@dataclass(frozen=True)
class MintedToken:
    token: str
    room: str
    identity: str
    expires_at: int  # unix seconds, the JWT's `exp`


def parse_token_request(body: Any, *, agent_name: str = "voice-agent") -> TokenRequest:
    """The request in `body` (decoded JSON); `agent_name` is the one agent a `room_config` may name."""
    if not isinstance(body, dict):
        raise RequestError(f"body must be a JSON object, got {type(body).__name__}", field="body")
    unknown = sorted(set(body) - set(ALLOWED_FIELDS))
    if unknown:
        raise RequestError(
            f"unknown field {_show(unknown[0])}; allowed fields: {', '.join(STANDARD_FIELDS)} "
            f"(LiveKit's standard token request) or {', '.join(LEGACY_FIELDS)}",
            field=str(unknown[0]),
        )
    standard = any(name in body for name in STANDARD_FIELDS)
    legacy = [name for name in LEGACY_FIELDS if name in body]
    if standard and legacy:
        raise RequestError(
            f"field {legacy[0]!r} mixes this server's first names ({', '.join(LEGACY_FIELDS)}) with LiveKit's "
            f"standard ones ({', '.join(STANDARD_FIELDS)}); use one set",
            field=legacy[0],
        )
    room_key, identity_key, name_key = STANDARD_FIELDS[:3] if standard else LEGACY_FIELDS
    room = _name_field(body, room_key) or f"room-{secrets.token_hex(4)}"
    identity = _name_field(body, identity_key) or f"user-{secrets.token_hex(4)}"
    name = body.get(name_key)
    if name is None:
        name = identity
    elif not isinstance(name, str) or not name.strip() or len(name) > MAX_DISPLAY_NAME or not name.isprintable():
        raise RequestError(
            f"{name_key}={_show(name)} is not allowed; use 1-{MAX_DISPLAY_NAME} printable characters", field=name_key
        )
    _check_room_config(body.get("room_config"), agent_name)
    return TokenRequest(
        room=room,
        identity=identity,
        name=name.strip(),
        metadata=_metadata(body.get("participant_metadata")),
        attributes=_attributes(body.get("participant_attributes")),
        standard=standard,
    )


def mint_token(config: ServerConfig, request: TokenRequest) -> MintedToken:
    grants = VideoGrants(
        room_join=True,
        room=request.room,
        can_publish=True,
        can_subscribe=True,
        can_publish_data=True,
    )
    # always this server's own dispatch: whatever room_config the caller sent has been checked, never passed on
    dispatch = RoomConfiguration(agents=[RoomAgentDispatch(agent_name=config.agent_name)])
    token = (
        AccessToken(config.api_key, config.api_secret)
        .with_identity(request.identity)
        .with_name(request.name)
        .with_grants(grants)
        .with_room_config(dispatch)
        .with_ttl(timedelta(seconds=config.token_ttl_s))
    )
    if request.metadata:
        token = token.with_metadata(request.metadata)
    if request.attributes:
        token = token.with_attributes(request.attributes)
    jwt_text = token.to_jwt()
    # read `exp` back from what was signed, so expires_at cannot drift from the token
    expires_at = int(jwt.decode(jwt_text, options={"verify_signature": False})["exp"])
    return MintedToken(token=jwt_text, room=request.room, identity=request.identity, expires_at=expires_at)


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


def _metadata(value: Any) -> str:
    if value is None:
        return ""
    if not _is_text(value, MAX_METADATA):
        raise RequestError(
            f"participant_metadata={_show(value)} is not allowed; use a string of at most {MAX_METADATA} "
            "characters (UTF-8 text, no NUL)",
            field="participant_metadata",
        )
    return value


def _attributes(value: Any) -> dict[str, str]:
    where = "participant_attributes"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(f"{where} must be an object of string values, got {type(value).__name__}", field=where)
    if len(value) > MAX_ATTRIBUTES:
        raise RequestError(f"{where} has {len(value)} entries; at most {MAX_ATTRIBUTES} are allowed", field=where)
    for key, item in value.items():
        if not key or len(key) > MAX_ATTRIBUTE_KEY or not key.isprintable():
            raise RequestError(
                f"{where} key {_show(key)} is not allowed; use 1-{MAX_ATTRIBUTE_KEY} printable characters", field=where
            )
        if key.startswith(RESERVED_ATTRIBUTE_PREFIX):
            raise RequestError(
                f"{where} key {_show(key)} is not allowed: keys starting with {RESERVED_ATTRIBUTE_PREFIX!r} are "
                "LiveKit's own",
                field=f"{where}.{key}",
            )
        if not _is_text(item, MAX_ATTRIBUTE_VALUE):
            raise RequestError(
                f"{where}.{key}={_show(item)} is not allowed; use a string of at most {MAX_ATTRIBUTE_VALUE} "
                "characters (UTF-8 text, no NUL)",
                field=f"{where}.{key}",
            )
    return dict(value)


def _check_room_config(value: Any, agent_name: str) -> None:
    """A `room_config` may only ask for this server's own agent (what TokenSource.endpoint sends for `agentName`);
    every other setting is refused naming its path. Proto3 JSON may carry a field at its default value
    ("", 0, [], {}, false): that means unset and is accepted."""
    where = "room_config"
    if value is None:
        return
    if not isinstance(value, dict):
        raise RequestError(f"{where} must be an object (a LiveKit RoomConfiguration), got {type(value).__name__}",
                           field=where)
    for key in value:
        if key == "agents":
            continue
        if key not in ROOM_SETTINGS:
            raise RequestError(f"unknown field {where}.{key}; RoomConfiguration has: agents, "
                               f"{', '.join(ROOM_SETTINGS)}", field=f"{where}.{key}")
        if not _is_default(value[key]):
            raise RequestError(
                f"{where}.{key} is not accepted: this server sets up the room itself (only "
                f"{where}.agents naming {agent_name!r} may be sent)",
                field=f"{where}.{key}",
            )
    agents = value.get("agents")
    if agents is None or agents == []:
        return
    if not isinstance(agents, list) or len(agents) != 1:
        raise RequestError(
            f"{where}.agents must be a list of one dispatch naming {agent_name!r}, got {_show(agents)}",
            field=f"{where}.agents",
        )
    dispatch = agents[0]
    path = f"{where}.agents[0]"
    if not isinstance(dispatch, dict):
        raise RequestError(f"{path} must be an object (a LiveKit RoomAgentDispatch), got {type(dispatch).__name__}",
                           field=path)
    for key, item in dispatch.items():
        if key == "agent_name":
            if item not in (None, "", agent_name):
                raise RequestError(
                    f"{path}.agent_name={_show(item)} is not allowed: this server dispatches only its own agent "
                    f"{agent_name!r} (name it, or leave room_config out)",
                    field=f"{path}.agent_name",
                )
        elif key not in DISPATCH_SETTINGS:
            raise RequestError(f"unknown field {path}.{key}; RoomAgentDispatch has: agent_name, "
                               f"{', '.join(DISPATCH_SETTINGS)}", field=f"{path}.{key}")
        elif not _is_default(item):
            raise RequestError(
                f"{path}.{key} is not accepted: this server dispatches its agent with none (only agent_name)",
                field=f"{path}.{key}",
            )


def _is_text(value: Any, max_chars: int) -> bool:
    """A string of at most `max_chars` characters that is valid UTF-8 text without NUL (JSON's "\\ud800" is not)."""
    if not isinstance(value, str) or len(value) > max_chars or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _is_default(value: Any) -> bool:
    return value is None or value in ("", 0, [], {})  # False == 0


def _show(value: Any) -> str:
    """repr of a client value, cut short so a huge value cannot flood an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
