"""Agent configuration from the environment (every variable: .env.example, docs/agent.md "Configuration").
Bad values stop start-up with the name.

An empty production variable selects its embedded default (agent/local/): `LIVEKIT_URL` -> the local LiveKit
server, `LLM_BASE_URL` -> the local llama.cpp server, `STT_BASE_URL` (and `LLM_BASE_URL`) -> faster-whisper
in the worker. The `*_default` fields say which defaults are in use, for preflight and the logs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.local.defaults import local_livekit_url, local_llm_url
from agent.turn.options import TurnMode, TurnOptions
from common import worker_defaults
from common.env import ConfigError, Env
from local_llm import LOCAL_LLM_MODEL

T = TypeVar("T")

QUIET_DB = -50.0  # the VAD's quiet gate (agent/vad.py): the page's end-of-speech level (web/stats.js)
STT_EARLY_MS = 64  # silence inside a speech after which it goes to STT (agent/turn/early_stt.py; docs/agent.md: why 64)
# a worker's capacity (docs/operations.md "Capacity and load"; `python -m lab.capacity` measures it), when
# AGENT_MAX_SESSIONS is not set: by where the TTS engine runs (agent/worker.py max_sessions)
MAX_SESSIONS_CPU_ENGINE = 1  # embedded on the CPU: the 2-core box holds one call (a second triples the response)
# on a GPU or with a remote engine (an H200 host, results/convbench/h200_many_2026-11-29/): a THREAD
# worker's calls stayed within 35 ms of one call's response P95 at 2 calls a worker and went late at 3; PROCESS
# workers held 16 calls on two with no gap
MAX_SESSIONS_THREAD = 2
MAX_SESSIONS = 8
CPU_LIMIT = 0.85


def _value_or_off(env: Env, name: str, default: T, parse: Callable[[str], T | None], allowed: str) -> T | None:
    """A setting that is a value or "off" (None): `default` when unset; `parse` gives None for a bad value."""
    raw = env.raw(name)
    if raw is None:
        return default
    if raw.lower() == "off":
        return None
    value = parse(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not allowed (allowed: {allowed})")
    return value


def _in_range(value: str, lo: float, hi: float, kind: type[int] | type[float]) -> Any:
    try:
        number = kind(value)
    except ValueError:
        return None
    return number if lo <= number <= hi else None  # also None for nan


def max_sessions(env: Env) -> int | None:
    """`AGENT_MAX_SESSIONS` (1..1024), or None when unset: the worker then goes by where its engine runs."""
    return None if env.raw("AGENT_MAX_SESSIONS") is None else env.int("AGENT_MAX_SESSIONS", MAX_SESSIONS, lo=1, hi=1024)


def cpu_limit(env: Env) -> float | None:
    """`AGENT_CPU_LIMIT`: the worker's CPU as a share of the cores it may use (0.1..1.0) at which it takes no new
    call, or "off"."""
    return _value_or_off(
        env, "AGENT_CPU_LIMIT", CPU_LIMIT, lambda raw: _in_range(raw, 0.1, 1.0, float),
        "a share of the cores from 0.1 to 1.0, or off",
    )  # fmt: skip


#: `TURN_HANDLING=livekit` is LiveKit's defaults: Silero's own hangover (0.55 s, on its 32 ms window grid), and its
#: turn detector refuses a VAD hangover under 0.25 s (the audio model needs that much silence to judge).
LIVEKIT_VAD_SILENCE_MS = 544
LIVEKIT_VAD_SILENCE_MIN_MS = 256


def vad_silence_ms(env: Env) -> int:
    """`VAD_SILENCE_MS`, by default 224 ms (`vad`, `ours`) or LiveKit's own 544 ms (`livekit`)."""
    if TurnMode.from_env(env) is TurnMode.LIVEKIT:
        return env.int("VAD_SILENCE_MS", LIVEKIT_VAD_SILENCE_MS, lo=LIVEKIT_VAD_SILENCE_MIN_MS, hi=5000)
    return env.int("VAD_SILENCE_MS", 224, lo=50, hi=5000)


def quiet_db(env: Env) -> float | None:
    """`VAD_QUIET_DB`: a level in dBFS (-120..-20), or "off" (Silero alone decides what is silence)."""
    return _value_or_off(
        env, "VAD_QUIET_DB", QUIET_DB, lambda raw: _in_range(raw, -120.0, -20.0, float),
        "a level in dBFS from -120 to -20, or off",
    )  # fmt: skip


