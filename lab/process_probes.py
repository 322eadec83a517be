"""Process probes for the harness runs (stress, soak, instants, memory tests): ERROR log records, resident memory and
the asyncio tasks a call left behind. Read-only looks at this process; nothing here changes what it measures.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any


class ErrorLog(logging.Handler):
    """Counts ERROR (and worse) log records from any logger during the run."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])


def rss_parts_mb() -> dict[str, float]:
    """Resident memory by kind (/proc/self/status): anonymous (heaps: what a leak grows) and file-backed
    (library code and mapped files paged in as new code paths run)."""
    parts: dict[str, float] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                parts[key.lower().replace("rss", "")] = round(int(value.split()[0]) / 1024.0, 2)
    return parts


def task_census(exclude: set[asyncio.Task[Any]]) -> dict[str, int]:
    """Live tasks that the call added, by coroutine name (the most common first)."""
    counts: dict[str, int] = {}
    for task in asyncio.all_tasks():
        if task in exclude or task.done():
            continue
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:8])
