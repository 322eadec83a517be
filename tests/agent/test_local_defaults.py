"""Embedded defaults (agent/local/): an empty production variable selects the local stand-in, by rule, and
each stand-in is real (whisper hears real speech, the launcher refuses a missing model by name)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from livekit import rtc

import local_llm.__main__ as llm_server
from agent.config import AgentConfig
from agent.local.defaults import ensure_random_checkpoint
from agent.preflight import report, run_checks
from common.niceness import COMPUTE_NICE
from lab.callbench.speech import speak
from local_llm import LOCAL_LLM_MODEL
from tts_engine.config import EngineConfig
from tts_engine.errors import ConfigError


def test_empty_production_variables_select_the_defaults() -> None:
    cfg = AgentConfig.from_env({})
    assert cfg.livekit_default and cfg.livekit_url == "ws://127.0.0.1:7880"
    assert cfg.llm_default and cfg.llm_base_url == "http://127.0.0.1:8012/v1" and cfg.llm_model == LOCAL_LLM_MODEL
    assert cfg.stt_base_url == ""  # faster-whisper in the worker
    ports = AgentConfig.from_env({"LIVEKIT_PORT": "7990", "LOCAL_LLM_PORT": "8099"})
    assert ports.livekit_url == "ws://127.0.0.1:7990" and ports.llm_base_url == "http://127.0.0.1:8099/v1"


def test_configured_production_parts_are_used_as_given() -> None:
    cfg = AgentConfig.from_env({"LIVEKIT_URL": "wss://lk.example", "LLM_BASE_URL": "http://vllm:8000/v1"})
    assert not cfg.livekit_default and not cfg.llm_default
    assert cfg.llm_model == "qwen3-omni" and cfg.stt_base_url == "http://vllm:8000/v1"  # Omni transcribes too
    assert AgentConfig.from_env({"STT_BASE_URL": "http://omni:9/v1"}).stt_base_url == "http://omni:9/v1"


def test_a_bad_local_port_is_named() -> None:
    with pytest.raises(ConfigError, match="LOCAL_LLM_PORT"):
        AgentConfig.from_env({"LOCAL_LLM_PORT": "eighty"})


def test_preflight_labels_each_default(capsys: pytest.CaptureFixture[str]) -> None:
    checks = run_checks(AgentConfig.from_env({}), EngineConfig.from_env({}), need_livekit=False)
    report(checks)
    out = capsys.readouterr().out
    assert "tts weights [default: random-weight checkpoint]" in out and "babbles" in out
    assert "llm [default: llama.cpp + SmolLM2-135M]" in out
    assert "stt [default: faster-whisper tiny.en in the worker]" in out


def test_random_checkpoint_is_generated_once(tmp_path: Path) -> None:
    target = ensure_random_checkpoint(tmp_path / "random-tiny")
    assert (target / "model.safetensors").is_file() and (target / "speech_tokenizer").is_dir()
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert ensure_random_checkpoint(target) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp


def test_llm_server_refuses_a_missing_model_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert llm_server.main(["--model", str(tmp_path / "none.gguf")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "none.gguf" in err and "--model" in err
    assert llm_server.bundled_gguf().is_file()  # setup installed the SmolLM2 file


def test_whisper_stt_hears_real_speech() -> None:
    from agent.local.whisper_stt import WhisperSTT

    pcm = np.concatenate([np.zeros(4800, np.int16), speak("Hello, can you hear me?"), np.zeros(4800, np.int16)])
    frame = rtc.AudioFrame(pcm.tobytes(), 48_000, 1, len(pcm))
    stt = WhisperSTT()

    async def recognize() -> str:
        event = await stt.recognize([frame])
        return event.alternatives[0].text

    text = asyncio.run(recognize()).lower()
    assert "hear" in text, text


def test_whisper_decodes_greedily_without_the_temperature_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """faster-whisper's default re-decodes an unsure utterance at rising temperatures: up to ~4x the time on this
    machine (agent/local/whisper_stt.py says how much). The worker asks for one greedy pass."""
    from agent.local.whisper_stt import WhisperSTT

    stt = WhisperSTT()
    calls: list[dict] = []
    real = stt._whisper.transcribe

    def spy(audio, **options):
        calls.append(options)
        return real(audio, **options)

    monkeypatch.setattr(stt._whisper, "transcribe", spy)
    pcm = np.concatenate([np.zeros(4800, np.int16), speak("Who wrote Romeo and Juliet?"), np.zeros(24_000, np.int16)])
    event = asyncio.run(stt.recognize([rtc.AudioFrame(pcm.tobytes(), 48_000, 1, len(pcm))]))
    assert "wrote" in event.alternatives[0].text.lower()
    (options,) = calls
    assert options["temperature"] == 0.0 and options["beam_size"] == 1


def test_embedded_models_compute_at_a_lowered_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whisper loads and transcribes on its own thread, and llama.cpp's server threads run, at COMPUTE_NICE
    above the caller: WebRTC's audio threads must not wait behind them for the CPU."""
    import os
    import threading

    from agent.local import whisper_stt

    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    tid = whisper_stt._compute.submit(threading.get_native_id).result()
    assert tid != threading.get_native_id()
    assert os.getpriority(os.PRIO_PROCESS, tid) == min(19, base + COMPUTE_NICE)

    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(llm_server.os, "nice", lambda n: calls.append(("nice", n)))

    def fake_serve(params: object) -> None:  # the server's threads start here, after the nice
        calls.append(("serve", params.port))
        raise SystemExit(0)

    monkeypatch.setattr(llm_server, "serve", fake_serve)
    with pytest.raises(SystemExit):
        llm_server.main(["--port", "9"])
    assert calls == [("nice", COMPUTE_NICE), ("serve", 9)]
    calls.clear()
    with pytest.raises(SystemExit):
        llm_server.main(["--port", "9", "--nice", "0"])
    assert calls == [("serve", 9)]


def test_field_defaults_are_what_an_empty_environment_gives() -> None:
    assert AgentConfig() == AgentConfig.from_env({})
