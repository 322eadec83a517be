"""jsonbody: the nesting bound is the module's own, whatever the interpreter's recursion limit; brackets inside strings
are not nesting; every other error is json's."""

from __future__ import annotations

import json
import re
import sys

import pytest

from common import jsonbody


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_the_bound_is_inclusive() -> None:
    assert jsonbody.loads(nested(jsonbody.MAX_DEPTH)) is not None
    with pytest.raises(jsonbody.TooDeep, match="more than 64 levels"):
        jsonbody.loads(nested(jsonbody.MAX_DEPTH + 1))
    with pytest.raises(jsonbody.TooDeep):
        jsonbody.loads('{"a": ' + '{"b": [' * 40 + "1" + "]}" * 40 + "}")  # objects and arrays count alike


def test_the_bound_holds_whatever_the_recursion_limit() -> None:
    """A module that raised sys.getrecursionlimit() let json parse 5,000 levels into 'Expecting value' (CI, main at
    2458730): the bound must not depend on it."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        for text in ('{"a":' * 5_000, nested(3_000), "[" * 100_000):
            with pytest.raises(jsonbody.TooDeep):
                jsonbody.loads(text)
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("text", ['{"a": "' + "[" * 100 + '"}', '{"a": "\\"' + "{" * 100 + '", "b": [1]}',
                                  '["]]]]", "' + "[" * 100 + '"]'])
def test_brackets_inside_strings_are_not_nesting(text: str) -> None:
    assert jsonbody.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": [1, 2', "[1,]", '{"a": 1' + "0" * 5_000 + "}", "[" * 10 + "]" * 11, ""])
def test_other_errors_are_json_s_own(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        json.loads(text)
    with pytest.raises(type(caught.value), match=re.escape(str(caught.value))):
        jsonbody.loads(text)
    assert not jsonbody.depth_exceeds(text)


def test_unbalanced_openers_past_the_bound_are_too_deep() -> None:
    assert jsonbody.depth_exceeds("[" * 65) and not jsonbody.depth_exceeds("]" * 100 + "[" * 64)
