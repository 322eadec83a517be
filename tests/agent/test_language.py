"""The caller's language, end to end on the production path (docs/agent.md "The caller's language"): OmniSTT's
transcript names its language (SpeechData.language), the LLM gets the transcript under instructions to answer in
the user's language, and every TTS request of the reply carries it (Qwen3-TTS's name); the TextBridge cuts the
streamed Chinese reply at its own punctuation. The fake vLLM (lab/fake_openai.py) answers in Chinese."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.engine_client import LocalBackend
from agent.stt import final_transcript, language_of_text
from agent.tts import QwenTTS
from lab.simulate import SimOptions, load_vad, run_call
from tts_engine.text.segment import CJK_CLAUSE, CJK_SENTENCE

CHINESE_QUESTION = "你好，今天天气怎么样？"
CHINESE_REPLY = "今天天气很好，阳光明媚，气温大约二十度。下午会有一点微风，很适合出去散步！你想去公园吗？"


@pytest.mark.parametrize(
    ("text", "code"),
    [(CHINESE_QUESTION, "zh"), ("我用iPhone拍照", "zh"), ("ラーメンが好きです", "ja"), ("東京に行きます", "ja"),
     ("안녕하세요, 잘 지내세요?", "ko"), ("Hello there", ""), ("Привет, как дела?", ""), ("I like 寿司 a lot", ""),
     ("", ""), ("42", "")],
)
def test_the_transcript_names_its_language_where_its_script_does(text: str, code: str) -> None:
    assert language_of_text(text) == code
    event = final_transcript("r", text, "")  # OmniSTT: no language given -> the transcript's
    assert event.alternatives[0].language.language == code
    assert final_transcript("r", text, "en").alternatives[0].language.language == "en"  # whisper tiny.en's


def test_the_tts_follows_the_caller_in_the_languages_it_speaks(tiny_engine: Any) -> None:
    tts = QwenTTS(LocalBackend(tiny_engine))
    assert tts.reply_language == "auto"
    for code, name in [("zh", "chinese"), ("zh-CN", "chinese"), ("en", "english"), ("ja", "japanese"),
                       ("ko", "korean"), ("de", "german"), ("sv", "auto"), ("", "auto")]:
        tts.follow_caller(code)
        assert tts.reply_language == name, code
        assert name in tiny_engine.languages or name == "auto"
    pinned = QwenTTS(LocalBackend(tiny_engine), language="english")  # TTS_LANGUAGE names one: it wins
    pinned.follow_caller("zh")
    assert pinned.reply_language == "english"


class RecordingBackend(LocalBackend):
    """The real engine; every synthesis request's text and language recorded."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine, max_frames_per_segment=3)
        self.requests: list[tuple[str, str]] = []  # (text or "<stream>", language)

    async def stream(self, text: str, *, speaker: str, language: str) -> AsyncIterator[Any]:
        self.requests.append((text, language))
        async for packet in super().stream(text, speaker=speaker, language=language):
            yield packet

    def open_text_stream(self, *, speaker: str, language: str) -> Any:
        self.requests.append(("<stream>", language))
        return super().open_text_stream(speaker=speaker, language=language)


@pytest.mark.skipif(subprocess.run(["which", "espeak-ng"], capture_output=True).returncode != 0,
                    reason="needs espeak-ng")
@pytest.mark.parametrize("text_input", ["segments", "tokens"])
async def test_a_chinese_caller_is_answered_in_chinese(tiny_engine: Any, tmp_path: Path, text_input: str) -> None:
    cfg = dataclasses.replace(AgentConfig.from_env({}), aec_warmup_s=0.0, tts_text_input=text_input)
    backend = RecordingBackend(tiny_engine)
    servers: list[Any] = []
    # "你好" as the caller's words: espeak-ng reads a longer line with pauses the VAD splits into two turns; the fake
    # STT answers the line itself (plus " (turn 1)"), which is what OmniSTT hands on
    opts = SimOptions(turns=1, config=cfg, user_lines=["你好"], short_replies=[CHINESE_REPLY],
                      speech_cache=tmp_path / "speech", turn_timeout_s=60,
                      on_turn_start=lambda _i, server: servers.append(server))
    result = await run_call(opts, backend=backend, vad=load_vad(cfg))
    assert result.errors == [] and [t["outcome"] for t in result.traces] == ["answered"]

    # the LLM got the Chinese transcript under the instruction to answer in the user's language
    llm_requests = [r for r in servers[0].requests if not _has_audio(r)]
    messages = llm_requests[0]["messages"]
    assert "in the user's language" in messages[0]["content"]
    assert messages[-1]["content"].startswith("你好")
    # every TTS request of the reply is in Chinese
    assert backend.requests and {language for _, language in backend.requests} == {"chinese"}
    if text_input == "segments":
        segments = [text for text, _ in backend.requests]
        assert "".join(segments) == CHINESE_REPLY  # nothing lost, nothing added (no spaces between CJK segments)
        assert len(segments) >= 4
        assert 2 <= len(segments[0]) <= 8  # a short starter first, for an early first audio
        for segment in segments[1:-1]:  # then cut at the reply's own clause and sentence marks
            assert segment[-1] in CJK_CLAUSE | CJK_SENTENCE, segments
    assert result.traces[0]["reply_text_chars"] == len(CHINESE_REPLY)


def _has_audio(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "audio_url" for p in m["content"])
               for m in body.get("messages", []))
