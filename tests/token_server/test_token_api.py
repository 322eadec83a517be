"""POST /api/token against a real aiohttp server: every claim checked with livekit-api's TokenVerifier, every
bad input answered 4xx with the field named, the rate limit, method errors, and a server that keeps serving."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from livekit.api import TokenVerifier

import token_server.app as app_module
from token_server.config import NAME_PATTERN

JSON = {"Content-Type": "application/json"}


async def post_token(client, body: object, headers: dict[str, str] | None = None):
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return await client.post("/api/token", data=data, headers=headers or JSON)


async def test_token_carries_every_claim(client, config) -> None:
    before = int(time.time())
    resp = await post_token(client, {"room": "demo-room_1", "identity": "alice", "name": "Alice A."})
    assert resp.status == 200
    assert resp.headers["Cache-Control"] == "no-store"
    body = await resp.json()
    assert set(body) == {"server_url", "participant_token", "token", "url", "room", "identity", "expires_at"}
    assert (body["url"], body["room"], body["identity"]) == ("wss://lk.example.test", "demo-room_1", "alice")
    assert (body["server_url"], body["participant_token"]) == (body["url"], body["token"])  # LiveKit's names too

    claims = TokenVerifier(config.api_key, config.api_secret).verify(body["token"])
    assert claims.identity == "alice" and claims.name == "Alice A."
    video = claims.video
    assert video is not None
    assert video.room_join is True and video.room == "demo-room_1"
    assert video.can_publish is True and video.can_subscribe is True and video.can_publish_data is True
    # nothing beyond what a caller needs
    assert not video.room_admin and not video.room_create and not video.agent and not video.hidden
    assert claims.room_config is not None
    assert [a.agent_name for a in claims.room_config.agents] == ["voice-agent-test"]

    payload = jwt.decode(body["token"], config.api_secret, algorithms=["HS256"], issuer=config.api_key)
    assert payload["exp"] - payload["nbf"] == config.token_ttl_s == 600
    assert body["expires_at"] == payload["exp"]
    assert before + 600 <= payload["exp"] <= int(time.time()) + 601


async def test_token_does_not_verify_with_another_secret(client, config) -> None:
    body = await (await post_token(client, {"room": "r", "identity": "i"})).json()
    with pytest.raises(jwt.InvalidSignatureError):
        TokenVerifier(config.api_key, "not-the-secret-but-long-enough-for-hs256").verify(body["token"])


async def test_room_and_identity_are_generated_when_omitted(client, config) -> None:
    first = await (await post_token(client, {})).json()
    second = await (await client.post("/api/token", data=b"", headers=JSON)).json()  # empty body = {}
    for body in (first, second):
        assert NAME_PATTERN.fullmatch(body["room"]) and NAME_PATTERN.fullmatch(body["identity"])
        claims = TokenVerifier(config.api_key, config.api_secret).verify(body["token"])
        assert claims.identity == body["identity"] and claims.video.room == body["room"]
        assert claims.name == body["identity"]  # display name defaults to the identity
    assert first["room"] != second["room"] and first["identity"] != second["identity"]


async def test_ttl_follows_config(make_client, config) -> None:
    client = await make_client(config, token_ttl_s=3600)
    body = await (await post_token(client, {"room": "r", "identity": "i"})).json()
    payload = jwt.decode(body["token"], options={"verify_signature": False})
    assert payload["exp"] - payload["nbf"] == 3600


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"room": ""}, "room"),
        ({"room": "a" * 65}, "room"),
        ({"room": "has space"}, "room"),
        ({"room": "../etc"}, "room"),
        ({"room": "ümlaut"}, "room"),
        ({"room": 42}, "room"),
        ({"identity": ""}, "identity"),
        ({"identity": "x" * 65}, "identity"),
        ({"identity": "a/b"}, "identity"),
        ({"identity": ["alice"]}, "identity"),
        ({"name": ""}, "name"),
        ({"name": 7}, "name"),
        ({"name": "n" * 129}, "name"),
        ({"name": "line\nbreak"}, "name"),
        ({"room": "ok", "admin": True}, "admin"),
        ([1, 2], "body"),
        ('"just a string"', "body"),
        ("{not json", "body"),
        (b"\xff\xfe{}", "body"),
    ],
)
async def test_bad_input_is_400_naming_the_field(client, body: object, field: str) -> None:
    resp = await post_token(client, body)
    assert resp.status == 400
    err = await resp.json()
    assert err["field"] == field and err["error"]


async def test_long_values_are_cut_in_error_messages(client) -> None:
    err = await (await post_token(client, {"room": "z" * 5000})).json()
    assert err["field"] == "room" and len(err["error"]) < 300


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_non_json_content_type_is_415(client, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    resp = await client.post("/api/token", data=b'{"room": "r"}', headers=headers, skip_auto_headers=["Content-Type"])
    assert resp.status == 415
    assert (await resp.json())["field"] == "Content-Type"


async def test_oversized_body_is_413(client) -> None:
    resp = await post_token(client, {"name": "n" * 20_000})
    assert resp.status == 413
    assert (await resp.json())["field"] == "body"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_wrong_method_is_405_json(client, method: str) -> None:
    resp = await client.request(method, "/api/token")
    assert resp.status == 405
    assert "POST" in resp.headers["Allow"]
    err = await resp.json()
    assert err["field"] == "method" and method in err["error"]


async def test_post_to_config_is_405_and_unknown_api_is_404(client) -> None:
    assert (await client.post("/api/config")).status == 405
    resp = await client.get("/api/nope")
    assert resp.status == 404 and (await resp.json())["field"] == "path"


async def test_rate_limit_answers_429_with_retry_after(make_client, config) -> None:
    client = await make_client(config, rate_limit_per_min=3)
    statuses = [(await post_token(client, {})).status for _ in range(3)]
    assert statuses == [200, 200, 200]
    # bad requests count too, so the limit also caps probing
    resp = await post_token(client, {"room": "bad room"})
    assert resp.status == 429
    retry_after = int(resp.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    err = await resp.json()
    assert err["field"] == "rate_limit" and err["retry_after_s"] == retry_after and "3 per minute" in err["error"]
    # the rest of the server is not limited
    assert (await client.get("/healthz")).status == 200


async def test_handler_failure_is_500_and_server_keeps_serving(client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(app_module, "mint_token", broken)
    resp = await post_token(client, {})
    assert resp.status == 500 and (await resp.json())["field"] == "server"
    monkeypatch.undo()
    assert (await post_token(client, {})).status == 200


async def test_config_endpoint_gives_the_page_what_it_needs(client) -> None:
    resp = await client.get("/api/config")
    assert resp.status == 200
    assert await resp.json() == {
        "url": "wss://lk.example.test",
        "agent_name": "voice-agent-test",
        "vad_silence_ms": 224,
        "token_ttl_s": 600,
        "dev": False,
    }


async def test_healthz(client) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "ok" and isinstance(body["livekit_client"], bool)
