"""What OpenAI-compatible clients ask first (GET /v1/models in OpenAI's shape, GET /v1/audio/voices in vLLM-Omni's),
and the optional API key: with TTS_API_KEY set, every route but /healthz needs `Authorization: Bearer <key>`, a
missing or wrong key is a 401 in the route's error shape, and with several keys each key is one client."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from tests.server.slow_clients import session_from
from tts_engine.errors import ConfigError
from tts_engine.server.config import ServerConfig, parse_api_keys

KEY = "tts-test-key-1"
OPENAI_ROUTES = ("/v1/audio/speech", "/v1/models", "/v1/audio/voices")


async def test_models_and_voices_answer_in_the_shapes_clients_expect(serve, tiny_checkpoint) -> None:
    srv = await serve()
    async with srv.session.get(f"{srv.base}/v1/models") as resp:
        models = await resp.json()
    assert models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert card["id"] == tiny_checkpoint.name  # the checkpoint's folder
    assert card["object"] == "model" and card["owned_by"] == "tts_engine" and isinstance(card["created"], int)
    async with srv.session.get(f"{srv.base}/v1/audio/voices") as resp:
        assert await resp.json() == {"voices": sorted(srv.engine.speakers), "uploaded_voices": []}
    client = openai.AsyncOpenAI(base_url=f"{srv.base}/v1", api_key="unused", max_retries=0)
    listed = [model.id async for model in client.models.list()]
    assert listed == [card["id"]]
    speech = await client.audio.speech.create(model=listed[0], voice=(await _voices(srv))[0], input="Hi there.",
                                              response_format="pcm", extra_body={"language": "english"})
    assert speech.response.status_code == 200
    await client.close()


async def _voices(srv) -> list[str]:
    async with srv.session.get(f"{srv.base}/v1/audio/voices") as resp:
        return (await resp.json())["voices"]


async def test_a_key_guards_every_route_but_health(serve) -> None:
    srv = await serve(server=ServerConfig(api_keys=(KEY,), client_max_streams=0))
    srv.engine.stream = _capped(srv.engine.stream)
    async with srv.session.get(f"{srv.base}/openapi.json", headers=_bearer(KEY)) as resp:
        doc = await resp.json()
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    routes = [(method.upper(), path) for path, ops in doc["paths"].items() for method in ops]
    assert ("GET", "/healthz") in routes and len(routes) >= 11
    for method, path in routes:
        url = f"{srv.base}{path.replace('{request_id}', 'nope')}"
        for headers in ({}, _bearer("wrong"), {"Authorization": f"Basic {KEY}"}, {"Authorization": "Bearer"}):
            async with srv.session.request(method, url, headers=headers, json={}) as resp:
                if path == "/healthz":
                    assert resp.status == 200
                    continue
                assert resp.status == 401, (method, path, headers, resp.status)
                assert resp.headers["WWW-Authenticate"] == "Bearer"
                body = await resp.json()
                if path in OPENAI_ROUTES:  # OpenAI's shape, as the openai SDK reads it
                    assert body["error"]["code"] == "invalid_api_key" and body["error"]["message"], body
                else:
                    assert body["field"] == "authorization" and "API key" in body["error"], body
            assert "401" in doc["paths"][path][method.lower()]["responses"] or path == "/healthz"
    async with srv.session.post(f"{srv.base}/tts/stream", headers=_bearer(KEY),
                                json={"text": "Hi there.", "speaker": "serena", "max_frames": 2}) as resp:
        assert resp.status == 200 and len(await resp.read()) == 2 * 1920 * 2
    async with srv.session.ws_connect(f"{srv.base}/tts/ws", headers=_bearer(KEY)) as ws:
        await ws.send_json({"type": "start", "speaker": "serena"})
        assert (await ws.receive_json())["type"] == "started"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await srv.session.ws_connect(f"{srv.base}/tts/ws")
    assert refused.value.status == 401
    wrong = openai.AsyncOpenAI(base_url=f"{srv.base}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await wrong.audio.speech.create(model="tts-1", voice="serena", input="Hi.", response_format="pcm")
    with pytest.raises(openai.AuthenticationError):
        await wrong.models.list()
    await wrong.close()
    right = openai.AsyncOpenAI(base_url=f"{srv.base}/v1", api_key=KEY, max_retries=0)
    speech = await right.audio.speech.create(model="tts-1", voice="serena", input="Hi.", response_format="pcm")
    assert len(speech.content) == 2 * 1920 * 2
    await right.close()


async def test_with_several_keys_each_key_is_one_client(serve) -> None:
    srv = await serve(server=ServerConfig(api_keys=("key-a", "key-b"), client_max_streams=1))
    client = session_from("127.0.4.1")  # both keys from the same address: the key, not the address, is the client
    try:
        body = {"text": "This one takes a while to say, so it stays open.", "speaker": "serena", "max_frames": 200}
        held = await client.post(f"{srv.base}/tts/stream", json=body, headers=_bearer("key-a"))
        assert held.status == 200
        async with client.post(f"{srv.base}/tts/stream", json=body, headers=_bearer("key-a")) as resp:
            assert resp.status == 429 and "key #1" in (await resp.json())["error"]  # the key is never echoed
        async with client.post(f"{srv.base}/tts/stream", json={**body, "max_frames": 2},
                               headers=_bearer("key-b")) as resp:
            assert resp.status == 200
        held.close()
    finally:
        await client.close()


def test_keys_are_parsed_and_refused_with_the_variable_named() -> None:
    assert parse_api_keys(" a1 , b2,, ") == ("a1", "b2") and parse_api_keys("") == ()
    with pytest.raises(ConfigError, match="TTS_API_KEY"):
        parse_api_keys("has space")
    config = ServerConfig.from_env({"TTS_API_KEY": "k1,k2", "TTS_CLIENT_MAX_STREAMS": "0",
                                    "TTS_STREAM_IDLE_TIMEOUT_S": "7"})
    assert (config.api_keys, config.client_max_streams, config.idle_timeout_s) == (("k1", "k2"), 0, 7.0)
    assert ServerConfig.from_env({}).host == "127.0.0.1"  # loopback unless told otherwise
    for name, value in (("TTS_CLIENT_MAX_STREAMS", "lots"), ("TTS_STREAM_IDLE_TIMEOUT_S", "0")):
        with pytest.raises(ConfigError, match=name):
            ServerConfig.from_env({name: value})


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _capped(stream):  # random weights never say EOS: two frames are enough here
    def capped(*args, **kwargs):
        return stream(*args, **{**kwargs, "max_frames": kwargs.get("max_frames") or 2})

    return capped
