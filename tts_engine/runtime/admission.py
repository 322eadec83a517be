"""Admission: how many streams may run at once, and how many waiting ones may start before the next step, from
measured costs, so that a burst of arrivals delays only the new streams (why: docs/engine.md, "Many streams").

Contract:
- `resolve_slots(config, model)`: the slot count (static cache rows): the configured one, 16 on a CPU, or on CUDA
  what fits `gpu_memory_fraction` of the GPU memory free at load (at most 256).
- `capacity_from_costs(step_ms, budget_ms, slots)`: the most rows whose measured step (`step_ms`: bucket -> ms,
  measured at load by the scheduler) fits `budget_ms`; a step for n rows runs the smallest bucket >= n. At
  least 1, at most `slots`. With no measurement (CPU), every slot counts.
- `Playout`: what the scheduler knows of one running stream: when its first packet reached the host
  (`t_first`, None before), how much audio it has handed out (`emitted_s`) and how many more steps its next
  packet needs (`steps_to_packet`). A listener with no buffer plays from `t_first` on, so the next packet is due
  at `t_first + emitted_s`; its slack now is `due - steps_to_packet * step_ms - now`. A listener that keeps
  `client_buffer_ms` of audio before it plays (TTS_DEEP_STREAM_CLIENT_BUFFER_MS: a WebRTC jitter buffer, a
  player's pre-roll) runs dry that much later; the operator declares it, the default 0 assumes none.
- `AdmissionPolicy.allowed(now, running, step_ms, admit_fixed_ms, admit_each_ms, waiting)`: how many of `waiting`
  streams to admit before the next step. k admissions cost `admit_fixed_ms + k * admit_each_ms` of GPU/host time
  before the step (they are prefilled together: runtime/prefill_graphs.py). With no running stream, up to
  `max_per_step` (the newcomers only wait on each other). Otherwise the least slack decides (deadline first): k
  is the largest number whose cost leaves `guard_ms` of the least slack, at most `max_per_step`. `step_ms` is the
  next step's expected ms, or a function of k giving it: k admitted streams make that step run k more rows, and
  past a row-bucket boundary every running stream waits for the larger bucket's step. A stream whose next packet is
  late whatever happens (negative slack with one admission) does not hold newcomers back: waiting would not make
  it on time; every stream still on time stays on time.
The policy is plain Python and deterministic for given inputs: the CPU tests drive it with made-up clocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tts_engine.errors import ConfigError


def capacity_from_costs(step_ms: Mapping[int, float], budget_ms: float, slots: int) -> int:
    """The most rows whose bucket's measured step fits the budget (1..slots); `slots` when nothing is measured."""
    if not step_ms:
        return slots
    fitting = [bucket for bucket, ms in step_ms.items() if ms <= budget_ms]
    if not fitting:
        return 1
    return max(1, min(slots, max(fitting)))


@dataclass
class Playout:
    t_first: float | None  # perf_counter when the first packet reached the host; None before
    emitted_s: float  # audio handed to the consumer so far
    steps_to_packet: int  # steps until its next packet is complete

    def slack_ms(self, now: float, step_ms: float, client_buffer_ms: float = 0.0) -> float | None:
        """Time to spare (ms) before this stream's listener runs dry, None before its first packet."""
        if self.t_first is None:
            return None
        due = self.t_first + self.emitted_s
        return (due - now) * 1000.0 + client_buffer_ms - self.steps_to_packet * step_ms


@dataclass(frozen=True)
class AdmissionPolicy:
    max_per_step: int = 16
    guard_ms: float = 5.0
    client_buffer_ms: float = 0.0  # audio the listener holds before playing (see Playout)

    def __post_init__(self) -> None:
        if self.max_per_step < 1:
            raise ValueError(f"max_per_step={self.max_per_step} is not allowed; it must be >= 1")
        if self.guard_ms < 0:
            raise ValueError(f"guard_ms={self.guard_ms} is not allowed; it must be >= 0")
        if self.client_buffer_ms < 0:
            raise ValueError(f"client_buffer_ms={self.client_buffer_ms} is not allowed; it must be >= 0")

    def min_slack_ms(self, now: float, running: Iterable[Playout], step_ms: float) -> float | None:
        """The least slack among streams still on time (None when no stream has a deadline to keep)."""
        slacks = [s for p in running
                  if (s := p.slack_ms(now, step_ms, self.client_buffer_ms)) is not None and s >= 0]
        return min(slacks) if slacks else None

    def allowed(self, now: float, running: Iterable[Playout], step_ms: float | Callable[[int], float],
                admit_fixed_ms: float, admit_each_ms: float, waiting: int) -> int:
        if waiting <= 0:
            return 0
        cap = min(waiting, self.max_per_step)
        step_for = step_ms if callable(step_ms) else (lambda k: float(step_ms))
        # a stream's slack for a step of x ms is `ahead - steps_to_packet * x`; keep the least `ahead` per
        # steps_to_packet among streams on time with one admission, so each k costs O(distinct steps_to_packet)
        one = step_for(1)
        tightest: dict[int, float] = {}
        for p in running:
            if p.t_first is None:
                continue
            ahead = (p.t_first + p.emitted_s - now) * 1000.0 + self.client_buffer_ms
            if ahead - p.steps_to_packet * one < 0:
                continue  # late whatever happens
            n = p.steps_to_packet
            tightest[n] = min(ahead, tightest.get(n, math.inf))
        if not tightest:
            return cap
        for k in range(cap, 0, -1):
            step = step_for(k)
            slack = min(ahead - n * step for n, ahead in tightest.items())
            if slack - self.guard_ms - admit_fixed_ms - k * admit_each_ms >= 0:
                return k
        return 0


CPU_SLOTS = 16
AUTO_MAX_SLOTS = 256
#: GPU memory per slot besides its talker KV rows and decoder context (graph pools, step activations), measured
#: on an H100 with 256 slots of the 0.6B (32.4 GiB reserved: 2.4 weights + 20.5 KV + ~38 MB per slot)
ROW_RESERVE_BYTES = 40 << 20


def resolve_slots(config: Any, model: Any) -> int:
    """Slots: the configured number, 16 on a CPU, or on CUDA what fits `gpu_memory_fraction` of the memory free
    now (weights loaded): talker KV rows + decoder context + ROW_RESERVE_BYTES per slot, at most AUTO_MAX_SLOTS."""
    if config.max_streams > 0:
        return config.max_streams
    if model.device.type != "cuda":
        return CPU_SLOTS
    t = model.config.talker
    kv = t.num_layers * 2 * t.num_kv_heads * t.head_dim * config.max_positions * torch.finfo(model.dtype).bits // 8
    probe = model.codec.new_state(1)
    context = sum(x.numel() * x.element_size() for x in (*probe.tails, probe.kv_k, probe.kv_v))
    free, _ = torch.cuda.mem_get_info(model.device)
    fit = int(free * config.gpu_memory_fraction) // (kv + context + ROW_RESERVE_BYTES)
    if fit < 1:
        raise ConfigError(
            f"no room for one stream slot: {free / 2**30:.1f} GiB of GPU memory free, one slot needs "
            f"{(kv + context + ROW_RESERVE_BYTES) / 2**20:.0f} MiB (lower TTS_DEEP_STREAM_MAX_POSITIONS, "
            "or free the GPU)"
        )
    return min(AUTO_MAX_SLOTS, fit)
