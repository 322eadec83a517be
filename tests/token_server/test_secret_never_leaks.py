"""The API secret appears in no response (body or header), no log line and no page file, whatever is asked."""

from __future__ import annotations

import json
import logging

import pytest

from token_server.static import MIME_TYPES

JSON = {"Content-Type": "application/json"}


async def test_secret_is_in_no_response_and_no_log(make_client, config, api_secret, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    client = await make_client(config, rate_limit_per_min=8)
    seen: list[str] = []

    async def record(resp) -> None:
        seen.append(f"{resp.status} {dict(resp.headers)!r} {(await resp.read()).decode('utf-8', 'replace')}")

    requests = [
        ("POST", "/api/token", json.dumps({"room": "r", "identity": "i", "name": "N"}), JSON),
        ("POST", "/api/token", "{}", JSON),
        ("POST", "/api/token", "{broken", JSON),
        ("POST", "/api/token", "x", {"Content-Type": "text/plain"}),
        ("POST", "/api/token", "{}", {**JSON, "Origin": "https://evil.example"}),
        ("GET", "/api/token", None, {}),
        ("GET", "/api/config", None, {}),
        ("GET", "/healthz", None, {}),
        ("GET", "/nope.js", None, {}),
        ("OPTIONS", "/api/token", None, {"Origin": "https://app.example.test"}),
    ]
    for method, path, data, headers in requests:
        await record(await client.request(method, path, data=data, headers=headers))
    for _ in range(6):  # run into the rate limit
        await record(await client.post("/api/token", data="{}", headers=JSON))
    assert any(s.startswith("429") for s in seen) and any(s.startswith("200") for s in seen)

    # every file the page can load
    for path in sorted(p for p in config.web_dir.iterdir() if p.suffix in MIME_TYPES):
        await record(await client.get("/" + path.name))
    await record(await client.get("/vendor/livekit-client.umd.js"))

    assert len(seen) > 20
    assert [s[:120] for s in seen if api_secret in s] == []
    log_text = "\n".join(r.getMessage() for r in caplog.records)
    assert "token issued" in log_text and "rate limit" in log_text  # the logs were captured
    assert api_secret not in log_text
    assert config.api_secret == api_secret  # the scan looked for the secret the tokens were signed with


@pytest.mark.parametrize("field", ["room", "identity"])
async def test_echoing_a_caller_value_is_the_only_way_it_shows(client, api_secret, field: str) -> None:
    # an error message quotes the caller's own (invalid) value, nothing of the server's
    resp = await client.post("/api/token", data=json.dumps({field: "bad value"}), headers=JSON)
    body = await resp.text()
    assert resp.status == 400 and "bad value" in body and api_secret not in body
