"""Process-wide settings of a worker process (called by the worker's prewarm, the simulator and the stress tools).

- `tune_runtime()`: once, after the heavy imports and loads: the engine's process tuning (GIL switch interval
  0.5 ms, `gc.freeze()`; tts_engine/runtime/process.py says why), the one definition for the worker too.
- `release_free_memory()`: when a call ends, hand the C heap's free pages back to the OS (glibc `malloc_trim(0)`):
  a call's buffers are freed then, but glibc keeps the freed pages, fragmented between live blocks, so the
  worker's RSS would stay at its busiest call's high-water mark (the soak, `python -m agent.tools.stress --turns`,
  measures it). False where there is no glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from tts_engine.runtime.process import tune_process


def tune_runtime() -> None:
    tune_process()


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
