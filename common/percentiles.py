"""The one percentile definition of the project: linear interpolation between closest ranks (numpy's default).

Contract: `percentile(values, q)` of any non-empty sequence (it is sorted here), q in [0, 100]; an empty one is a
ValueError. `percentiles(values, qs, digits)` is the JSON shape every report uses: {"p50": ..., "p95": ...},
rounded, with None for each q when there are no values. Used by the engine's live metrics, the benchmarks,
the regression gates, the trace review and the harness tools alike, so a P95 means the same thing everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        raise ValueError("percentile of an empty list")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is out of range (allowed: 0..100)")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 95), digits: int = 3) -> dict[str, float | None]:
    data = list(values)
    return {f"p{q:g}": round(percentile(data, q), digits) if data else None for q in qs}
