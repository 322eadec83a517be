"""Every script in scripts/ answers --help (exit 0, its header, nothing started), and the dependency pins agree:
each requirement of pyproject.toml (dependencies and extras) is in constraints.txt at a version its specifier
allows, and setup.sh installs the torch that constraints.txt pins (docs/operations.md, "Setup")."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.relative_to(ROOT) for p in [*ROOT.glob("scripts/*.sh"), *ROOT.glob("scripts/deploy/*.sh")])


@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_every_script_answers_help_and_starts_nothing(script: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv-that-must-not-appear"
    result = subprocess.run(["bash", str(ROOT / script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=30, env={"PATH": "/usr/bin:/bin", "VENV": str(venv), "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 2 and not lines[0].startswith("#"), result.stdout  # the header, without its '#'
    assert script.name in result.stdout or "scripts/" in result.stdout or "usage" in result.stdout.lower()
    assert not venv.exists() and list(tmp_path.iterdir()) == []  # nothing was created or started
    assert result.stderr == ""


def test_the_python_scripts_answer_help() -> None:
    for script in ROOT.glob("scripts/*.py"):
        result = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0 and "usage:" in result.stdout, (script, result.stderr[-500:])


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_every_requirement_is_pinned_where_its_specifier_allows() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = constraints()
    for req in requirements:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in constraints.txt: regenerate it (docs/operations.md, Setup)"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req} does not allow the pinned {pins[name]}"


def test_setup_installs_the_pinned_torch_on_cpu_and_gpu() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    version = re.search(r"^TORCH_VERSION=(\S+)", setup, re.M).group(1)
    assert constraints()["torch"] == version
    assert setup.count('"torch==$TORCH_VERSION"') == 1 and re.search(r'PIP\[@\]}" torch\b', setup) is None
