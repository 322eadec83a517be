"""Runs the stats module's own tests (web/tests/*.test.mjs) with node's built-in test runner."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "web"


def test_stats_module_node_suite() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: install Node.js 18+ (scripts/setup.sh needs it for web/ too)")
    proc = subprocess.run(
        [node, "--test", *sorted(str(p) for p in (WEB / "tests").glob("*.test.mjs"))],
        cwd=WEB,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "# fail 0" in proc.stdout and "# pass 0" not in proc.stdout
