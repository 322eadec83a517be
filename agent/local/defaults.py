"""Resolution of the embedded defaults (see agent/local/__init__.py for the table).

Contract: a part is "default" exactly when its production variable is empty; nothing is chosen by probing
whether a configured server answers (a misconfigured production URL must fail loudly, not fall back).
- `local_llm_url(env)`: where start_all runs llama.cpp (`LOCAL_LLM_PORT`, default 8012).
- `local_livekit_url(env)`: where start_all runs the LiveKit server (`LIVEKIT_PORT`, default 7880).
- `ensure_random_checkpoint(dir)`: writes the tiny random-weight checkpoint once (file lock, atomic rename)
  and returns its path; a second process waits for the first instead of writing beside it.
- `describe_defaults(...)`: one line per part, "configured" or "default", for preflight and the worker log.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from common.env import ConfigError
from local_llm import LOCAL_LLM_PORT

logger = logging.getLogger("agent.local")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHECKPOINT_DIR = ROOT / "checkpoints" / "random-tiny"
RANDOM_WEIGHTS_WARNING = (
    "TTS_DEEP_STREAM_MODEL_DIR is not set: speaking with a random-weight checkpoint ({path}); the voice "
    "babbles. Point TTS_DEEP_STREAM_MODEL_DIR at Qwen3-TTS-12Hz-0.6B-CustomVoice (README: What you need)."
)


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(f"{name}={raw!r} is not a port (allowed: 1..65535)")
    return int(raw)


def local_llm_url(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return f"http://127.0.0.1:{_port(env, 'LOCAL_LLM_PORT', LOCAL_LLM_PORT)}/v1"


def local_livekit_url(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return f"ws://127.0.0.1:{_port(env, 'LIVEKIT_PORT', 7880)}"


def ensure_random_checkpoint(target: Path = DEFAULT_CHECKPOINT_DIR, *, seed: int = 0) -> Path:
    """The tiny random-weight checkpoint at `target`, generated on first use (seconds on a CPU)."""
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits here, then finds the checkpoint
        if (target / "model.safetensors").is_file():
            return target
        from tts_engine import make_checkpoint

        tmp = target.parent / f".{target.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        logger.warning("generating a random-weight TTS checkpoint at %s (once)", target)
        make_checkpoint("tiny", tmp, seed=seed)
        tmp.rename(target)
    return target
