"""Room, identity and agent-name rules are full-string matches: a value that only ends in a newline (which `$`
lets through) is refused with a 400 naming the field, and never reaches a JWT or a log line."""

from __future__ import annotations

import json

import pytest

from token_server.config import ConfigError, ServerConfig, is_valid_name

JSON = {"Content-Type": "application/json"}

NEWLINE_TAILED = ["bob\n", "c" * 64 + "\n", "demo\n", "\n", "a\n\n", "a\r\n"]


@pytest.mark.parametrize("value", NEWLINE_TAILED)
def test_name_rule_matches_the_whole_string(value: str) -> None:
    assert not is_valid_name(value)
    assert is_valid_name(value.rstrip("\r\n") or "x")


@pytest.mark.parametrize("field", ["room", "identity"])
@pytest.mark.parametrize("value", ["bob\n", "c" * 64 + "\n", "demo\n"])
async def test_token_api_refuses_a_trailing_newline(client, field: str, value: str) -> None:
    resp = await client.post("/api/token", data=json.dumps({field: value}), headers=JSON)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["field"] == field
    assert repr(value) in error["error"] and "A-Z a-z 0-9 _ -" in error["error"]


async def test_a_clean_value_still_passes(client) -> None:
    resp = await client.post("/api/token", data=json.dumps({"room": "demo", "identity": "c" * 64}), headers=JSON)
    assert resp.status == 200
    body = await resp.json()
    assert (body["room"], body["identity"]) == ("demo", "c" * 64)


def test_agent_name_rule_is_a_full_match() -> None:
    env = {"LIVEKIT_URL": "ws://127.0.0.1:7880", "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s"}
    with pytest.raises(ConfigError, match="AGENT_NAME"):
        ServerConfig.from_env({**env, "AGENT_NAME": "agent\nx"})
    assert ServerConfig.from_env({**env, "AGENT_NAME": "agent-1"}).agent_name == "agent-1"
