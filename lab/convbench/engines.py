"""What each engine server did while a many-calls run played (issue 42: do the calls spread over the GPUs?).

- `EngineSampler(urls, path).start()`: a thread that once a second asks every engine server (`python -m tts_engine
  serve`) for its open streams (`GET /healthz`) and the streams it has started so far (`GET /metrics`, the
  `tts_engine_streams_started` counter) and, where `nvidia-smi` runs, each GPU's memory in use; one JSON line a
  second to `path`: `t_wall`, `engines` (one `{"url", "open", "started"}` per server, None where it did not answer)
  and `gpu_mib` (GPU index -> MiB used). `stop()` ends it.
- `summarize(records, t0, t1)`: per engine its open streams (mean, max) and the streams it started in [t0, t1) with
  their share of all; `off_even`: the largest distance of a share from an even split, relative to it (0.1 = one
  engine had 10 % more or fewer streams than its even share); `gpu_mib_max` per GPU. None without records.
- `read(path)` is worker_stats.read: the same torn-line rules.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from lab.convbench.worker_stats import read

__all__ = ["EngineSampler", "read", "summarize"]

INTERVAL_S = 1.0
TIMEOUT_S = 0.5  # an engine server busy past this is recorded as not answering for that second
STARTED = "tts_engine_streams_started"  # the engine's counter family (tts_engine/server/metrics.py)


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return bytes(response.read())
    except (OSError, urllib.error.URLError):
        return None


def engine_state(url: str) -> dict[str, Any]:
    """One engine server's open streams and streams started so far (None where it did not answer)."""
    health, metrics = _get(f"{url}/healthz"), _get(f"{url}/metrics")
    opened = json.loads(health).get("open_streams") if health else None
    started = None
    if metrics:
        for family in text_string_to_metric_families(metrics.decode()):
            if family.name == STARTED and family.samples:
                started = family.samples[0].value
    return {"url": url, "open": opened, "started": started}


def gpu_memory_mib() -> dict[str, int]:
    """GPU index -> MiB in use, by nvidia-smi; {} on a machine without it."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=2, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = [line.split(",") for line in out.splitlines() if line.strip()]
    return {index.strip(): int(float(used)) for index, used in pairs}


class EngineSampler:
    """One JSON line a second to `path`: every engine server's streams, every GPU's memory (module docstring)."""

    def __init__(self, urls: list[str], path: Path, interval_s: float = INTERVAL_S) -> None:
        self.urls, self.path, self.interval_s = list(urls), Path(path), interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-sampler", daemon=True)

    def start(self) -> EngineSampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        with self.path.open("a") as fh:
            while not self._stop.is_set():
                record = {"t_wall": time.time(), "engines": [engine_state(u) for u in self.urls],
                          "gpu_mib": gpu_memory_mib()}  # fmt: skip
                fh.write(json.dumps(record) + "\n")
                fh.flush()
                self._stop.wait(self.interval_s)


def _started_in(values: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Streams started in [t0, t1) from (t_wall, counter) samples: the last count in the window less the last one
    before it (or the window's first, when the sampler began inside it)."""
    before = [v for t, v in values if t < t0]
    inside = [v for t, v in values if t0 <= t < t1]
    if not inside:
        return None
    return inside[-1] - (before[-1] if before else inside[0])


def summarize(records: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any] | None:
    rows = [r for r in records if t0 <= r.get("t_wall", 0.0) < t1]
    if not rows:
        return None
    urls = [e["url"] for e in rows[0]["engines"]]
    engines = []
    for i, url in enumerate(urls):
        opened = [e["open"] for r in rows if (e := r["engines"][i])["open"] is not None]
        counts = [(r["t_wall"], e["started"]) for r in records if (e := r["engines"][i])["started"] is not None]
        engines.append({"url": url, "open_mean": round(sum(opened) / len(opened), 1) if opened else None,
                        "open_max": max(opened, default=None), "started": _started_in(counts, t0, t1)})  # fmt: skip
    total = sum(e["started"] or 0 for e in engines)
    shares = [(e["started"] or 0) / total if total else None for e in engines]
    for e, share in zip(engines, shares, strict=True):
        e["share"] = round(share, 3) if share is not None else None
    off = [abs(share * len(engines) - 1.0) for share in shares if share is not None]  # |share - even| / even
    gpus = sorted({g for r in rows for g in r.get("gpu_mib") or {}}, key=int)
    return {"engines": engines, "off_even": round(max(off), 3) if off and len(engines) > 1 else None,
            "gpu_mib_max": {g: max(r["gpu_mib"][g] for r in rows if g in (r.get("gpu_mib") or {})) for g in gpus}}
