"""Hostile input on the TTS server that the schema fuzz (test_fuzz_http.py) cannot express."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from tts_engine.server import TTSServer


@pytest.mark.parametrize("given", ["abc\n", "call-1\r\n", "a" * 64 + "\n", "", "a" * 65, "bad id"])
def test_a_request_id_must_match_as_a_whole_or_is_replaced(given: str) -> None:
    server = TTSServer.__new__(TTSServer)  # _request_id reads nothing of the instance
    request = make_mocked_request("POST", "/tts/stream", headers={"x-request-id": given})
    chosen = server._request_id(request)
    assert chosen != given and len(chosen) == 16 and chosen.isalnum()


def test_a_clean_request_id_is_kept() -> None:
    server = TTSServer.__new__(TTSServer)
    request = make_mocked_request("POST", "/tts/stream", headers={"x-request-id": "call-42.turn-3:a_b"})
    assert server._request_id(request) == "call-42.turn-3:a_b"
