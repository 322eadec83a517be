"""CUDA-graph capture of fixed-shape step functions, with counted eager fallback.

Contract:
- `CapturedCall(fn, example_inputs, ...)` runs `fn` a few times on a side stream (warm-up: lazy cuBLAS
  handles, workspaces and autotuning happen outside the graph), then captures one call into a CUDA
  graph on a dedicated stream, sharing one memory pool with the other graphs of the engine. Inputs are
  copied into the captured buffers on each call; a call whose tensor shapes, dtypes or devices differ
  from the captured ones raises `GraphShapeError` naming the argument (never a silent re-capture).
  Non-tensor arguments are frozen at capture and must compare equal on every call.
- The outputs are the graph's own buffers: valid until the next replay. Callers copy what they keep.
- Warm-up runs execute `fn` for real, so anything `fn` mutates (caches, counters) must be state the
  caller resets afterwards (the engine captures at load, before any stream is admitted).
- `GraphStats` counts graph and eager steps and the reasons for each eager fallback; the engine exposes
  it in its stats (`graph_steps`, `eager_steps`, `fallback_reasons`).
- A replay is launched on the caller's current stream (after the input copies), so it is ordered like
  the eager call it replaces. Replays never synchronise with the host.

Only this module and its users touch torch.cuda; importing it on a CPU machine is harmless.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tts_engine.runtime.fusion import compiled_graph_count


class GraphShapeError(ValueError):
    """A captured graph was called with inputs that do not match what it captured."""


@dataclass
class GraphStats:
    """Counters shared by every graph of one engine (thread-safe increments)."""

    graph_steps: int = 0
    eager_steps: int = 0
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    capture_s: float = 0.0
    compile_s: float = 0.0  # the compile pass before capture (compile_step_shapes)
    compiled_at_load: int | None = None  # process-wide torch.compile graph count when capture ended
    captured: list[str] = field(default_factory=list)
    fusion: str = "off"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_graph(self) -> None:
        with self._lock:
            self.graph_steps += 1

    def count_eager(self, reason: str) -> None:
        with self._lock:
            self.eager_steps += 1
            self.fallback_reasons[reason] += 1

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "graph_steps": self.graph_steps,
                "eager_steps": self.eager_steps,
                "fallback_reasons": dict(self.fallback_reasons),
                "graphs_captured": list(self.captured),
                "graph_capture_s": round(self.capture_s, 3),
                "compile_pass_s": round(self.compile_s, 3),
                "fusion": self.fusion,
                # graphs compiled in this process since this engine loaded (any model): should stay 0
                "compiles_since_load": None if self.compiled_at_load is None
                else compiled_graph_count() - self.compiled_at_load,
            }


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.device)
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    return ("object", id(value))  # e.g. a decoder state: the graph holds its tensors, so it must be the same one


class CapturedCall:
    """`fn(*inputs)` captured once; later calls copy new inputs into the captured buffers and replay."""

    def __init__(
        self,
        fn: Callable[..., Any],
        example_inputs: Sequence[Any],
        *,
        name: str,
        pool: Any = None,
        stream: torch.cuda.Stream | None = None,
        warmup: int = 2,
        stats: GraphStats | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.stats = stats
        self.stream = stream if stream is not None else torch.cuda.Stream()
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self._signatures = tuple(_signature(v) for v in example_inputs)
        self._inputs = tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in example_inputs)
        t0 = time.perf_counter()
        caller = torch.cuda.current_stream()
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            for _ in range(warmup):
                fn(*self._inputs)
        self.stream.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
            self._outputs = fn(*self._inputs)
        self.stream.synchronize()
        caller.wait_stream(self.stream)
        elapsed = time.perf_counter() - t0
        if stats is not None:
            stats.capture_s += elapsed
            stats.captured.append(name)

    def check(self, inputs: Sequence[Any]) -> None:
        if len(inputs) != len(self._signatures):
            raise GraphShapeError(f"graph {self.name}: called with {len(inputs)} arguments, captured with "
                                  f"{len(self._signatures)}")
        for i, (value, expected) in enumerate(zip(inputs, self._signatures, strict=True)):
            got = _signature(value)
            if got != expected:
                raise GraphShapeError(f"graph {self.name}: argument {i} is {got[1:]} but the graph was captured "
                                      f"with {expected[1:]}; shapes are fixed per graph (capture another bucket)")

    def __call__(self, *inputs: Any) -> Any:
        self.check(inputs)
        for dst, src in zip(self._inputs, inputs, strict=True):
            if isinstance(dst, torch.Tensor) and dst.data_ptr() != src.data_ptr():
                dst.copy_(src)
        self.graph.replay()  # launches on the caller's current stream, ordered after the copies above
        if self.stats is not None:
            self.stats.count_graph()
        return self._outputs
