"""Read the worker's stats file (`AGENT_STATS_PATH`: one JSON object a second, docs/operations.md) for a time window.

Contract: `read(path)` returns the records (an absent file, a torn last line or a line that is not an object are
skipped: the worker may still be writing); `summarize(records, t0, t1)` reduces those with `t_wall` in [t0, t1)
to what the many-calls report shows: process CPU in cores (mean, max) and the share of the usable cores, its child
processes' CPU (mean), the
busiest thread kinds, event-loop lag (worst P99 and max over the calls' loops, loops that fell a frame behind),
GC pauses, RSS, calls, engine streams and the load reported to LiveKit. A key the worker does not write yet reads
as None, so the runner works with an older worker and with no file at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not Path(path).is_file():
        return []
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("t_wall"), (int, float)):
            out.append(record)
    return out


def _values(records: list[dict], *path: str) -> list[float]:
    out = []
    for record in records:
        value: Any = record
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _stat(values: list[float], how: str) -> float | None:
    if not values:
        return None
    return round(max(values) if how == "max" else sum(values) / len(values) if how == "mean" else sum(values), 3)


def summarize(records: list[dict[str, Any]], t0: float, t1: float, top: int = 5) -> dict[str, Any]:
    rows = [r for r in records if t0 <= r["t_wall"] < t1]
    if not rows:
        return {"samples": 0}
    threads: dict[str, list[float]] = {}
    for r in rows:
        for name, t in (r.get("threads") or {}).items():
            if isinstance(t, dict) and isinstance(t.get("cores"), (int, float)):
                threads.setdefault(name, []).append(float(t["cores"]))
    busiest = sorted(((sum(v) / len(rows), name) for name, v in threads.items()), reverse=True)[:top]
    usable = _stat(_values(rows, "cpu_usable"), "max")
    cpu_mean = _stat(_values(rows, "cpu_cores"), "mean")
    return {
        "samples": len(rows),
        "cpu_cores": {"mean": cpu_mean, "max": _stat(_values(rows, "cpu_cores"), "max"), "usable": usable,
                      "share": round(cpu_mean / usable, 3) if cpu_mean is not None and usable else None},
        "cpu_python_cores_mean": _stat(_values(rows, "cpu_python_cores"), "mean"),
        # its child processes (a PROCESS worker's calls): None from a worker that does not write it yet
        "cpu_children_cores_mean": _stat(_values(rows, "cpu_children_cores"), "mean"),
        "host_busy_max": _stat(_values(rows, "host_busy"), "max"),
        "threads": {name: round(cores, 3) for cores, name in busiest},
        "loop_lag_ms": {"p99_max": _stat(_values(rows, "loop_lag_ms", "p99"), "max"),
                        "max": _stat(_values(rows, "loop_lag_ms", "max"), "max"),
                        "late_loops_max": _stat(_values(rows, "loop_lag_ms", "late_loops"), "max")},
        "gc": {"count": _stat(_values(rows, "gc", "count"), "sum"), "ms": _stat(_values(rows, "gc", "ms"), "sum"),
               "max_ms": _stat(_values(rows, "gc", "max_ms"), "max")},
        "rss_mb_max": _stat(_values(rows, "rss_mb"), "max"),
        "calls_max": _stat(_values(rows, "calls"), "max"),
        "livekit_jobs_max": _stat(_values(rows, "livekit_jobs"), "max"),  # LiveKit's count, against our calls_max
        "engine_active_max": _stat(_values(rows, "engine", "active"), "max"),
        "engine_capacity": _stat(_values(rows, "engine", "capacity"), "max"),
        "load_max": _stat(_values(rows, "load"), "max"),
        "sampler_ms_mean": _stat(_values(rows, "sampler_ms"), "mean"),
    }  # fmt: skip
