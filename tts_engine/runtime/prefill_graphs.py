"""The talker prefill on CUDA: one prompt, or several arrivals' prompts at once, padded to a length bucket.

Contract:
- `PrefillGraphs(codegen, device, max_slots, stats)` allocates the scratch caches and installs itself as the code
  generator's `prefill_hook` (one prompt) and `prefill_many_hook` (several). A prompt is zero-padded at its end to
  the smallest length bucket (causal attention: the padding cannot reach the real positions), run into a scratch
  cache, and its KV rows are copied into its slot; the last real position's hidden state is returned.
- Several prompts that share a length bucket (<= BATCHED_PREFILL_MAX_LEN) run as one batch of PREFILL_BATCHES
  rows (unused rows zero), so a burst of arrivals costs one prefill call per bucket instead of one per stream
  (issue 15: admissions are GPU work between frame steps). Longer prompts, and lone ones, go one by one.
- Every shape is graphed when `capture` is called with the talker switch on; the eager path pads the same way,
  so graphs on/off stay bit-identical. A prompt longer than the largest bucket prefills eagerly, unpadded
  (counted in the graph stats). `compile_fns()` lists one call per shape for the engine's compile pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

from tts_engine.runtime.cuda_graphs import CapturedCall, GraphStats

PREFILL_BUCKETS = (32, 64, 128, 256, 512, 1024)
PREFILL_BATCHES = (2, 4, 8, 16)
BATCHED_PREFILL_MAX_LEN = 256


class PrefillGraphs:
    def __init__(self, codegen: Any, device: torch.device, max_slots: int, stats: GraphStats) -> None:
        gen = self.codegen = codegen
        self.stats = stats
        self.want_graphs = False
        self.graphs: dict[int, CapturedCall] = {}
        self.batch_graphs: dict[tuple[int, int], CapturedCall] = {}
        self.buckets = [b for b in PREFILL_BUCKETS if b < gen.max_seq_len]
        self.batched_buckets = [b for b in self.buckets if b <= BATCHED_PREFILL_MAX_LEN] if max_slots > 1 else []
        t, hidden, dt = gen.k_cache.shape, gen.past_hidden.shape[-1], gen.k_cache.dtype
        length = self.buckets[-1] if self.buckets else 0
        self._k = torch.zeros(t[0], t[2], length, t[4], dtype=dt, device=device)
        self._v = torch.zeros_like(self._k)
        self._x = torch.zeros(length, hidden, dtype=dt, device=device)
        gen.prefill_hook = self.prefill
        if self.batched_buckets:
            rows, blen = PREFILL_BATCHES[-1], self.batched_buckets[-1]
            self._bk = torch.zeros(t[0], rows, t[2], blen, t[4], dtype=dt, device=device)
            self._bv = torch.zeros_like(self._bk)
            self._bx = torch.zeros(rows, blen, hidden, dtype=dt, device=device)
            gen.prefill_many_hook = self.prefill_many

    def shapes(self) -> list[tuple[int, int]]:
        """(batch, length) of every prefill shape, largest first (batch 1 = the single-prompt path)."""
        singles = [(1, b) for b in sorted(self.buckets, reverse=True)]
        batched = [(k, b) for k in sorted(PREFILL_BATCHES, reverse=True) for b in sorted(self.batched_buckets,
                                                                                          reverse=True)]
        return singles + batched

    def fn(self, rows: int, length: int) -> Callable[[], torch.Tensor]:
        gen = self.codegen
        dt = gen.model.dtype

        def prefill() -> torch.Tensor:
            cos, sin = gen.cos_f32[:length].to(dt), gen.sin_f32[:length].to(dt)
            if rows == 1:
                return gen.talker.model.prefill(self._x[None, :length], cos, sin, self._k, self._v)
            return gen.talker.model.prefill(self._bx[:rows, :length], cos, sin, self._bk[:, :rows], self._bv[:, :rows])

        return prefill

    def compile_fns(self) -> list[Callable[[], torch.Tensor]]:
        return [self.fn(k, b) for k, b in self.shapes()]

    def capture(self, try_capture: Callable[[dict[Any, CapturedCall], Any, str, Callable[..., Any]], None]) -> None:
        """Capture every shape through the caller's `try_capture(table, key, name, fn)` (shared pool and stats)."""
        self.want_graphs = True
        for k, b in self.shapes():
            if k == 1:
                try_capture(self.graphs, b, f"prefill[positions={b}]", self.fn(1, b))
            else:
                try_capture(self.batch_graphs, (k, b), f"prefill[batch={k},positions={b}]", self.fn(k, b))

    def _replay(self, table: dict[Any, CapturedCall], key: Any, rows: int, length: int) -> torch.Tensor:
        graph = table.get(key)
        if graph is not None:
            return graph()
        reason = "not captured" if self.want_graphs else "disabled by TTS_CODEGEN_CUDAGRAPH_TALKER=0"
        self.stats.count_eager(f"prefill: {reason}")
        return self.fn(rows, length)()

    @torch.no_grad()
    def prefill(self, slot: int, embeds: torch.Tensor) -> torch.Tensor:
        """The code generator's prefill hook: KV rows 0..T-1 of `slot` written, last hidden [H] returned."""
        gen = self.codegen
        n = embeds.shape[0]
        bucket = next((b for b in self.buckets if b >= n), None)
        if bucket is None:
            self.stats.count_eager(f"prefill: prompt of {n} positions is longer than the largest bucket")
            dt = gen.model.dtype
            cos, sin = gen.cos_f32[:n].to(dt), gen.sin_f32[:n].to(dt)
            h = gen.talker.model.prefill(embeds[None], cos, sin, gen.k_cache[:, slot], gen.v_cache[:, slot])
            return h[0, -1]
        self._x[:n].copy_(embeds)
        self._x[n:bucket].zero_()
        h = self._replay(self.graphs, bucket, 1, bucket)
        gen.k_cache[:, slot, :, :n].copy_(self._k[:, :, :n])
        gen.v_cache[:, slot, :, :n].copy_(self._v[:, :, :n])
        return h[0, n - 1].clone()

    @torch.no_grad()
    def prefill_many(self, slots: list[int], embeds: list[torch.Tensor]) -> list[torch.Tensor]:
        """The batched prefill hook: prompts sharing a length bucket go together (up to PREFILL_BATCHES[-1] per
        call), the rest one by one. Returns each slot's last hidden [H]; KV rows 0..T_i-1 of each slot written."""
        gen = self.codegen
        out: list[torch.Tensor | None] = [None] * len(slots)
        groups: dict[int, list[int]] = {}
        for i, e in enumerate(embeds):
            bucket = next((b for b in self.batched_buckets if b >= e.shape[0]), None)
            if bucket is None:
                out[i] = self.prefill(slots[i], e)
            else:
                groups.setdefault(bucket, []).append(i)
        top = PREFILL_BATCHES[-1]
        for bucket, members in groups.items():
            for start in range(0, len(members), top):
                chunk = members[start : start + top]
                if len(chunk) == 1:
                    out[chunk[0]] = self.prefill(slots[chunk[0]], embeds[chunk[0]])
                    continue
                rows = next(k for k in PREFILL_BATCHES if k >= len(chunk))
                self._bx[:rows, :bucket].zero_()
                for j, i in enumerate(chunk):
                    self._bx[j, : embeds[i].shape[0]].copy_(embeds[i])
                h = self._replay(self.batch_graphs, (rows, bucket), rows, bucket)
                for j, i in enumerate(chunk):
                    n = embeds[i].shape[0]
                    gen.k_cache[:, slots[i], :, :n].copy_(self._bk[:, j, :, :n])
                    gen.v_cache[:, slots[i], :, :n].copy_(self._bv[:, j, :, :n])
                    out[i] = h[j, n - 1].clone()
        return cast("list[torch.Tensor]", out)  # every index was filled above
