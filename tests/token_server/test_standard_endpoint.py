"""LiveKit's standard token endpoint (docs/token_server.md cites the contract): the request body that
`TokenSource.endpoint` of the client SDKs sends, answered 201 with `server_url` + `participant_token`; every new
field checked in the signed token; a `room_config` can name only this server's own agent."""

from __future__ import annotations

import json

import pytest
from livekit.api import TokenVerifier

JSON = {"Content-Type": "application/json"}


async def post(client, body: object):
    return await client.post("/api/token", data=json.dumps(body), headers=JSON)


async def test_the_standard_body_end_to_end(client, config) -> None:
    # exactly what livekit-client 2.23's TokenSource.endpoint(...).fetch({roomName, participantName,
    # participantIdentity, participantMetadata, participantAttributes, agentName}) puts on the wire
    body = {
        "room_name": "standard-room",
        "participant_name": "Ada L.",
        "participant_identity": "ada",
        "participant_metadata": '{"plan": "free"}',
        "participant_attributes": {"team": "blue", "locale": "zh-CN"},
        "room_config": {"agents": [{"agent_name": "voice-agent-test"}]},
    }
    resp = await post(client, body)
    assert resp.status == 201, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    answer = await resp.json()
    assert answer["server_url"] == "wss://lk.example.test"
    assert answer["participant_token"] == answer["token"] and answer["url"] == answer["server_url"]
    assert (answer["room"], answer["identity"]) == ("standard-room", "ada")

    claims = TokenVerifier(config.api_key, config.api_secret).verify(answer["participant_token"])
    assert claims.identity == "ada" and claims.name == "Ada L."
    assert claims.metadata == '{"plan": "free"}'
    assert claims.attributes == {"team": "blue", "locale": "zh-CN"}
    video = claims.video
    assert video.room == "standard-room" and video.room_join and video.can_publish and video.can_subscribe
    assert not video.room_admin and not video.room_create and not video.agent and not video.hidden
    assert [a.agent_name for a in claims.room_config.agents] == ["voice-agent-test"]
    assert claims.room_config.agents[0].metadata == ""


async def test_an_empty_room_config_or_none_still_dispatches_the_agent(client, config) -> None:
    for body in ({"participant_name": "x"}, {"room_config": {}}, {"room_config": {"agents": []}},
                 {"room_config": {"agents": [{"agent_name": ""}]}},
                 # proto3 JSON may spell out fields at their default value: that means unset
                 {"room_config": {"agents": [{"agent_name": "voice-agent-test", "metadata": ""}],
                                  "max_participants": 0, "metadata": ""}}):
        resp = await post(client, body)
        assert resp.status == 201, (body, await resp.text())
        claims = TokenVerifier(config.api_key, config.api_secret).verify((await resp.json())["participant_token"])
        assert [a.agent_name for a in claims.room_config.agents] == ["voice-agent-test"], body


async def test_room_and_identity_are_generated_for_the_standard_body_too(client, config) -> None:
    answer = await (await post(client, {"participant_name": "Anon"})).json()
    claims = TokenVerifier(config.api_key, config.api_secret).verify(answer["participant_token"])
    assert claims.video.room == answer["room"] and answer["room"].startswith("room-")
    assert claims.identity == answer["identity"] and answer["identity"].startswith("user-")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        # the room, identity and name rules of the first names hold under the standard names
        ({"room_name": "../etc"}, "room_name", "room_name='../etc' is not allowed"),
        ({"room_name": ""}, "room_name", "1-64 characters"),
        ({"participant_identity": "bob\n"}, "participant_identity", "is not allowed"),
        ({"participant_identity": 7}, "participant_identity", "is not allowed"),
        ({"participant_name": "line\nbreak"}, "participant_name", "printable"),
        ({"participant_name": "n" * 129}, "participant_name", "1-128"),
        # metadata and attributes
        ({"participant_metadata": 5}, "participant_metadata", "string"),
        ({"participant_metadata": "m" * 1025}, "participant_metadata", "1024"),
        ({"participant_metadata": "a\x00b"}, "participant_metadata", "NUL"),
        ({"participant_attributes": ["a"]}, "participant_attributes", "object"),
        ({"participant_attributes": {"k": 1}}, "participant_attributes.k", "string"),
        ({"participant_attributes": {"k": "v" * 257}}, "participant_attributes.k", "256"),
        ({"participant_attributes": {"": "v"}}, "participant_attributes", "printable"),
        ({"participant_attributes": {f"k{i}": "v" for i in range(17)}}, "participant_attributes", "at most 16"),
        # LiveKit's own attributes (the agent's state, publishing on behalf of another) are not the caller's
        ({"participant_attributes": {"lk.agent.state": "speaking"}}, "participant_attributes.lk.agent.state", "lk."),
        ({"participant_attributes": {"lk.publish_on_behalf": "agent"}}, "participant_attributes.lk.publish_on_behalf",
         "LiveKit's own"),
        # room_config: only this server's own agent; no other agent, no agent metadata, no room settings
        ({"room_config": {"agents": [{"agent_name": "other-agent"}]}}, "room_config.agents[0].agent_name",
         "only its own agent 'voice-agent-test'"),
        ({"room_config": {"agents": [{"agent_name": "voice-agent-test"}, {"agent_name": "voice-agent-test"}]}},
         "room_config.agents", "list of one"),
        ({"room_config": {"agents": [{"agent_name": "voice-agent-test", "metadata": "{\"x\":1}"}]}},
         "room_config.agents[0].metadata", "not accepted"),
        ({"room_config": {"agents": [{"deployment": "staging"}]}}, "room_config.agents[0].deployment", "not accepted"),
        ({"room_config": {"agents": [{"attributes": {"a": "b"}}]}}, "room_config.agents[0].attributes", "not accepted"),
        ({"room_config": {"agents": [{"agentName": "x"}]}}, "room_config.agents[0].agentName", "unknown field"),
        ({"room_config": {"agents": ["voice-agent-test"]}}, "room_config.agents[0]", "object"),
        ({"room_config": {"agents": {"agent_name": "voice-agent-test"}}}, "room_config.agents", "list of one"),
        ({"room_config": {"egress": {"room": {"room_name": "x"}}}}, "room_config.egress", "not accepted"),
        ({"room_config": {"max_participants": 1000}}, "room_config.max_participants", "not accepted"),
        ({"room_config": {"empty_timeout": 86400}}, "room_config.empty_timeout", "not accepted"),
        ({"room_config": {"metadata": "x"}}, "room_config.metadata", "not accepted"),
        ({"room_config": {"grants": {"room_admin": True}}}, "room_config.grants", "unknown field"),
        ({"room_config": "voice-agent-test"}, "room_config", "object"),
        # one set of names per body; unknown names are refused by name
        ({"room": "a", "participant_name": "b"}, "room", "use one set"),
        ({"room_name": "a", "identity": "b"}, "identity", "use one set"),
        ({"roomName": "camel"}, "roomName", "unknown field"),
        ({"participant_permission": {"can_publish": True}}, "participant_permission", "unknown field"),
    ],
)
async def test_every_standard_field_is_checked(client, body: dict, field: str, words: str) -> None:
    resp = await post(client, body)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["field"] == field and words in error["error"], error
    assert len(error["error"]) < 400
    assert (await post(client, {"room_name": "after"})).status == 201  # and the server goes on serving
