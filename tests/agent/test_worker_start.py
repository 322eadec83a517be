"""`python -m agent start` with a broken checkpoint stops before LiveKit's prewarm: one line per problem, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_worker_refuses_a_broken_checkpoint_by_name(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTS_", "LIVEKIT_"))}
    env.update(TTS_DEEP_STREAM_MODEL_DIR=str(tmp_path), ENV_FILE=os.devnull)
    result = subprocess.run(
        [sys.executable, "-m", "agent", "start"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("TTS_DEEP_STREAM_MODEL_DIR: ")]
    assert any("model.safetensors" in ln for ln in lines) and any("speech_tokenizer" in ln for ln in lines)
    assert "Traceback" not in result.stderr
