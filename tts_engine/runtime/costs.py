"""Measured costs of the worker's GPU work, and the estimates admission decisions use.

Contract:
- `StepCosts.measure(stepper, admit_probe, batch_size)` (at load, CUDA, before the worker starts): the median host
  wall of one step per row bucket (`FrameStepper.measure`: the copy to the host included), of one admission and
  of a batch of `batch_size` admissions (`admit_probe(slots)`: prompts + one batched prefill, synchronised).
- `step_ms(rows)`: the next iteration's expected wall: its bucket's measured step times the running `overrun`
  (real iteration wall / measured step: the hand-out of packets and host load add to the bare step); the running
  average of iterations where nothing was measured (CPU).
- `admit_ms()`: (fixed, per admission) cost of admitting a batch before a step, from the two admission
  measurements; the per-admission figure never goes below the running average actually seen.
- `observe_iteration(rows, ms)` / `observe_admissions(n, ms)`: update the running figures (worker thread only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class StepCosts:
    def __init__(self, rows_for: Callable[[int], int]) -> None:
        self.rows_for = rows_for
        self.step_ms_by_bucket: dict[int, float] = {}
        self.admit_one_ms: float | None = None
        self.admit_batch_ms: float | None = None
        self.batch_size = 1
        self.overrun = 1.0
        self.recent_iteration_ms: float | None = None
        self.recent_admit_ms: float | None = None

    @torch.no_grad()
    def measure(self, stepper: Any, admit_probe: Callable[[list[int]], None], release: Callable[[int], None],
                batch_size: int, device: torch.device, repeats: int = 5) -> None:
        self.step_ms_by_bucket = stepper.measure(repeats)
        self.batch_size = batch_size

        def timed(slots: list[int]) -> float:
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                admit_probe(slots)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append((time.perf_counter() - t0) * 1000.0)
                for slot in slots:
                    release(slot)
            return round(float(np.median(times)), 3)

        self.admit_one_ms = timed([0])
        self.admit_batch_ms = timed(list(range(batch_size))) if batch_size > 1 else None
        stepper.reset_state()

    def _table_ms(self, rows: int) -> float | None:
        return self.step_ms_by_bucket.get(self.rows_for(max(1, rows))) if self.step_ms_by_bucket else None

    def step_ms(self, rows: int) -> float:
        table = self._table_ms(rows)
        return table * self.overrun if table is not None else (self.recent_iteration_ms or 0.0)

    def admit_ms(self) -> tuple[float, float]:
        if self.admit_one_ms is None:
            return 0.0, self.recent_admit_ms or 0.0
        each = self.admit_one_ms
        if self.admit_batch_ms is not None and self.batch_size > 1:
            each = max(0.0, (self.admit_batch_ms - self.admit_one_ms) / (self.batch_size - 1))
        each = max(each, self.recent_admit_ms or 0.0)
        return max(0.0, self.admit_one_ms - each), each

    def observe_iteration(self, rows: int, ms: float) -> None:
        recent = self.recent_iteration_ms
        self.recent_iteration_ms = ms if recent is None else 0.9 * recent + 0.1 * ms
        table = self._table_ms(rows)
        if table:
            self.overrun = 0.9 * self.overrun + 0.1 * min(3.0, max(1.0, ms / table))

    def observe_admissions(self, n: int, ms: float) -> None:
        if n > 0:
            each = ms / n
            self.recent_admit_ms = each if self.recent_admit_ms is None else 0.8 * self.recent_admit_ms + 0.2 * each

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_costs_ms": dict(self.step_ms_by_bucket),
            "admit_cost_ms": self.admit_one_ms,
            "admit_batch_ms": self.admit_batch_ms,
            "admit_batch_size": self.batch_size,
            "recent_iteration_ms": None if self.recent_iteration_ms is None else round(self.recent_iteration_ms, 3),
            "step_overrun": round(self.overrun, 3),
        }
