"""JSON from untrusted clients with a nesting bound of its own, shared by every service (it imports nothing of ours).

Contract:

- `loads(text, max_depth=MAX_DEPTH)` is `json.loads(text)` for text whose arrays and objects nest at most
  `max_depth` levels; deeper text raises `TooDeep` (a ValueError) before the parser sees it. The bound is ours, not
  the interpreter's recursion limit, which any imported module may raise (a test did, and 5,000 levels then parsed
  into a different error).
- Every other error is json's own (`json.JSONDecodeError`, the int digit limit's ValueError), so callers keep one
  `except ValueError` for a body that is not JSON.
- The check costs two `str.count` calls unless the text holds more than `max_depth` opening brackets; then one pass
  over its brackets outside strings, which stops at the first level too deep. Its worst case, a body of `[]` pairs,
  costs about twice what json.loads takes to parse the same body (the servers' 1 MiB body cap bounds both).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # no request of ours nests past 4 levels (a token request's room_config.agents[0].agent_name)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string (escapes included): its brackets are not nesting
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class TooDeep(ValueError):
    def __init__(self, max_depth: int) -> None:
        super().__init__(f"nested too deeply: more than {max_depth} levels of arrays and objects")
        self.max_depth = max_depth


def depth_exceeds(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether the arrays and objects of `text` (JSON or not) nest more than `max_depth` levels anywhere."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    for ch in _NOT_BRACKET.sub("", _STRING.sub("", text)):  # the brackets outside strings, in order
        depth += 1 if ch in "[{" else -1
        if depth > max_depth:
            return True
    return False


def loads(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`, or TooDeep when it nests past `max_depth` (see the module doc)."""
    if depth_exceeds(text, max_depth):
        raise TooDeep(max_depth)
    return json.loads(text)
