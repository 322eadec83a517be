"""Agent configuration from the environment (DESIGN.md §6). Bad values stop start-up with the name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tts_engine.env import Env


@dataclass(frozen=True)
class AgentConfig:
    livekit_url: str = ""
    livekit_api_key: str = ""
    livekit_api_secret: str = ""
    agent_name: str = "voice-agent"
    llm_base_url: str = "http://127.0.0.1:8000/v1"
    llm_model: str = "qwen3-omni"
    llm_api_key: str = "EMPTY"
    stt_base_url: str = "http://127.0.0.1:8000/v1"
    stt_model: str = "qwen3-omni"
    llm_max_tokens: int = 150
    llm_temperature: float = 0.3
    vad_silence_ms: int = 200
    tts_frame_ms: int = 20
    min_endpointing: float = 0.2
    enable_continuation: bool = True
    tts_engine_url: str = ""  # remote engine (python -m tts_engine serve); empty = embedded
    tts_speaker: str = "serena"
    tts_language: str = "auto"
    traces_dir: str = "traces"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentConfig:
        env = Env(environ)
        return cls(
            livekit_url=env.str("LIVEKIT_URL", ""),
            livekit_api_key=env.str("LIVEKIT_API_KEY", ""),
            livekit_api_secret=env.str("LIVEKIT_API_SECRET", ""),
            agent_name=env.str("AGENT_NAME", "voice-agent"),
            llm_base_url=env.str("LLM_BASE_URL", "http://127.0.0.1:8000/v1"),
            llm_model=env.str("LLM_MODEL", "qwen3-omni"),
            llm_api_key=env.str("LLM_API_KEY", "EMPTY"),
            stt_base_url=env.str("STT_BASE_URL", env.str("LLM_BASE_URL", "http://127.0.0.1:8000/v1")),
            stt_model=env.str("STT_MODEL", env.str("LLM_MODEL", "qwen3-omni")),
            llm_max_tokens=env.int("LLM_MAX_TOKENS", 150, lo=1, hi=8192),
            llm_temperature=env.float("LLM_TEMPERATURE", 0.3, lo=0.0, hi=2.0),
            vad_silence_ms=env.int("VAD_SILENCE_MS", 200, lo=50, hi=5000),
            tts_frame_ms=int(env.choice("TTS_FRAME_MS", "20", ("10", "20", "40"))),
            min_endpointing=env.float("MIN_ENDPOINTING", 0.2, lo=0.0, hi=10.0),
            enable_continuation=env.bool("ENABLE_CONTINUATION", True),
            tts_engine_url=env.str("TTS_ENGINE_URL", ""),
            tts_speaker=env.str("TTS_SPEAKER", "serena"),
            tts_language=env.str("TTS_LANGUAGE", "auto"),
            traces_dir=env.str("TRACES_DIR", "traces"),
        )
