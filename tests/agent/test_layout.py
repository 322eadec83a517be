"""The tree tells the story: what ships in the worker never imports what drives or fakes it; no two modules import
each other (directly or round a longer loop); no module waives the private-name rule to reach into another; and a
module past ~600 lines is flagged as a prompt to look (a warning, not a reason to split: one idea may be long); the
audio format is defined once (common/audio_format.py)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("agent", "tts_engine", "token_server", "common", "local_llm")
LAB = "lab"  # what drives, fakes and measures the product: top level, never imported by it, never installed
LOOK_AT_LINES = 600
AUDIO_FORMAT = ROOT / "common" / "audio_format.py"

WORKER_GRAPH = """
import json, sys
import agent.worker, agent.voice, agent.local.whisper_stt, agent.preflight, local_llm.__main__
print(json.dumps(sorted(sys.modules)))
"""


def modules(packages: tuple[str, ...] = (*PRODUCT_PACKAGES, LAB)) -> dict[str, Path]:
    """Every module of the given packages (the product's and the lab's by default), by dotted name."""
    out = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The product modules `name` imports anywhere in its file (inside functions and TYPE_CHECKING blocks too)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, each a loop of imports (networkx's, iterative: no
    recursion limit to raise, which would outlive this test and change what other tests' parsers do)."""
    g = nx.DiGraph()
    g.add_nodes_from(graph)
    g.add_edges_from((v, w) for v, targets in graph.items() for w in targets)
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_the_worker_import_graph_holds_no_tool_or_test_module() -> None:
    out = subprocess.run([sys.executable, "-c", WORKER_GRAPH], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    leaked = [m for m in loaded if m.split(".")[0] in ("tests", LAB)]
    assert leaked == [], f"the worker imports tool/test modules: {leaked}"
    assert "agent.worker" in loaded and "agent.local.whisper_stt" in loaded


def test_no_product_module_imports_the_lab_or_the_tests() -> None:
    """Anywhere in a file (inside functions too): the product runs from an installed package that has neither."""
    known = modules()
    product = modules(PRODUCT_PACKAGES)
    reach = {name: sorted(t for t in imports_of(name, path, known) if t.split(".")[0] in (LAB, "tests"))
             for name, path in product.items()}
    assert {name: targets for name, targets in reach.items() if targets} == {}


def test_the_agent_uses_the_engine_only_through_its_public_names() -> None:
    """`agent` imports `tts_engine` itself (the names its __init__ exports), never one of its modules."""
    known = modules()
    reach = {name: sorted(t for t in imports_of(name, path, known) if t.startswith("tts_engine."))
             for name, path in modules(("agent",)).items()}
    assert {name: targets for name, targets in reach.items() if targets} == {}


def test_the_product_packages_hold_only_code() -> None:
    """Results (JSON, tables, plots, audio) are data in results/ at the top, not files a worker installs."""
    listed = subprocess.run(["git", "ls-files", *PRODUCT_PACKAGES], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert [f for f in listed if not f.endswith(".py")] == []
    assert not (ROOT / "lab" / "results").exists()
    assert (ROOT / "results" / "README.md").is_file()


def test_no_modules_import_each_other() -> None:
    """A package's __init__ re-exporting its modules is not a loop of ideas; every other loop is."""
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    for name in graph:
        graph[name] = {t for t in graph[name] if not (known[t].name == "__init__.py" and name.startswith(f"{t}."))}
    assert cycles(graph) == []


def test_the_cycle_check_sees_a_loop() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_waives_the_private_name_rule() -> None:
    """Private names of another module are reached only through a pinned adapter (agent/livekit_internals.py, with
    getattr and a test that fails on an upgrade), never by silencing the linter."""
    waived = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in modules().values()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"noqa:[^#]*SLF001", line)
    ]
    assert waived == []


def test_long_modules_are_flagged_for_a_look() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules(PRODUCT_PACKAGES).values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LOOK_AT_LINES
    }
    if long:
        warnings.warn(f"modules past {LOOK_AT_LINES} lines (look: one idea, or two?): {long}", stacklevel=1)


