"""Bodies that are JSON to a parser's limits: too deeply nested, numbers past Python's digit limit. Each is a 400
naming the body, never the 500 they used to be; and every 404 is the JSON error shape, page paths included."""

from __future__ import annotations

import pytest

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"[" * 10_000, "nested too deeply"),
        (b'{"a":' * 3_000, "nested too deeply"),
        (b'{"room": 1' + b"0" * 5_000 + b"}", "digits"),
        (b"\x0c", "Expecting value"),  # not JSON whitespace: not an empty body either
        (b"\x0b{}", "Expecting value"),
        (b"\r", "Expecting value"),  # only an empty body means {}
    ],
)
async def test_parser_limits_are_400_not_500(client, raw: bytes, words: str) -> None:
    resp = await client.post("/api/token", data=raw, headers=JSON)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["field"] == "body" and words in error["error"]
    assert (await client.post("/api/token", data=b"{}", headers=JSON)).status == 200


@pytest.mark.parametrize("path", ["/no-such-page.html", "/api/nope", "/vendor/nope.js"])
async def test_every_404_is_json(client, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 404 and resp.content_type == "application/json"
    assert (await resp.json())["field"] == "path"


# LiveKit's standard fields (tests/token_server/test_standard_endpoint.py) at the parser's limits and with the
# values a hostile client would try: each is a 400 naming the field (or the body), never a 500 or a token
@pytest.mark.parametrize(
    "raw, field",
    [
        # past jsonbody.MAX_DEPTH (64) nothing of the body is read, so the body is what is wrong; within it the
        # validator names the first field that is not the contract's, however deep the rest goes
        (b'{"room_config": ' + b'{"agents": [' * 600 + b"]}" * 600 + b"}", "body"),
        (b'{"room_config": ' + b'{"agents": [' * 20 + b"]}" * 20 + b"}", "room_config.agents[0].agents"),
        (b'{"participant_attributes": ' + b'{"a":' * 3_000 + b"}", "body"),
        (b'{"room_config": {"max_participants": 1' + b"0" * 5_000 + b"}}", "body"),
        (b'{"participant_attributes": {"k": 1e999}}', "participant_attributes.k"),
        (b'{"participant_attributes": {"k\\n": "v"}}', "participant_attributes"),
        (b'{"participant_attributes": {"\\ud800": "v"}}', "participant_attributes"),
        (b'{"participant_attributes": {"k": "\\ud800"}}', "participant_attributes.k"),
        (b'{"participant_metadata": "\\udfff"}', "participant_metadata"),
        (b'{"participant_metadata": ["x"]}', "participant_metadata"),
        (b'{"participant_attributes": null, "room_config": {"agents": [null]}}', "room_config.agents[0]"),
        (b'{"room_config": {"agents": [{"agent_name": ["voice-agent-test"]}]}}', "room_config.agents[0].agent_name"),
        (b'{"room_config": {"agents": [{"agent_name": "voice-agent-test\\n"}]}}', "room_config.agents[0].agent_name"),
        (b'{"room_config": {"agents": [{"restart_policy": 2}]}}', "room_config.agents[0].restart_policy"),
        (b'{"room_config": {"sync_streams": true}}', "room_config.sync_streams"),
        (b'{"room_config": {"min_playout_delay": -1}}', "room_config.min_playout_delay"),
        (b'{"room_config": {"__proto__": {}}}', "room_config.__proto__"),
        (b'{"room_config": []}', "room_config"),
        (b'{"participant_identity": "ada", "participant_identity": "../x"}', "participant_identity"),  # last wins
    ],
)
async def test_standard_fields_at_their_limits_are_400(client, raw: bytes, field: str) -> None:
    resp = await client.post("/api/token", data=raw, headers=JSON)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["field"] == field and error["error"], error
    assert len(error["error"]) < 400
    assert (await client.post("/api/token", data=b'{"room_name": "ok"}', headers=JSON)).status == 201
