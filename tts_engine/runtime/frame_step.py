"""One batched frame step and its single host copy, and the codec decoder's per-slot state.

Contract:
- `FrameStepper(codegen, decoder, graphs, max_slots, device, timing)` captures the step graphs at construction
  (runtime/step_graphs.StepGraphs, with this object's decoder-state views) and owns the decoder state: one row
  per slot (`state`), reset per row on admission (`state.reset_`), moved with its stream on compaction
  (`state.move_`), zeroed everywhere by `reset_state()` (in place: captured graphs hold these tensors).
- `run(n_rows, live)`: one step for rows [0, n_rows) through the smallest graph bucket >= n_rows; only the rows
  where `live` is true advance (all of the n_rows by default), the others and the rest of the bucket are computed
  but left unchanged (`CodeGenerator.set_live`): codes, done flags, int16 PCM and non-finite counts of all rows
  come to the host in one copy, the step's only host sync. Returns a `StepOutput` sliced to n_rows.
- `measure(repeats)`: bucket -> median ms of `run(bucket)` as the host sees it (copy included): what the
  scheduler's admission decisions and the engine's capacity are based on. Mutates rows' state (reset after).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tts_engine.runtime.metrics import StepTimer
from tts_engine.runtime.step_graphs import StepGraphs


@dataclass
class StepOutput:
    """Host copies of one batched frame step."""

    codes: np.ndarray  # [n_rows, 16] int64
    done: np.ndarray  # [n_rows] bool
    pcm: np.ndarray  # [n_rows, 1920] int16
    nonfinite: np.ndarray  # [n_rows] int64: NaN/inf samples replaced by 0 / +-1 before int16
    codegen_ms: float
    decode_ms: float
    t_ready: float


def pcm_to_int16(pcm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float PCM in [-1, 1] -> int16 (round half to even of x * 32767), plus a count of non-finite samples."""
    nonfinite = (~torch.isfinite(pcm)).sum(dim=-1)
    clean = torch.nan_to_num(pcm, nan=0.0, posinf=1.0, neginf=-1.0).clamp(-1.0, 1.0)
    return torch.round(clean * 32767.0).to(torch.int16), nonfinite


class FrameStepper:
    def __init__(self, codegen: Any, decoder: Any, graphs: StepGraphs, *, max_slots: int, device: torch.device,
                 timing: bool = True) -> None:
        self.codegen = codegen
        self.decoder = decoder
        self.graphs = graphs
        self.max_slots = max_slots
        self.state = decoder.new_state(codegen.max_slots)  # one row per code-generator row
        self.state.live = codegen.live  # one mask for both: a step advances the live rows only
        self._views: dict[int, Any] = {}
        self._timer = StepTimer(device, enabled=timing)
        graphs.capture(self.state_rows, self.reset_state)

    def state_rows(self, n_rows: int) -> Any:
        """The decoder state of rows [0, n_rows) as views (the decoder updates its state in place)."""
        view = self._views.get(n_rows)
        if view is None:
            full = self.state
            view = type(full)(
                tails=[t[:n_rows] for t in full.tails],
                kv_k=full.kv_k[:, :n_rows],
                kv_v=full.kv_v[:, :n_rows],
                positions=full.positions[:n_rows],
                live=full.live[:n_rows],
            )
            self._views[n_rows] = view
        return view

    def reset_state(self) -> None:
        self.state.reset_(slice(None))

    def run(self, n_rows: int, live: np.ndarray | None = None) -> StepOutput:
        """One batched frame step for rows [0, n_rows): codegen, decode, one host copy."""
        timer = self._timer
        rows = self.graphs.rows_for(n_rows)  # the graph bucket; rows past n_rows are computed and left unchanged
        self.codegen.set_live(np.ones(n_rows, dtype=np.bool_) if live is None else live)
        timer.mark(0)
        codes, done, pcm = self.graphs.frame_step(rows, self.state_rows(rows), timer.mark)  # marks 1 in between
        timer.mark(2)
        codes, done = codes[:n_rows], done[:n_rows]
        pcm16, nonfinite = pcm_to_int16(pcm[:n_rows])
        host = torch.cat([codes.to(torch.int64), done.to(torch.int64)[:, None], nonfinite[:, None]], dim=1).cpu()
        pcm_host = pcm16.cpu().numpy()
        t_ready = time.perf_counter()
        codegen_ms, decode_ms = timer.elapsed_ms()
        host_np = host.numpy()
        return StepOutput(
            codes=host_np[:, :16],
            done=host_np[:, 16].astype(bool),
            pcm=pcm_host,
            nonfinite=host_np[:, 17],
            codegen_ms=codegen_ms,
            decode_ms=decode_ms,
            t_ready=t_ready,
        )

    @torch.no_grad()
    def measure(self, repeats: int = 5) -> dict[int, float]:
        """Median host-wall ms of one step per row bucket (2 warm-up steps each); rows' state is reset after."""
        costs: dict[int, float] = {}
        for bucket in self.graphs.buckets or [self.max_slots]:
            times = []
            for i in range(repeats + 2):
                t0 = time.perf_counter()
                self.run(bucket)
                if i >= 2:
                    times.append((time.perf_counter() - t0) * 1000.0)
            costs[bucket] = round(float(np.median(times)), 3)
        self.reset_state()
        return costs
