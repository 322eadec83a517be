"""Start-up checks: say exactly what is missing (weights, LiveKit, vLLM) instead of a traceback.

Used by `python -m agent preflight` and by scripts/demo.sh before anything is started. Each line says whether
the part is configured or an embedded default (agent/local/), so an operator sees at once which parts of a
call are production and which are stand-ins.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlparse

from agent.config import AgentConfig
from agent.local.defaults import DEFAULT_CHECKPOINT_DIR
from tts_engine import EngineConfig


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    default: str = ""  # what embedded default this part is ("" = configured)


def check_weights(engine: EngineConfig) -> Check:
    model_dir = engine.model_dir
    if not model_dir:
        hint = "point it at a Qwen3-TTS CustomVoice checkpoint"
        return Check("tts weights", False, f"TTS_DEEP_STREAM_MODEL_DIR is not set ({hint})")
    # imported here: the doctor imports torch (seconds), needed only when weights are named
    from tts_engine import diagnose

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


def check_openai_server(
    name: str, variable: str, base_url: str, timeout: float = 3.0, hint: str = "start vLLM: scripts/run_llm_server.sh"
) -> Check:
    url = base_url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # operator-given URL
            body = json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Check(name, False, f"cannot reach {variable} {base_url} ({reason}); {hint}")
    models = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
    return Check(name, True, f"{base_url} serves {', '.join(map(str, models)) or 'no models'}")


def check_default_tts() -> Check:
    state = "present" if (DEFAULT_CHECKPOINT_DIR / "model.safetensors").is_file() else "generated at first start"
    why = "TTS_DEEP_STREAM_MODEL_DIR is empty; the voice babbles until it names real Qwen3-TTS weights"
    return Check("tts weights", True, f"{DEFAULT_CHECKPOINT_DIR} ({state}; {why})", "random-weight checkpoint")


def check_default_stt() -> Check:
    from agent.local.whisper_stt import default_model_dir  # here: it imports livekit.agents (seconds)

    default = "faster-whisper tiny.en in the worker"
    if importlib.util.find_spec("faster_whisper") is None:
        return Check("stt", False, "faster-whisper is not installed (scripts/setup.sh installs it)", default)
    try:
        model_dir = default_model_dir()
    except FileNotFoundError as exc:
        return Check("stt", False, str(exc), default)
    if not (model_dir / "model.bin").is_file():
        return Check("stt", False, f"{model_dir} has no model.bin (WHISPER_MODEL_DIR)", default)
    return Check("stt", True, f"{model_dir} (STT_BASE_URL and LLM_BASE_URL are empty; English only)", default)


def _as_default(check: Check, default: str, why: str) -> Check:
    check.default = default
    if check.ok:
        check.detail = f"{check.detail} ({why})"
    return check


def run_checks(agent: AgentConfig, engine: EngineConfig, *, need_livekit: bool = True) -> list[Check]:
    checks = []
    if not agent.tts_engine_url:
        checks.append(check_weights(engine) if engine.model_dir else check_default_tts())
    if need_livekit:
        livekit = check_livekit(agent)
        if agent.livekit_default:
            livekit = _as_default(livekit, "local LiveKit server", "LIVEKIT_URL is empty; scripts/start_all.sh runs it")
        checks.append(livekit)
    hint = "start it: scripts/start_all.sh start local_llm" if agent.llm_default else None
    llm = (check_openai_server("llm", "LLM_BASE_URL", agent.llm_base_url, hint=hint) if hint
           else check_openai_server("llm", "LLM_BASE_URL", agent.llm_base_url))
    if agent.llm_default:
        llm = _as_default(llm, "llama.cpp + SmolLM2-135M", "LLM_BASE_URL is empty; scripts/start_all.sh runs it")
    checks.append(llm)
    if not agent.stt_base_url:
        checks.append(check_default_stt())
    elif agent.stt_base_url != agent.llm_base_url:
        checks.append(check_openai_server("stt", "STT_BASE_URL", agent.stt_base_url))
    return checks


def report(checks: list[Check]) -> bool:
    for c in checks:
        source = f" [default: {c.default}]" if c.default else ""
        print(f"  [{'ok' if c.ok else 'MISSING'}] {c.name}{source}: {c.detail}")
    return all(c.ok for c in checks)