def audio_format() -> dict[str, object]:
    """The names common/audio_format.py assigns, with their values where they are literals."""
    out: dict[str, object] = {}
    for node in ast.parse(AUDIO_FORMAT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    out[target.id] = _literal(node.value)
    return out


def _literal(node: ast.AST | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None  # an expression of other names: defined there, so never a second literal here


def second_definitions(path: Path, names: dict[str, object]) -> list[str]:
    """Where `path` defines the audio format again: a literal of the sample rate or frame size anywhere in its code,
    the speech models' 16 kHz anywhere in its code, or a module- or class-level assignment of one of audio_format's
    names to the same value."""
    rates = (names["SAMPLE_RATE"], names["SAMPLES_PER_FRAME"], names["SPEECH_SAMPLE_RATE"])
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [f"{node.lineno}: {node.value}" for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and type(node.value) is int and node.value in rates]
    scopes = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    for body in scopes:
        for node in body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names:
                        value = _literal(node.value)
                        if value is None or value == names[target.id]:
                            found.append(f"{node.lineno}: {target.id}")
    return found


def test_the_audio_format_is_defined_once() -> None:
    """Issue 31: 24 kHz and 1920 samples per frame live in common/audio_format.py; every other module of the
    product packages (tools included) imports them from there."""
    names = audio_format()
    assert names["SAMPLE_RATE"] == 24_000 and names["SAMPLES_PER_FRAME"] == 1920
    assert names["SPEECH_SAMPLE_RATE"] == 16_000
    again = {
        str(path.relative_to(ROOT)): where
        for path in modules().values()
        if path != AUDIO_FORMAT and (where := second_definitions(path, names))
    }
    assert again == {}


def test_the_audio_format_rule_sees_a_second_definition(tmp_path: Path) -> None:
    names = audio_format()
    flagged = {"SAMPLE_RATE = 24_000\n": True, "RATE = 24000\n": True, "def f(rate=24_000): ...\n": True,
               "class A:\n    SAMPLES_PER_FRAME = 1920\n": True, "SAMPLE_RATE = 16_000\n": True,
               "VAD_RATE = SPEECH_SAMPLE_RATE\n": False,
               "from common.audio_format import SAMPLE_RATE\nRATE = SAMPLE_RATE\n": False,
               "SAMPLES_PER_FRAME = SAMPLE_RATE * 80 // 1000\n": True, '"""24000 Hz"""\n': False}
    for source, expected in flagged.items():
        path = tmp_path / "m.py"
        path.write_text(source)
        assert bool(second_definitions(path, names)) == expected, source


def waivers_without_a_reason(path: Path, product: bool) -> list[str]:
    """The lines of `path` whose `noqa` does not say why after its codes (` - why` or ` (why)`), or whose
    type-checker waiver is not `[code]` then a `# why` comment, or is outside the packages mypy checks."""
    found = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        noqa = re.search(r"#\s*noqa:\s*[A-Z]+[0-9]+(?:,\s*[A-Z]+[0-9]+)*(.*)", line)
        if noqa and not re.match(r"\s*(-+|\()\s*\w", noqa.group(1)):
            found.append(f"{n}: noqa without its reason")
        ignore = re.search(r"#\s*type:\s*ignore(\[[a-z-]+(?:,\s*[a-z-]+)*\])?(.*)", line)
        if ignore and not product:
            found.append(f"{n}: a type-checker waiver where no type checker runs")
        elif ignore and not (ignore.group(1) and re.match(r"\s+#\s*\w", ignore.group(2))):
            found.append(f"{n}: a type-checker waiver without its code and reason")
    return found


def test_every_waiver_names_its_rule_and_reason() -> None:
    """Issue 40: a waiver says which rule it waives and why, and waives a rule that runs. ruff's RUF100 fails a
    noqa whose rule is not selected (pyproject.toml), mypy's warn_unused_ignores one that waives nothing; this
    test asks for the reasons, and keeps type-checker waivers to the product packages, which mypy checks."""
    bad = {
        str(path.relative_to(ROOT)): found
        for package in (*PRODUCT_PACKAGES, LAB, "tests", "scripts")
        for path in (ROOT / package).rglob("*.py")
        if (found := waivers_without_a_reason(path, product=package in PRODUCT_PACKAGES))
    }
    assert bad == {}


def test_the_waiver_rule_sees_a_bare_waiver(tmp_path: Path) -> None:
    cases = {
        "x = 1  # noqa" ": E731\n": True,  # (split: this file is scanned too)
        "x = 1  # noqa: E731 - a one-line conversion\n": False,
        "import y  # noqa: F401  (probed for its side effect)\n": False,
        "x = f()  # type" ": ignore[attr-defined]\n": True,
        "x = f()  # type" ": ignore\n": True,
        "x = f()  # type" ": ignore[attr-defined]  # the stub lacks it\n": False,
    }
    path = tmp_path / "m.py"
    for source, flagged in cases.items():
        path.write_text(source)
        assert bool(waivers_without_a_reason(path, product=True)) == flagged, source
    path.write_text("x = f()  # type" ": ignore[attr-defined]  # the stub lacks it\n")
    assert waivers_without_a_reason(path, product=False)
