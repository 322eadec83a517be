"""Process-wide settings for a process that serves streams (the TTS server, the agent worker, benchmarks, the lab).

`tune_process()` is called once, after the heavy imports and the model load:
- GIL switch interval 0.5 ms (CPython's default is 5 ms): the engine's worker thread runs Python between kernels,
  and every hop between "packet ready" and its consumer could otherwise wait up to 5 ms for the GIL.
- `gc.collect(); gc.freeze()`: moves everything allocated so far (torch, the model, web/RTC libraries) out of the
  cyclic collector's reach. Full (generation 2) collections over that heap stop every thread for 100-400 ms
  (seen in the agent simulator, and as first-audio tails of 400 ms at 128 streams in the H100 load bench).
`gc_pauses()` installs a `gc.callbacks` hook and returns a live record of collection pauses (count, max, total ms
per generation), so a run can show whether the collector still stalls it.
`release_free_memory()`: when a call ends, hand the C heap's free pages back to the OS (glibc `malloc_trim(0)`): a
call's buffers are freed then, but glibc keeps the freed pages, fragmented between live blocks, so the worker's RSS
would stay at its busiest call's high-water mark (the soak, `python -m agent stress --turns`, measures it). False
where there is no glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import time
from typing import Any

GIL_SWITCH_INTERVAL_S = 0.0005


def tune_process(switch_interval_s: float = GIL_SWITCH_INTERVAL_S) -> None:
    sys.setswitchinterval(switch_interval_s)
    gc.collect()
    gc.freeze()


class GcPauses:
    """Collection pauses seen since `install()` (thread-safe enough for statistics: written under the GIL)."""

    def __init__(self) -> None:
        self._start: float | None = None
        self.count = [0, 0, 0]
        self.max_ms = [0.0, 0.0, 0.0]
        self.total_ms = [0.0, 0.0, 0.0]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        if self._start is None:
            return
        ms = (time.perf_counter() - self._start) * 1000.0
        gen = int(info.get("generation", 0))
        self.count[gen] += 1
        self.total_ms[gen] += ms
        self.max_ms[gen] = max(self.max_ms[gen], ms)
        self._start = None

    def snapshot(self) -> dict[str, Any]:
        return {"collections": list(self.count), "max_ms": [round(m, 2) for m in self.max_ms],
                "total_ms": [round(t, 1) for t in self.total_ms]}

    def reset(self) -> None:
        self.count, self.max_ms, self.total_ms = [0, 0, 0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]


def gc_pauses() -> GcPauses:
    record = GcPauses()
    gc.callbacks.append(record)
    return record


def release_free_memory() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True
