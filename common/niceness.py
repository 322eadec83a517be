"""Lower a thread's CPU priority (Linux nice) so model compute on a CPU yields to the media path.

Contract: `lower_thread(tid, nice)` raises thread `tid`'s nice value by `nice` (capped at 19) and returns True;
it returns False and changes nothing where that is not possible (not Linux, nice <= 0, no permission). Any
thread of the process may lower any other (Linux keeps a nice value per thread), and threads created later
by the lowered one inherit its value. Lowering needs no privilege; raising back would, so nothing here does.

Why: with the embedded defaults every model runs on the CPU of the machine that also runs WebRTC. A compute
thread at the same priority as the audio threads delays them now and then by tens of ms; the 20 ms packets
then leave in a burst, the listener's jitter buffer fills past its target, and it drains only slowly, so
every later reply and barge-in is heard that much later (docs/agent.md, "Latency at the browser"). At nice
10 a compute thread weighs about a tenth of a normal one: the audio threads run when they wake, and compute
keeps every cycle they leave. On a GPU the engine's thread only launches kernels and is left alone.
"""

from __future__ import annotations

import os
import sys

#: the nice value added to the embedded models' compute on a CPU (llama.cpp's process, whisper's thread; the TTS
#: engine has its own TTS_DEEP_STREAM_CPU_NICE): on the CPU they share with WebRTC, audio must win
COMPUTE_NICE = 10


def lower_thread(tid: int | None, nice: int) -> bool:
    if nice <= 0 or tid is None or not sys.platform.startswith("linux"):
        return False
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)  # PRIO_PROCESS with a thread id: that thread only
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + nice))
    except OSError:
        return False
    return True


__all__ = ["COMPUTE_NICE", "lower_thread"]
