"""Hostile input on the TTS server that the schema fuzz (test_fuzz_http.py) cannot express."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from tts_engine.server.app import TTSServer


@pytest.mark.parametrize("given", ["abc\n", "call-1\r\n", "a" * 64 + "\n", "", "a" * 65, "bad id"])
def test_a_request_id_must_match_as_a_whole_or_is_replaced(given: str) -> None:
    server = TTSServer.__new__(TTSServer)  # request_id reads nothing of the instance
    request = make_mocked_request("POST", "/tts/stream", headers={"x-request-id": given})
    chosen = server.request_id(request)
    assert chosen != given and len(chosen) == 16 and chosen.isalnum()


def test_a_clean_request_id_is_kept() -> None:
    server = TTSServer.__new__(TTSServer)
    request = make_mocked_request("POST", "/tts/stream", headers={"x-request-id": "call-42.turn-3:a_b"})
    assert server.request_id(request) == "call-42.turn-3:a_b"


HOSTILE_BODIES = [
    (b"[" * 100_000, "body", "nested too deeply"),
    (b'{"a":' * 5_000, "body", "nested too deeply"),
    (b'{"text": "hi", "speaker": "serena", "seed": 1' + b"0" * 5_000 + b"}", "body", "digits"),
    (b'{"text": "\\ud800 hi", "speaker": "serena"}', "text", "surrogate"),
    (b'{"text": "hi", "speaker": "\\udfff"}', "speaker", "surrogate"),
    (b'{"text": "hi", "speaker": "serena", "instruct": "x\\ud800"}', "instruct", "surrogate"),
    (b'{"text": "hi", "speaker": "serena", "language": ""}', "language", "valid languages: auto"),
    (b'{"text": "hi", "speaker": "serena", "language": 0}', "language", "must be a string"),
    (b'{"text": null, "speaker": "serena"}', "text", "must be a string"),  # used to speak "-"
    (b'{"text": "hi", "speaker": "serena", "language": false}', "language", "must be a string"),
]


@pytest.mark.parametrize("endpoint", ["/tts/stream", "/synthesize"])
async def test_hostile_bodies_are_400_naming_the_field_never_500(serve, endpoint: str) -> None:
    srv = await serve()
    for raw, field, words in HOSTILE_BODIES:
        async with srv.session.post(f"{srv.base}{endpoint}", data=raw,
                                    headers={"content-type": "application/json"}) as resp:
            assert resp.status == 400, (raw[:60], resp.status, await resp.text())
            error = await resp.json()
            assert error["field"] == field and words in error["error"], (raw[:60], error)
    body = {"text": "hi", "speaker": "serena", "max_frames": 2}
    async with srv.session.post(f"{srv.base}{endpoint}", json=body) as resp:
        assert resp.status == 200 and len(await resp.read()) >= 2 * 1920 * 2
    health = await (await srv.session.get(f"{srv.base}/healthz")).json()
    assert health["open_streams"] == 0 and srv.engine.stats()["streams_failed"] == 0


async def test_unknown_paths_and_methods_are_the_json_error_shape(serve) -> None:
    srv = await serve()
    async with srv.session.get(f"{srv.base}/nope") as resp:
        assert resp.status == 404 and (await resp.json())["field"] == "path"
    async with srv.session.delete(f"{srv.base}/tts/stream") as resp:
        assert resp.status == 405 and "POST" in resp.headers["Allow"]
        error = await resp.json()
        assert error["field"] == "method" and "DELETE" in error["error"]
    async with srv.session.post(f"{srv.base}/tts/stream", data=b"x" * (2 << 20)) as resp:
        assert resp.status == 413 and (await resp.json())["field"] == "body"


SPEECH_HOSTILE = [
    (b"[" * 100_000, "body"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "speed": 1' + b"0" * 5_000 + b"}", "body"),
    (b'{"model": "m", "input": "\\ud800 hi", "voice": "serena", "response_format": "pcm"}', "input"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "language": "\\udc00"}', "language"),
    # a falsy value of the wrong type is not "the default"
    (b'{"model": "m", "input": "hi", "voice": "serena", "response_format": 0}', "response_format"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "stream_format": false}', "stream_format"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "language": 0}', "language"),
    # unhashable values used to be looked up in a dict: 500
    (b'{"model": "m", "input": "hi", "voice": "serena", "response_format": []}', "response_format"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "response_format": {"a": 1}}', "response_format"),
    (b'{"model": "m", "input": "hi", "voice": "serena", "stream_format": ["sse"]}', "stream_format"),
]


async def test_openai_route_refuses_parser_limits_and_surrogates_with_400(serve) -> None:
    srv = await serve()
    for raw, param in SPEECH_HOSTILE:
        async with srv.session.post(f"{srv.base}/v1/audio/speech", data=raw,
                                    headers={"content-type": "application/json"}) as resp:
            assert resp.status == 400, (raw[:60], resp.status, await resp.text())
            assert (await resp.json())["error"]["param"] == param
    body = {"model": "m", "input": "hi", "voice": "serena", "response_format": "pcm"}
    async with srv.session.post(f"{srv.base}/v1/audio/speech", json=body) as resp:
        assert resp.status == 200


async def test_websocket_survives_parser_limits_and_surrogates(serve) -> None:
    srv = await serve()
    async with srv.session.ws_connect(f"{srv.base}/tts/ws") as ws:
        for message, field in [("[" * 100_000, "body"), ('{"type": "start", "seed": 1' + "0" * 5_000 + "}", "body"),
                               ('{"type": "start", "speaker": "\\ud800"}', "speaker"),
                               ('{"type": "start", "speaker": "serena", "language": 0}', "language")]:
            await ws.send_str(message)
            event = await ws.receive_json(timeout=10)
            assert event["type"] == "error" and event["field"] == field, event
        await ws.send_json({"type": "start", "speaker": "serena", "max_frames": 2})
        assert (await ws.receive_json(timeout=10))["type"] == "started"
        await ws.send_str('{"type": "text", "text": "hello \\udfff there."}')
        event = await ws.receive_json(timeout=10)
        assert event["type"] == "error" and event["field"] == "text", event
        await ws.send_json({"type": "cancel"})
        while (event := await ws.receive(timeout=10)).type.name == "BINARY" or event.json()["type"] != "done":
            pass
    health = await (await srv.session.get(f"{srv.base}/healthz")).json()
    assert health["open_streams"] == 0