def stt_early_ms(env: Env) -> int | None:
    """`STT_EARLY_MS`: silence in ms inside a speech after which it is sent to STT (32..2000), or "off" (at the end of
    the turn, as LiveKit's adapter does). agent/turn/early_stt.py."""
    return _value_or_off(
        env, "STT_EARLY_MS", STT_EARLY_MS, lambda raw: _in_range(raw, 32, 2000, int),
        "milliseconds of silence from 32 to 2000, or off",
    )  # fmt: skip


@dataclass(frozen=True)
class AgentConfig:
    # the field defaults are what `from_env({})` gives: every production part empty, so the embedded defaults
    livekit_url: str = "ws://127.0.0.1:7880"
    livekit_default: bool = True  # LIVEKIT_URL was empty: the local server (scripts/start_all.sh: livekit)
    livekit_api_key: str = ""
    livekit_api_secret: str = ""
    agent_name: str = "voice-agent"
    llm_base_url: str = "http://127.0.0.1:8012/v1"
    llm_model: str = LOCAL_LLM_MODEL
    llm_api_key: str = "EMPTY"
    llm_default: bool = True  # LLM_BASE_URL was empty: the local llama.cpp server (local_llm/)
    stt_base_url: str = ""  # "" = faster-whisper in this process (agent/local/)
    stt_model: str = "qwen3-omni"
    llm_max_tokens: int = 150
    http_port: int = worker_defaults.AGENT_HTTP_PORT  # the health server (GET / and /worker); start_all probes it
    llm_max_history_items: int = 24  # chat items sent per request; older turns are dropped (prompt stays short)
    llm_temperature: float = 0.3
    vad_silence_ms: int = 224  # seven Silero windows of silence (agent/vad.py; docs/agent.md says why 224)
    vad_quiet_db: float | None = QUIET_DB  # a Silero window quieter than this is silence (agent/vad.py); None = off
    stt_early_ms: int | None = STT_EARLY_MS  # the utterance goes to STT at a pause this long; None = at the turn's end
    # the caller's audio reaches the session (and so the VAD) in frames this long: LiveKit's default of 50 ms adds
    # up to 50 ms before the VAD sees the end of speech; 20 is one Opus packet
    input_frame_ms: int = 20
    tts_frame_ms: int = 20
    # every knob of turn-taking (TURN_HANDLING, MIN_ENDPOINTING, EOT_*, OVERLAP_*, ...): agent/turn/options.py
    turn: TurnOptions = TurnOptions()
    enable_continuation: bool = True
    tts_engine_url: str = ""  # remote engine (python -m tts_engine serve); empty = embedded
    tts_speaker: str = "serena"
    tts_language: str = "auto"
    # LLM text into the TTS: "segments" (TextBridge segments, one engine stream each) or "tokens" (one engine
    # stream per reply in the model's streaming-text layout, text pushed as the LLM makes it); agent/tts.py
    tts_text_input: str = "tokens"
    traces_dir: str = "traces"
    # failure handling: per-request timeouts and retries (a dead endpoint must not freeze the call)
    stt_timeout_s: float = 8.0
    llm_timeout_s: float = 10.0
    api_max_retry: int = 1
    aec_warmup_s: float = 3.0  # 0 disables (tests, headphones)
    audio_queue_ms: int = 100
    audio_cut_silence_ms: int = 60  # silent frames sent after a cut (agent/output.py says why); 0 = off
    agent_instructions: str = (
        "You are a friendly voice assistant. Answer in one to three short spoken sentences, "
        "in the user's language, without markdown, lists or emoji."
    )
    apology_text: str = "Sorry, I could not answer that just now. Please say it again."
    # worker
    job_executor: str = "thread"  # thread: sessions share one engine per process
    num_idle_processes: int = 1
    init_timeout_s: float = 600.0
    drain_timeout_s: int = 10  # on SIGTERM: calls may go on this long, then end (agent leaves, traces written)
    max_sessions: int | None = None  # calls at which the worker is full; None: by the engine (worker.max_sessions)
    cpu_limit: float | None = CPU_LIMIT  # its CPU's share of its cores at which it is full; None = no CPU limit
    # the load LiveKit reads as full; each limit reached reports exactly this
    load_threshold: float = worker_defaults.AGENT_LOAD_THRESHOLD
    stats_path: str = ""  # AGENT_STATS_PATH: one JSON line a second about the worker (agent/worker_stats.py)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentConfig:
        env = Env(environ)
        livekit_url = env.str("LIVEKIT_URL", "")
        llm_url = env.str("LLM_BASE_URL", "")
        stt_url = env.str("STT_BASE_URL", "") or llm_url  # Qwen3-Omni on vLLM serves both
        raw = env.environ
        return cls(
            livekit_url=livekit_url or local_livekit_url(raw),
            livekit_default=not livekit_url,
            livekit_api_key=env.str("LIVEKIT_API_KEY", ""),
            livekit_api_secret=env.str("LIVEKIT_API_SECRET", ""),
            agent_name=env.str("AGENT_NAME", "voice-agent"),
            llm_base_url=llm_url or local_llm_url(raw),
            llm_model=env.str("LLM_MODEL", "qwen3-omni" if llm_url else LOCAL_LLM_MODEL),
            llm_api_key=env.str("LLM_API_KEY", "EMPTY"),
            llm_default=not llm_url,
            stt_base_url=stt_url,
            stt_model=env.str("STT_MODEL", env.str("LLM_MODEL", "qwen3-omni")),
            llm_max_tokens=env.int("LLM_MAX_TOKENS", 150, lo=1, hi=8192),
            http_port=env.int("AGENT_HTTP_PORT", worker_defaults.AGENT_HTTP_PORT, lo=0, hi=65535),
            llm_max_history_items=env.int("LLM_MAX_HISTORY_ITEMS", 24, lo=2, hi=10_000),
            llm_temperature=env.float("LLM_TEMPERATURE", 0.3, lo=0.0, hi=2.0),
            vad_silence_ms=vad_silence_ms(env),
            vad_quiet_db=quiet_db(env),
            stt_early_ms=stt_early_ms(env),
            input_frame_ms=int(env.choice("INPUT_FRAME_MS", "20", ("10", "20", "30", "40", "50"))),
            tts_frame_ms=int(env.choice("TTS_FRAME_MS", "20", ("10", "20", "40"))),
            turn=TurnOptions.from_env(env),
            enable_continuation=env.bool("ENABLE_CONTINUATION", True),
            tts_engine_url=env.str("TTS_ENGINE_URL", ""),
            tts_speaker=env.str("TTS_SPEAKER", "serena"),
            tts_language=env.str("TTS_LANGUAGE", "auto"),
            tts_text_input=env.choice("TTS_TEXT_INPUT", "tokens", ("tokens", "segments")),
            traces_dir=env.str("TRACES_DIR", "traces"),
            stt_timeout_s=env.float("STT_TIMEOUT_S", 8.0, lo=0.1, hi=300.0),
            llm_timeout_s=env.float("LLM_TIMEOUT_S", 10.0, lo=0.1, hi=300.0),
            api_max_retry=env.int("API_MAX_RETRY", 1, lo=0, hi=10),
            aec_warmup_s=env.float("AEC_WARMUP_S", 3.0, lo=0.0, hi=30.0),
            audio_queue_ms=env.int("AUDIO_QUEUE_MS", 100, lo=20, hi=2000),
            audio_cut_silence_ms=env.int("AUDIO_CUT_SILENCE_MS", 60, lo=0, hi=500),
            agent_instructions=env.str("AGENT_INSTRUCTIONS", cls.agent_instructions),
            apology_text=env.str("AGENT_APOLOGY_TEXT", cls.apology_text),
            job_executor=env.choice("AGENT_JOB_EXECUTOR", "thread", ("thread", "process")),
            num_idle_processes=env.int("AGENT_NUM_IDLE_PROCESSES", 1, lo=0, hi=64),
            init_timeout_s=env.float("AGENT_INIT_TIMEOUT_S", 600.0, lo=10.0, hi=3600.0),
            drain_timeout_s=env.int("AGENT_DRAIN_TIMEOUT_S", 10, lo=1, hi=3600),
            max_sessions=max_sessions(env),
            cpu_limit=cpu_limit(env),
            load_threshold=env.float("AGENT_LOAD_THRESHOLD", worker_defaults.AGENT_LOAD_THRESHOLD, lo=0.05,
                                     hi=1.0),
            stats_path=env.str("AGENT_STATS_PATH", ""),
        )
