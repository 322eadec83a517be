"""The tree tells the story (issue 18): what ships in the worker never imports what drives or fakes it, and no
product module grows past ~400 lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("agent", "tts_engine", "token_server", "envfile")
# tools inside product packages: they drive or measure the product, never run in a server or the worker
TOOL_FOLDERS = ("tts_engine/bench", "agent/tools")
MAX_LINES = 420  # "about 400" (5 % slack): a module past this mixes responsibilities

WORKER_GRAPH = """
import json, sys
import agent.worker, agent.voice, agent.local.llm_server, agent.local.whisper_stt, agent.preflight
print(json.dumps(sorted(sys.modules)))
"""


def test_the_worker_import_graph_holds_no_tool_or_test_module() -> None:
    out = subprocess.run([sys.executable, "-c", WORKER_GRAPH], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    leaked = [m for m in modules if m.split(".")[0] == "tests" or m.startswith("agent.tools")]
    assert leaked == [], f"the worker imports tool/test modules: {leaked}"
    assert "agent.worker" in modules and "agent.local.whisper_stt" in modules


def test_no_product_module_is_past_about_400_lines() -> None:
    too_long = {}
    for package in PRODUCT_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(TOOL_FOLDERS):
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                too_long[rel] = lines
    assert too_long == {}, f"split these along a responsibility a reader can name: {too_long}"
