"""POST /v1/audio/speech through the official `openai` SDK (and LiveKit's OpenAI TTS plugin) against a real server
on the tiny checkpoint: every response_format decodes (PyAV) to the engine's own PCM, audio and SSE streaming, long
input in one request, and every bad field is a 4xx naming the field and the allowed values.

The route has no frame cap field (the OpenAI API has none), so the engine's `stream` is wrapped to default
`max_frames` to a few frames: random weights never say EOS, and the tests are about the route, not speech length."""

from __future__ import annotations

import base64
import functools
import io
import json
import struct
import wave

import av
import numpy as np
import openai
import pytest

FRAMES = 4
TEXT = "Hello there, this is a test."


async def served(serve, **overrides):
    srv = await serve(**overrides)
    original = srv.engine.stream

    @functools.wraps(original)
    def capped(*args, **kwargs):
        kwargs.setdefault("max_frames", FRAMES)
        return original(*args, **kwargs)

    srv.engine.stream = capped
    srv.client = openai.AsyncOpenAI(base_url=f"{srv.base}/v1", api_key="not-needed", max_retries=0)
    return srv


def decode(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    rate = frames[0].sample_rate
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]), rate


async def test_pcm_and_wav_are_the_engines_exact_samples(serve) -> None:
    srv = await served(serve)
    expected = await srv.engine.synthesize(TEXT, "serena")
    assert len(expected) == FRAMES * 1920
    pcm = await srv.client.audio.speech.create(model="qwen3-tts", voice="serena", input=TEXT, response_format="pcm")
    assert pcm.response.headers["content-type"] == "audio/pcm"
    assert pcm.content == expected.tobytes()
    wav = await srv.client.audio.speech.create(model="tts-1", voice="Serena", input=TEXT, response_format="wav")
    assert wav.content[:4] == b"RIFF" and wav.response.headers["content-type"] == "audio/wav"
    samples, rate = decode(wav.content)
    assert rate == 24000 and samples.astype(np.int16).tobytes() == expected.tobytes()
    await srv.client.close()


@pytest.mark.parametrize("fmt, content_type, lossless", [
    ("mp3", "audio/mpeg", False), ("opus", "audio/ogg", False), ("aac", "audio/aac", False),
    ("flac", "audio/flac", True),
])
async def test_compressed_formats_decode_to_the_same_audio(serve, fmt: str, content_type: str, lossless: bool) -> None:
    srv = await served(serve)
    expected = (await srv.engine.synthesize(TEXT, "ryan")).astype(np.float64) / 32768.0
    async with srv.client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="ryan", input=TEXT, response_format=fmt
    ) as resp:
        assert resp.headers["content-type"] == content_type
        chunks = [chunk async for chunk in resp.iter_bytes()]
    samples, rate = decode(b"".join(chunks))
    if lossless:
        assert rate == 24000 and np.array_equal(samples.astype(np.float64) / 32768.0, expected)
    else:  # lossy: same length within codec padding, and the same waveform (energy ratio, best-lag correlation)
        if rate != 24000:  # the opus decoder answers at 48 kHz
            samples = samples[:: rate // 24000]
        samples = samples.astype(np.float64)
        assert abs(len(samples) - len(expected)) <= 2 * 1152 + 2112
        n = len(expected)
        best = max(
            float(np.dot(samples[lag : lag + n], expected[: len(samples[lag : lag + n])]))
            / (np.linalg.norm(samples[lag : lag + n]) * np.linalg.norm(expected[: len(samples[lag : lag + n])]) + 1e-12)
            for lag in range(0, min(2200, len(samples) - n // 2))
        )
        assert best > 0.8, f"{fmt}: decoded audio does not match the engine's (correlation {best:.2f})"
    await srv.client.close()


async def test_sse_stream_carries_the_audio_and_a_done_event(serve) -> None:
    srv = await served(serve)
    expected = await srv.engine.synthesize(TEXT, "serena")
    events = []
    async with srv.client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="serena", input=TEXT, response_format="pcm", stream_format="sse"
    ) as resp:
        assert resp.headers["content-type"] == "text/event-stream"
        async for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) == FRAMES  # one event per engine packet: streamed as it was made
    assert b"".join(base64.b64decode(e["audio"]) for e in deltas) == expected.tobytes()
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] == FRAMES
    await srv.client.close()


async def test_long_mixed_input_is_one_request(serve) -> None:
    from tests.server.test_long_text_http import TEXT_2000

    srv = await served(serve)
    segments = len(srv.engine.segments(TEXT_2000))
    expected = await srv.engine.synthesize(TEXT_2000, "serena", max_frames=1)
    srv.engine.stream = functools.partial(srv.engine.stream, max_frames=1)
    pcm = await srv.client.audio.speech.create(model="m", voice="serena", input=TEXT_2000, response_format="pcm")
    assert len(pcm.content) == segments * 1920 * 2 and pcm.content == expected.tobytes()
    await srv.client.close()


