"""Start-up checks: say exactly what is missing (weights, LiveKit, vLLM) instead of a traceback.

Used by `python -m agent preflight` and by scripts/demo.sh before anything is started.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlparse

from agent.config import AgentConfig
from tts_engine.config import EngineConfig


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def check_weights(engine: EngineConfig) -> Check:
    model_dir = engine.model_dir
    if not model_dir:
        hint = "point it at a Qwen3-TTS CustomVoice checkpoint"
        return Check("tts weights", False, f"TTS_DEEP_STREAM_MODEL_DIR is not set ({hint})")
    from tts_engine.doctor import diagnose

    # the checkpoint doctor: configs against the safetensors headers (no weight is read), every problem named
    diagnosis = diagnose(model_dir)
    if not diagnosis.ok:
        how = f"TTS_DEEP_STREAM_MODEL_DIR; details: python -m tts_engine check --model {model_dir}"
        return Check("tts weights", False, f"{' | '.join(diagnosis.problems)} ({how})")
    return Check("tts weights", True, str(model_dir))


def check_livekit(agent: AgentConfig, timeout: float = 2.0) -> Check:
    if not agent.livekit_url:
        return Check("livekit", False, "LIVEKIT_URL is not set (e.g. ws://127.0.0.1:7880 for `livekit-server --dev`)")
    if not agent.livekit_api_key or not agent.livekit_api_secret:
        return Check("livekit", False, "LIVEKIT_API_KEY / LIVEKIT_API_SECRET are not set")
    url = urlparse(agent.livekit_url)
    if url.scheme not in ("ws", "wss", "http", "https") or not url.hostname:
        allowed = "ws://, wss://, http:// or https://"
        return Check("livekit", False, f"LIVEKIT_URL={agent.livekit_url!r} is not a {allowed} URL")
    port = url.port or (443 if url.scheme in ("wss", "https") else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        return Check("livekit", False, f"cannot reach LIVEKIT_URL {agent.livekit_url} ({exc.strerror or exc})")
    return Check("livekit", True, agent.livekit_url)


def check_openai_server(name: str, variable: str, base_url: str, timeout: float = 3.0) -> Check:
    url = base_url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - operator-given URL
            body = json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        hint = "start vLLM: scripts/run_llm_server.sh"
        return Check(name, False, f"cannot reach {variable} {base_url} ({reason}); {hint}")
    models = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
    return Check(name, True, f"{base_url} serves {', '.join(map(str, models)) or 'no models'}")


def run_checks(agent: AgentConfig, engine: EngineConfig, *, need_livekit: bool = True) -> list[Check]:
    checks = [] if agent.tts_engine_url else [check_weights(engine)]
    if need_livekit:
        checks.append(check_livekit(agent))
    checks.append(check_openai_server("llm", "LLM_BASE_URL", agent.llm_base_url))
    if agent.stt_base_url != agent.llm_base_url:
        checks.append(check_openai_server("stt", "STT_BASE_URL", agent.stt_base_url))
    return checks


def report(checks: list[Check]) -> bool:
    for c in checks:
        print(f"  [{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
    return all(c.ok for c in checks)
