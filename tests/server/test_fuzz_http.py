"""The TTS server publishes an accurate OpenAPI document (with its API key, when one is set), and a bounded
schemathesis fuzz of both HTTP surfaces (scripts/fuzz_http.py: real server processes on loopback ports, the tiny
checkpoint on CPU, the TTS server with an API key) finds no 500, no hang, no undocumented status or error shape, no
route open without the key, and leaves the servers serving with their stream counters at 0.
The recorded long run (>= 10,000 requests per surface) and its command are in docs/operations.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def app_routes(app) -> set[tuple[str, str]]:
    return {(route.method.lower(), route.resource.canonical) for route in app.router.routes()
            if route.method not in ("HEAD", "*") and route.resource is not None}


def test_the_document_lists_exactly_the_routes_of_the_app(make_engine) -> None:
    from tts_engine.server.app import TTSServer

    engine = make_engine()
    doc = json.loads(json.dumps(_document(engine)))
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert documented == app_routes(TTSServer(engine).app()), "add the route's dict to tts_engine/server/openapi.py"
    speech = doc["paths"]["/tts/stream"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert speech["properties"]["speaker"]["enum"] == engine.speakers
    assert speech["properties"]["text"]["maxLength"] == engine.config.max_text_chars
    assert "security" not in doc and "securitySchemes" not in doc["components"]  # no key: none documented
    keyed = _document(engine, api_key=True)
    assert keyed["security"] == [{"bearer": []}] and keyed["paths"]["/healthz"]["get"]["security"] == []
    assert all("401" in op["responses"] for path, ops in keyed["paths"].items() for op in ops.values()
               if path != "/healthz")


def _document(engine, api_key: bool = False) -> dict:
    from tts_engine.server.openapi import document

    return document(speakers=engine.speakers, languages=engine.languages,
                    max_text_chars=engine.config.max_text_chars,
                    supports_instruct=engine.model.config.supports_instruct, api_key=api_key)


async def test_the_document_is_served_and_loads_in_schemathesis(serve) -> None:
    import schemathesis

    srv = await serve()
    async with srv.session.get(f"{srv.base}/openapi.json") as resp:
        assert resp.status == 200
        doc = await resp.json()
    assert doc == json.loads(json.dumps(_document(srv.engine)))
    operations = [result.ok() for result in schemathesis.openapi.from_dict(doc).get_all_operations()]
    assert {op.path for op in operations} >= {"/tts/stream", "/synthesize", "/v1/requests/{request_id}",
                                              "/v1/models", "/v1/audio/voices"}


@pytest.mark.timeout(240)
def test_bounded_fuzz_of_both_surfaces(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fuzz_http.py"), "--requests", "200", "--workers", "2",
         "--seed", "17", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=230,
    )
    assert out.exists(), proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    for surface in summary["surfaces"]:
        brief = {k: surface[k] for k in ("surface", "requests", "server_errors", "hangs", "failures", "after")}
        assert surface["requests"] >= 200, brief
        assert surface["server_errors"] == 0 and surface["hangs"] == 0, brief
        assert surface["failures"] == 0, surface["failure_examples"]
        assert surface["after"]["serves"], brief
        assert {k: v for k, v in surface["after"].items() if k != "serves"} == dict.fromkeys(
            [k for k in surface["after"] if k != "serves"], 0), brief
        modes = {"positive", "negative", "raw"} | ({"auth"} if surface["surface"] == "tts" else set())
        assert set(surface["by_mode"]) == modes, brief
    assert [s["surface"] for s in summary["surfaces"]] == ["tts", "token"]
    assert summary["ok"] and proc.returncode == 0, proc.stdout[-2000:]
