"""Every entry point prints its usage and exits 0 with only the standard library importable: `--help` never needs
torch, numpy, aiohttp or any other installed package (tts_engine/__main__.py says how the commands keep to that)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("tts_engine", "token_server", "common")

# A finder in front of all others: any module outside the standard library and this repository is "not installed".
ONLY_STDLIB = """
import importlib.abc, runpy, sys
OURS = {ours!r}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names and top not in OURS:
            raise ModuleNotFoundError(f"No module named {{name!r}} (made unimportable by the test)", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
sys.argv = [{module!r}, *{args!r}]
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""

COMMANDS = ["serve", "regression", "replay", "make-checkpoint", "synthesize", "bench", "check"]


def _help(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = ONLY_STDLIB.format(ours=OURS, module=module, args=list(args))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_blocker_really_blocks_heavy_modules() -> None:
    code = ONLY_STDLIB.format(ours=OURS, module="tts_engine.server.app", args=[])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "made unimportable by the test" in proc.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_tts_engine_command_helps_without_heavy_modules(command: str) -> None:
    proc = _help("tts_engine", command, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: python -m tts_engine {command}"), proc.stdout[:300]
    assert "Traceback" not in proc.stderr


def test_the_tts_engine_entry_point_lists_every_command_without_heavy_modules() -> None:
    proc = _help("tts_engine", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for command in COMMANDS:
        assert command in proc.stdout


def test_the_token_server_helps_without_heavy_modules() -> None:
    proc = _help("token_server", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: python -m token_server")
    assert "--dev" in proc.stdout


def test_serve_help_names_the_server_settings() -> None:
    out = _help("tts_engine", "serve", "--help").stdout
    for flag in ("--host", "--port", "--idle-timeout", "--client-max-streams"):
        assert flag in out
    assert "127.0.0.1" in out


def test_the_light_command_lines_name_what_the_heavy_modules_run() -> None:
    from tts_engine import make_checkpoint_cli, regression, regression_cli
    from tts_engine.model import factory, layout

    assert regression_cli.MODES == tuple(regression.MODES)
    assert make_checkpoint_cli.PRESETS is layout.PRESETS is factory.PRESETS
