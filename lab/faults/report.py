"""What every drill's report shares (each drill module has its own `summary(results)` and `table(report)`):
- `markdown(intro, columns, rows, footer)`: the one shape of a drill's table: a sentence with its target and how
  many tries passed, one row per try, an optional line of summary figures;
- `p50(values)`, `top(values)`: the figures a summary gives of the tries that measured something (None when none
  did); `measured(results, key)`: those values;
- `verdict(result)`: the last column of every table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from common.percentiles import percentile


def measured(results: Iterable[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in results if r.get(key) is not None]


def p50(values: Sequence[float], q: float = 50) -> float | None:
    return round(percentile(values, q), 1) if values else None


def top(values: Sequence[float]) -> float | None:
    return max(values, default=None)


def verdict(result: dict[str, Any]) -> str:
    return "ok" if result["ok"] else "FAIL"


def markdown(intro: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], footer: str | None = None) -> str:
    lines = [intro, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    if footer is not None:
        lines += ["", footer]
    return "\n".join(lines) + "\n"
