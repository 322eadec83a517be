"""One real local stack for the call tests (lab/callbench/stack.py): LiveKit's own server, llama.cpp with
SmolLM2, the token server + page and the agent worker with faster-whisper and the random-weight TTS, all
started by scripts/start_all.sh on free loopback ports. Nothing here is a stand-in: a failing part fails
the tests (they never skip)."""

from __future__ import annotations

import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.callbench.speech import speech_wav
from lab.callbench.stack import LocalStack

# Short answers keep each turn a few seconds; 2 calls per worker make LiveKit's dispatch observable, and with no CPU
# limit that is a worker's only limit, exactly (the CPU term is tests/agent/test_worker_load.py).
STACK_ENV = {"LLM_MAX_TOKENS": "40", "AGENT_MAX_SESSIONS": "2", "AGENT_LOAD_THRESHOLD": "0.9", "AGENT_CPU_LIMIT": "off"}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    workdir = tmp_path_factory.mktemp("stack")
    local = LocalStack(workdir, **STACK_ENV)
    local.start()
    try:
        yield local
    finally:
        print(local.stop())


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="session")
def question_wav(speech_dir: Path) -> Path:
    """One question with no pause inside (a comma's pause can end a turn early), then 12 s of silence: one turn
    per loop, the agent answers in the gap."""
    path = speech_dir / "question.wav"
    speech_wav(path, "Can you hear me now?", silence_after_s=12.0)
    return path


@pytest.fixture(scope="session")
def interrupting_wav(speech_dir: Path) -> Path:
    """A question, then only 3 s of silence: the next loop talks over the agent's (long, babbled) answer."""
    path = speech_dir / "interrupting.wav"
    speech_wav(path, "Please tell me a long story about the sea.", silence_after_s=3.0)
    return path


@pytest.fixture(scope="session")
def silent_wav(speech_dir: Path) -> Path:
    """A caller that only listens (2 s of silence, looped): keeps several calls light enough for a 2-core machine."""
    path = speech_dir / "silence.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48_000)
        w.writeframes(bytes(2 * 48_000))
    return path
