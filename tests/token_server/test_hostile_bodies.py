"""Bodies that are JSON to a parser's limits: too deeply nested, numbers past Python's digit limit. Each is a 400
naming the body, never the 500 they used to be; and every 404 is the JSON error shape, page paths included."""

from __future__ import annotations

import pytest

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"[" * 10_000, "nested too deeply"),
        (b'{"a":' * 3_000, "nested too deeply"),
        (b'{"room": 1' + b"0" * 5_000 + b"}", "digits"),
        (b"\x0c", "Expecting value"),  # not JSON whitespace: not an empty body either
        (b"\x0b{}", "Expecting value"),
        (b"\r", "Expecting value"),  # only an empty body means {}
    ],
)
async def test_parser_limits_are_400_not_500(client, raw: bytes, words: str) -> None:
    resp = await client.post("/api/token", data=raw, headers=JSON)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["field"] == "body" and words in error["error"]
    assert (await client.post("/api/token", data=b"{}", headers=JSON)).status == 200


@pytest.mark.parametrize("path", ["/no-such-page.html", "/api/nope", "/vendor/nope.js"])
async def test_every_404_is_json(client, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 404 and resp.content_type == "application/json"
    assert (await resp.json())["field"] == "path"
