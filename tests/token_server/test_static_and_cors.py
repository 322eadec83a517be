"""Static files (MIME types, caching, no traversal), CORS and security headers of the token server."""

from __future__ import annotations

import json

import pytest

from token_server.static import VENDOR_CACHE, resolve_page_file

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("path", "mime"),
    [
        ("/", "text/html"),
        ("/index.html", "text/html"),
        ("/app.js", "text/javascript"),
        ("/stats.js", "text/javascript"),
        ("/style.css", "text/css"),
    ],
)
async def test_page_files_have_mime_and_revalidate(client, path: str, mime: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200
    assert resp.content_type == mime
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_page_has_a_csp_allowing_only_self_and_livekit(client) -> None:
    csp = (await client.get("/")).headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "wss://lk.example.test" in csp and "object-src 'none'" in csp


async def test_vendor_build_is_served_with_long_cache(client, config) -> None:
    if not (config.web_dir / "node_modules/livekit-client/dist/livekit-client.umd.js").is_file():
        pytest.fail("web/node_modules is missing: run scripts/setup.sh (npm ci in web/)")
    resp = await client.get("/vendor/livekit-client.umd.js")
    assert resp.status == 200 and resp.content_type == "text/javascript"
    assert resp.headers["Cache-Control"] == VENDOR_CACHE
    assert "LivekitClient" in (await resp.text())[:5000]
    # conditional GET works for the big file
    again = await client.get("/vendor/livekit-client.umd.js", headers={"If-None-Match": resp.headers["ETag"]})
    assert again.status == 304
    assert (await client.get("/vendor/package.json")).status == 404


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/..%2fpyproject.toml",
        "/%2e%2e/pyproject.toml",
        "/%2e%2e%2fpyproject.toml",
        "/web/../../pyproject.toml",
        "/..%5cpyproject.toml",
        "/%2fetc%2fpasswd",
        "//etc/passwd",
        "/node_modules/livekit-client/package.json",
        "/package.json",
        "/package-lock.json",
        "/tests/stats.test.mjs",
        "/.gitignore",
        "/vendor/..%2f..%2fpyproject.toml",
        "/index.html%00.js",
    ],
)
async def test_traversal_and_private_files_are_404(client, raw_get, path: str) -> None:
    status, body = await raw_get(client.port, path)
    assert status in (400, 404), (path, status)
    assert b"[project]" not in body and b"root:" not in body and b"dependencies" not in body


def test_resolver_refuses_symlinks_out_of_web_dir(tmp_path) -> None:
    web_dir = tmp_path / "web"
    web_dir.mkdir()
    (tmp_path / "secret.js").write_text("x")
    (web_dir / "link.js").symlink_to(tmp_path / "secret.js")
    (web_dir / "ok.js").write_text("y")
    assert resolve_page_file(web_dir, "link.js") is None
    assert resolve_page_file(web_dir, "ok.js") == (web_dir / "ok.js").resolve()
    assert resolve_page_file(web_dir, "ok.exe") is None


async def test_allowed_origin_gets_cors_headers(client) -> None:
    origin = "https://app.example.test"
    pre = await client.options("/api/token", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert pre.status == 204
    assert pre.headers["Access-Control-Allow-Origin"] == origin
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert "Content-Type" in pre.headers["Access-Control-Allow-Headers"]
    resp = await client.post("/api/token", data="{}", headers={**JSON, "Origin": origin})
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == origin and resp.headers["Vary"] == "Origin"


async def test_unknown_origin_is_refused(client) -> None:
    evil = {"Origin": "https://evil.example"}
    pre = await client.options("/api/token", headers={**evil, "Access-Control-Request-Method": "POST"})
    assert pre.status == 403 and "Access-Control-Allow-Origin" not in pre.headers
    resp = await client.post("/api/token", data="{}", headers={**JSON, **evil})
    assert resp.status == 403
    err = await resp.json()
    assert err["field"] == "Origin" and "evil.example" in err["error"]
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_same_origin_needs_no_listing(client) -> None:
    origin = f"http://127.0.0.1:{client.port}"
    resp = await client.post("/api/token", data=json.dumps({}), headers={**JSON, "Origin": origin})
    assert resp.status == 200


async def test_no_cors_headers_without_origin(client) -> None:
    resp = await client.post("/api/token", data="{}", headers=JSON)
    assert "Access-Control-Allow-Origin" not in resp.headers
