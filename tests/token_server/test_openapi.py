"""The token server publishes an accurate OpenAPI document (GET /openapi.json) that schemathesis loads; the fuzz
itself runs in tests/server/test_fuzz_http.py (both surfaces, real processes)."""

from __future__ import annotations

from token_server.app import create_app
from token_server.openapi import document


def test_the_document_lists_exactly_the_routes_of_the_app(config) -> None:
    app = create_app(config)
    routes = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "*") or route.resource is None:
            continue
        path = route.resource.canonical
        if path == "/api/{name}":  # OPTIONS /api/{name:token|config}: documented per path
            routes |= {("options", "/api/token"), ("options", "/api/config")}
        elif path == "/{path}":  # the page route also answers "/"
            routes |= {("get", "/{path}"), ("get", "/")}
        else:
            routes.add((route.method.lower(), path))
    documented = {(method, path) for path, ops in document()["paths"].items() for method in ops}
    assert documented == routes, "add the route's dict to token_server/openapi.py"


async def test_the_document_is_served_and_loads_in_schemathesis(client) -> None:
    import schemathesis

    resp = await client.get("/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc == document()
    operations = [result.ok() for result in schemathesis.openapi.from_dict(doc).get_all_operations()]
    assert ("POST", "/api/token") in {(op.method.upper(), op.path) for op in operations}


def test_the_document_states_both_token_contracts() -> None:
    from token_server.tokens import ALLOWED_FIELDS, DISPATCH_SETTINGS, ROOM_SETTINGS

    post = document()["paths"]["/api/token"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == set(ALLOWED_FIELDS) and body["additionalProperties"] is False
    room_config = body["properties"]["room_config"]
    assert set(room_config["properties"]) == {"agents", *ROOM_SETTINGS}
    assert set(room_config["properties"]["agents"]["items"]["properties"]) == {"agent_name", *DISPATCH_SETTINGS}
    for status in ("200", "201"):  # the first names, LiveKit's standard request
        answer = post["responses"][status]["content"]["application/json"]["schema"]
        assert {"server_url", "participant_token", "token", "url"} <= set(answer["required"])
