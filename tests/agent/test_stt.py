"""OmniSTT against the fake OpenAI server: request format (base64 WAV data URL to /v1/chat/completions,
thinking off), error mapping (retryable or not), and the soft-failure policy (empty transcript + observer)."""

from __future__ import annotations

import base64
import io
import socket
import wave

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import APIConnectOptions, APIStatusError, APITimeoutError

from agent.stt import OmniSTT, STTObserver
from lab.fake_openai import FakeOpenAIServer, Script


def utterance(rate: int = 48_000, seconds: float = 0.5) -> list[rtc.AudioFrame]:
    t = np.arange(int(rate * seconds)) / rate
    pcm = (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)
    step = rate // 100
    return [rtc.AudioFrame(pcm[i : i + step].tobytes(), rate, 1, step) for i in range(0, pcm.size, step)]


def dead_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


async def test_request_format_and_transcript() -> None:
    requests: list[float] = []
    async with FakeOpenAIServer(Script(transcripts=["hello world"], stt_latency_s=0.0)) as server:
        stt = OmniSTT(base_url=server.base_url, model="omni", observer=STTObserver(on_request=requests.append))
        event = await stt.recognize(utterance())
        await stt.aclose()
    assert event.alternatives[0].text == "hello world"
    assert len(requests) == 1
    (body,) = server.requests
    assert body["model"] == "omni"
    assert body["stream"] is False and body["temperature"] == 0.0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    (message,) = body["messages"]
    audio, text = message["content"]
    assert text["type"] == "text" and "Transcribe" in text["text"]
    url = audio["audio_url"]["url"]
    assert audio["type"] == "audio_url" and url.startswith("data:audio/wav;base64,")
    with wave.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16_000, 1, 2)
        assert abs(w.getnframes() - 8000) < 400  # 0.5 s resampled from 48 kHz


async def test_fake_server_rejects_a_bad_audio_url() -> None:
    import aiohttp

    async with FakeOpenAIServer() as server, aiohttp.ClientSession() as http:
        body = {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,AAAA"}}]}]}
        async with http.post(f"{server.base_url}/chat/completions", json=body) as resp:
            assert resp.status == 400
            assert "messages[0].content[0].audio_url.url" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize(
    "fault, error_type, retryable",
    [("500", APIStatusError, True), ("malformed", Exception, False), ("slow", APITimeoutError, True)],
)
async def test_errors_map_to_livekit_api_errors(fault: str, error_type: type, retryable: bool) -> None:
    async with FakeOpenAIServer(Script(stt_fault=fault, slow_s=3.0)) as server:
        stt = OmniSTT(base_url=server.base_url, model="m")
        with pytest.raises(error_type) as info:
            await stt._recognize_impl(utterance(), conn_options=APIConnectOptions(timeout=0.5))
        await stt.aclose()
    assert getattr(info.value, "retryable", None) is retryable


async def test_endpoint_down_is_a_retryable_connection_error() -> None:
    from livekit.agents import APIConnectionError

    stt = OmniSTT(base_url=dead_url(), model="m")
    with pytest.raises(APIConnectionError) as info:
        await stt._recognize_impl(utterance(), conn_options=APIConnectOptions(timeout=1.0))
    await stt.aclose()
    assert info.value.retryable


@pytest.mark.parametrize("fault", ["500", "malformed", "slow", "down"])
async def test_failure_gives_empty_transcript_and_one_observer_call(fault: str) -> None:
    failures: list[Exception] = []
    errors: list[bool] = []
    async with FakeOpenAIServer(Script(stt_fault=None if fault == "down" else fault, slow_s=3.0)) as server:
        url = dead_url() if fault == "down" else server.base_url
        stt = OmniSTT(base_url=url, model="m", observer=STTObserver(on_failure=failures.append))
        stt.on("error", lambda ev: errors.append(ev.recoverable))
        event = await stt.recognize(
            utterance(), conn_options=APIConnectOptions(max_retry=1, retry_interval=0.0, timeout=0.5)
        )
        await stt.aclose()
    assert event.alternatives[0].text == ""
    assert len(failures) == 1
    assert errors and all(errors)  # never counted towards closing the session
    if fault in ("500", "slow"):
        assert server.stt_calls == 2  # retried once
