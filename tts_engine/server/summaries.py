"""What `GET /v1/requests/{id}` serves: one summary per finished request of the TTS server, the last `max_kept`.

Contract:
- `remember(summary, handle, t_received)` stores the summary at once (so a client that has read its answer to the end
  finds it) and adds `stream` (the engine's metrics of the request) and `server_wall_ms`.
- The engine's metrics are final once the engine has let the stream go (`handle.wait_closed()`): at once for a stream
  that ran to its end, within one frame step after a cancel (a client that hung up or stalled, a WebSocket `cancel`).
  A summary remembered before that is settling: its `stream` is filled when the engine lets go, and `get()` waits for
  it (at most SETTLE_TIMEOUT_S; past that it serves what the engine had, marked `"stream_final": false`). So frame
  counts after a cancel are the engine's final ones, never a snapshot taken while a step was in flight.
- A completed stream's TTFA and RTF go into the server's histograms, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import Any

SETTLE_TIMEOUT_S = 5.0  # a cancelled stream leaves the engine within one frame step; this only bounds a stuck worker


async def settle(handle: Any, timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until the engine has let `handle`'s stream go; True when its metrics are final."""
    try:
        await asyncio.wait_for(handle.wait_closed(), timeout_s)
    except TimeoutError:
        return False
    return True


class Summaries:
    def __init__(self, metrics: Any, max_kept: int = 2048) -> None:
        self.metrics = metrics  # server_metrics.ServerMetrics: the TTFA / RTF histograms
        self.max_kept = max_kept
        self._kept: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._settling: dict[str, asyncio.Task[None]] = {}

    def remember(self, summary: dict[str, Any], handle: Any = None, t_received: float | None = None, *,
                 final: bool = False) -> None:
        """Keep `summary`; with a handle, fill in its metrics now (`final`: the engine is done with it) or once the
        engine has let it go."""
        request_id = summary["request_id"]
        if t_received is not None:
            summary["server_wall_ms"] = round((time.perf_counter() - t_received) * 1000.0, 2)
        self._kept[request_id] = summary
        while len(self._kept) > self.max_kept:
            self._kept.popitem(last=False)
        if handle is None:
            return
        if final:
            self._fill(summary, handle, True)
            return
        self._fill(summary, handle, False)  # what the engine has now, replaced once it is final
        task = asyncio.get_running_loop().create_task(self._settle(summary, handle))
        self._settling[request_id] = task
        task.add_done_callback(lambda _: self._settling.pop(request_id, None))

    async def _settle(self, summary: dict[str, Any], handle: Any) -> None:
        self._fill(summary, handle, await settle(handle))

    def _fill(self, summary: dict[str, Any], handle: Any, final: bool) -> None:
        metrics = handle.metrics
        summary["stream"] = metrics.to_dict()
        summary["stream_final"] = final
        if final and summary.get("status") == "completed":  # once: a summary becomes final once
            if "ttfa_ms" in summary:
                self.metrics.ttfa.observe(summary["ttfa_ms"] / 1000.0)
            if metrics.rtf is not None:
                self.metrics.rtf.observe(metrics.rtf)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        task = self._settling.get(request_id)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=SETTLE_TIMEOUT_S + 1.0)
        return self._kept.get(request_id)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._kept

    def __len__(self) -> int:
        return len(self._kept)
