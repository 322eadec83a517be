"""A drill's tries, one after another: `repeat(drill, tries, one, passed, describe)` runs `one(i)` for i = 1..tries,
marks each result `ok` by `passed(result)`, prints a line per try (`describe(result)` says what it measured) and
returns {"tries", "results", "passed"}, the shape every drill's report starts from (lab/faults/__main__.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Result = dict[str, Any]


def repeat(drill: str, tries: int, one: Callable[[int], Result], passed: Callable[[Result], bool],
           describe: Callable[[Result], str]) -> dict[str, Any]:  # fmt: skip
    results = []
    for i in range(1, tries + 1):
        r = one(i)
        r["ok"] = passed(r)
        results.append(r)
        print(f"[faults] {drill} try {i}/{tries}: {describe(r)}; {'ok' if r['ok'] else 'FAIL'}", flush=True)
    return {"tries": tries, "results": results, "passed": sum(r["ok"] for r in results)}