async def test_bad_fields_are_4xx_naming_field_and_allowed_values(serve) -> None:
    srv = await served(serve, max_text_chars=100)
    create = srv.client.audio.speech.create
    cases = [
        (dict(voice="alloy"), 400, "voice", "serena"),
        (dict(response_format="ogg"), 400, "response_format", "mp3, opus, aac, flac, wav, pcm"),
        (dict(speed=1.5), 400, "speed", "1.0"),
        (dict(stream_format="chunks"), 400, "stream_format", "audio, sse"),
        (dict(instructions="whisper"), 400, "instructions", "1.7B"),
        (dict(input=""), 400, "input", "empty"),
        (dict(input="🙂🙂 ... !?"), 400, "input", "nothing to speak"),
        (dict(extra_body={"stream": "yes"}), 400, "stream", "true, false"),
        (dict(input="a" * 101), 413, "input", "TTS_DEEP_STREAM_MAX_TEXT_CHARS"),
        (dict(model=""), 400, "model", "non-empty"),
        (dict(extra_body={"language": "klingon"}), 400, "language", "english"),
        (dict(extra_body={"volume": 3}), 400, "volume", "allowed fields"),
    ]
    for change, status, param, hint in cases:
        kwargs = dict(model="tts-1", voice="serena", input=TEXT, response_format="pcm") | change
        with pytest.raises(openai.APIStatusError) as info:
            await create(**kwargs)
        error = info.value.body
        assert info.value.status_code == status, (change, error)
        assert error["param"] == param and hint in error["message"], (change, error)
    for raw in (b"{not json", b"[1]", b'{"model": "m", "voice": "serena"}'):
        async with srv.session.post(f"{srv.base}/v1/audio/speech", data=raw) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] in ("body", "input")
    ok = await create(model="tts-1", voice="serena", input=TEXT, response_format="pcm")
    assert len(ok.content) == FRAMES * 1920 * 2
    assert srv.engine.stats()["streams_failed"] == 0
    await srv.client.close()


async def test_livekit_openai_plugin_speaks_through_it(serve) -> None:
    from livekit.plugins import openai as lk_openai

    srv = await served(serve)
    expected = await srv.engine.synthesize(TEXT, "serena")
    for fmt in ("pcm", "mp3"):
        tts = lk_openai.TTS(base_url=f"{srv.base}/v1", api_key="x", model="qwen3-tts", voice="serena",
                            response_format=fmt)
        frames = [ev.frame async for ev in tts.synthesize(TEXT)]
        await tts.aclose()
        got = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])
        assert all(f.sample_rate == 24000 for f in frames)
        if fmt == "pcm":  # the plugin's emitter may pad its last frame
            assert got[: len(expected)].tobytes() == expected.tobytes() and not got[len(expected) :].any()
        else:
            assert abs(len(got) - len(expected)) < 4000
    await srv.client.close()


async def test_a_wav_download_has_its_real_sizes_and_a_wav_stream_the_open_ended_ones(serve) -> None:
    srv = await served(serve)
    samples = FRAMES * 1920
    url = f"{srv.base}/v1/audio/speech"
    body = {"model": "tts-1", "voice": "serena", "input": TEXT, "response_format": "wav"}
    # the whole file: what the openai SDK's create() gets for wav, and any format with "stream": false
    wav = await srv.client.audio.speech.create(**body)
    assert wav.response.headers["content-length"] == str(len(wav.content))
    riff_size, = struct.unpack("<I", wav.content[4:8])
    assert riff_size == len(wav.content) - 8
    with wave.open(io.BytesIO(wav.content)) as reader:  # Python's wave read 89,478 s here before
        assert (reader.getnframes(), reader.getframerate(), reader.getnchannels()) == (samples, 24000, 1)
    summary = await (await srv.session.get(f"{srv.base}/v1/requests/{wav.response.headers['x-request-id']}")).json()
    assert summary["delivery"] == "file" and summary["bytes_sent"] == len(wav.content)
    for change in ({"stream": False, "response_format": "mp3"}, {"stream": False, "response_format": "flac"}):
        async with srv.session.post(url, json=body | change) as resp:
            data = await resp.read()
            assert resp.status == 200 and resp.headers["content-length"] == str(len(data))
            assert len(decode(data)[0]) >= samples - 1152  # lossy codecs may trim their priming
    # streamed (asked for with stream_format): the header goes out before the length is known
    async with srv.session.post(url, json=body | {"stream_format": "audio"}) as resp:
        assert resp.headers.get("transfer-encoding") == "chunked" and "content-length" not in resp.headers
        streamed = await resp.read()
    assert struct.unpack("<I", streamed[4:8])[0] == 0xFFFFFFFF  # the documented open-ended placeholder
    assert decode(streamed)[0].astype(np.int16).tobytes() == decode(wav.content)[0].astype(np.int16).tobytes()
    async with srv.session.post(url, json=body | {"stream": True}) as resp:  # vLLM-Omni: stream alone means SSE
        assert resp.headers["content-type"] == "text/event-stream"
        await resp.read()
    await srv.client.close()


async def test_the_native_wav_route_has_its_real_sizes(serve) -> None:
    srv = await serve()
    async with srv.session.post(f"{srv.base}/synthesize",
                                json={"text": TEXT, "speaker": "serena", "max_frames": 3}) as resp:
        data = await resp.read()
        assert resp.headers["content-length"] == str(len(data))
    with wave.open(io.BytesIO(data)) as reader:
        assert reader.getnframes() == 3 * 1920
