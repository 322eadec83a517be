"""Small helpers shared by the benchmarks: percentiles, CUDA checks, tables and JSON output.

Pure Python (torch is imported lazily), so the CPU test suite can exercise the refusal message and
the table/JSON rendering without a GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from common.percentiles import percentile  # one definition (the bench modules import it from here)


class BenchError(RuntimeError):
    """The benchmark cannot run here (no CUDA, missing peer package, bad option)."""


def require_cuda() -> None:
    """Refuse clearly where CUDA is absent: timings on a CPU would mean nothing."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        raise BenchError("the benchmarks need PyTorch with CUDA; torch is not importable") from exc
    if not torch.cuda.is_available():
        raise BenchError(
            "the benchmarks need a CUDA GPU, and torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__}); run `python -m tts_engine bench ...` on the GPU machine"
        )


def summarize(values: Sequence[float]) -> dict[str, float]:
    """P50/P95/min/max/mean of a sample, rounded for the JSON."""
    return {
        "p50": round(percentile(values, 50), 4),
        "p95": round(percentile(values, 95), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "mean": round(sum(values) / len(values), 4),
        "n": len(values),
    }


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100' (the results file name); unknown names are slugified."""
    low = name.lower()
    for key in ("h200", "h100", "a100", "l40s", "a10g", "l4", "4090", "5090"):
        if key in low:
            return key
    return re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "gpu"


def format_table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table; missing cells print as '-'."""
    cells = [[str(c) for c in columns]]
    for row in rows:
        cells.append([_fmt(row.get(c)) for c in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def write_json(path: str | Path, obj: Any) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return out


def gpu_memory_gib() -> dict[str, float]:
    """Peak memory of this process on the current GPU: allocator peaks and the device-wide use."""
    import torch

    free, total = torch.cuda.mem_get_info()
    gib = float(1 << 30)
    return {
        "max_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 3),
        "max_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 3),
        "device_used_gib": round((total - free) / gib, 3),
    }
