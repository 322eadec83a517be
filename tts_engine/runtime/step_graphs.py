"""The engine's frame-step call sites as CUDA graphs per row bucket, with a compile pass before capture.

Contract:
- `buckets_for(slots)`: the row buckets; a step for n rows runs the smallest bucket >= n.
- `compile_step_shapes(...)`: runs every step shape (code generator per bucket and sampling variant, every prefill
  shape, the decoder per bucket) once before any capture, so torch.compile has made all its entries first.
- `StepGraphs`: captures and replays the code-generator step, the decoder step and the overlapped frame step per
  bucket (and owns the prefill graphs, runtime/prefill_graphs.py); anything not captured runs eagerly, counted.
Built on runtime/cuda_graphs.CapturedCall (the fixed-shape capture/replay wrapper).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tts_engine.runtime.cuda_graphs import CapturedCall, GraphStats
from tts_engine.runtime.fusion import compiled_graph_count
from tts_engine.runtime.prefill_graphs import PrefillGraphs


def compile_step_shapes(codegen: Any, rows: Sequence[int], sampling_variants: Sequence[bool],
                        prefills: Sequence[Callable[[], Any]] = (),
                        decoder_steps: Sequence[Callable[[], Any]] = ()) -> None:
    """Run every step shape once, eagerly, so torch.compile (runtime/fusion.py) has made all its cache entries
    before anything is captured. Why: a compiled method keeps several entries, and one compiled later for a
    broader shape family takes over inputs an earlier entry served (seen: the 4-row entry made while the
    4-row graph was captured was later replaced by the one made for 2 rows). A graph captured before that
    keeps the old entry's kernels while eager steps run the new one's: same math, other bits (graph != eager).
    Compiled first, the entry serving a shape no longer changes (tests/model/test_compile_entries.py).
    Mutates code-generator rows (reset on admission), like the capture warm-ups."""
    for n in sorted(rows, reverse=True):
        for sampling in sampling_variants:
            codegen.step(n, sampling=sampling)
    for prefill in prefills:
        prefill()
    for decode in decoder_steps:  # the codec's fused pieces (runtime/fusion.py `codec_snake`), every row bucket
        decode()


def buckets_for(max_slots: int) -> list[int]:
    """Row counts that get their own graph (a step for n rows runs the smallest bucket >= n): 1, 2, 4, 8, 16, then
    every 16 up to 128, every 32 up to 256, every 64 beyond, and max_slots itself. Past 16 rows a step runs at most
    ~25 % more rows than are active (powers of two ran 160 active rows as 256, an RTF cliff); below 16 the
    step costs about the same whatever the rows, so few graphs suffice there."""
    sizes, b = [], 1
    while b < max_slots:
        sizes.append(b)
        b = b * 2 if b < 16 else b + (16 if b < 128 else 32 if b < 256 else 64)
    sizes.append(max_slots)
    return sizes


class StepGraphs:
    """The engine's two step call sites (code generator, codec decoder), graphed per row bucket or eager.

    - Code generator: with the talker and predictor switches both on, the whole `CodeGenerator.step` (talker
      logits processing, c0 choice, 15 predictor passes with sampling, talker step) is one graph per
      (bucket, sampling) pair; with one switch on, only that half (`predict_frame` / `advance_talker`) is graphed.
    - Decoder: `CodecDecoder.step` on one frame per bucket, bound to the scheduler's decoder-state views.
    - On CUDA a step for n rows runs the smallest bucket >= n, graphed or not; rows that are not live (free slots,
      streams waiting for their text) are computed but keep their state (`CodeGenerator.live`), and their output is
      ignored. (On the CPU
      there is no bucketing.)
    - Anything not captured (switch off, CPU, capture failure, a sampling variant not captured) runs eagerly
      and is counted in `stats.fallback_reasons`.
    - With all three switches on, `frame_step` replays one graph per (bucket, sampling) that overlaps the
      decoder with the talker half (no separate `CodeGenerator.step` graph is then captured for that bucket):
      predictor half -> fork: {talker half on the main stream, decoder step of the frame's codes on a side
      stream} -> join. The two branches touch disjoint state, so the result is
      the same as running them one after the other (the eager path), only shorter. The scheduler's step
      timer then reports the whole overlapped step as codegen time (decode_ms ~ 0).
    """

    def __init__(self, codegen: Any, decoder: Any, *, max_slots: int, device: torch.device, talker: bool,
                 predictor: bool, decoder_graph: bool, sampling_variants: Sequence[bool] = (False,),
                 warmup: int = 2) -> None:
        self.codegen = codegen
        self.decoder = decoder
        self.max_slots = max_slots
        self.stats = GraphStats()
        self.sampling_variants = tuple(sampling_variants)
        self.warmup = warmup
        cuda = device.type == "cuda"
        self.want_talker = cuda and talker
        self.want_predictor = cuda and predictor
        self.want_decoder = cuda and decoder_graph
        self._off_reason_codegen = self._off_reason(cuda, talker and predictor, "TTS_CODEGEN_CUDAGRAPH_TALKER/_CP")
        self._off_reason_decoder = self._off_reason(cuda, decoder_graph, "TTS_DECODER_CUDAGRAPH")
        # Eager steps on CUDA use the same row buckets, so graphs on or off run identical shapes (cuBLAS may pick
        # another kernel for another row count): graph and eager stay bit-identical under any concurrency.
        self.buckets = buckets_for(max_slots) if cuda else []
        self.codegen_graphs: dict[tuple[int, bool], CapturedCall] = {}
        self.predict_graphs: dict[tuple[int, bool], CapturedCall] = {}
        self.talker_graphs: dict[int, CapturedCall] = {}
        self.decoder_graphs: dict[int, CapturedCall] = {}
        self.frame_graphs: dict[tuple[int, bool], CapturedCall] = {}
        # the talker prefill (one prompt, or several arrivals at once), padded to length buckets: prefill_graphs.py
        self.prefills = PrefillGraphs(codegen, device, max_slots, self.stats) if cuda else None
        self.capture_errors: list[str] = []

    @staticmethod
    def _off_reason(cuda: bool, enabled: bool, variable: str) -> str:
        if not cuda:
            return "device is not CUDA"
        return "" if enabled else f"disabled by {variable}=0"

    # ---- capture (once, at load, before any stream is admitted) -------------------------------------------------
    def capture(self, state_rows: Callable[[int], Any], reset_decoder_state: Callable[[], None]) -> None:
        self._capture(state_rows, reset_decoder_state)
        if self.buckets:
            self.stats.compiled_at_load = compiled_graph_count()

    @torch.no_grad()
    def _capture(self, state_rows: Callable[[int], Any], reset_decoder_state: Callable[[], None]) -> None:
        if not self.buckets:
            return
        stream = torch.cuda.Stream()  # the compile pass and the capture warm-ups share its cached blocks
        # CUDA, graphs or not: compile every step shape now (before any capture, and not at a first request)
        t0 = time.perf_counter()
        stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(stream):
                compile_step_shapes(self.codegen, self.buckets, self.sampling_variants,
                                    self.prefills.compile_fns() if self.prefills is not None else [],
                                    [self._decode_fn(b, state_rows(b)) for b in sorted(self.buckets, reverse=True)])
        except Exception as exc:
            raise RuntimeError(f"the compile pass over the step shapes failed ({type(exc).__name__}: {exc}); "
                               "TTS_CUDA_FUSION=0 runs the model unfused") from exc
        torch.cuda.synchronize()
        self.stats.compile_s = time.perf_counter() - t0
        if not (self.want_talker or self.want_predictor or self.want_decoder):
            reset_decoder_state()  # the compile pass stepped the decoder
            return
        pool = torch.cuda.graph_pool_handle()
        common = dict(pool=pool, stream=stream, warmup=self.warmup, stats=self.stats)
        gen, dec = self.codegen, self.decoder
        hidden = gen.past_hidden.shape[-1]
        groups = gen.cfg.num_code_groups
        side = torch.cuda.Stream()
        overlap = self.want_talker and self.want_predictor and self.want_decoder
        for rows in sorted(self.buckets, reverse=True):  # largest first: smaller graphs reuse its pool blocks
            for sampling in self.sampling_variants:
                tag = f"rows={rows},sampling={sampling}"
                if overlap:
                    self._try(self.frame_graphs, (rows, sampling), f"frame_step[{tag}]",
                              self._overlapped_frame(rows, sampling, state_rows(rows), side), (), common)
                    if (rows, sampling) in self.frame_graphs:
                        continue  # the overlapped graph replaces codegen.step at this bucket (less capture, memory)
                if self.want_talker and self.want_predictor:
                    self._try(self.codegen_graphs, (rows, sampling), f"codegen.step[{tag}]",
                              lambda r=rows, s=sampling: gen.step(r, sampling=s), (), common)
                elif self.want_predictor:
                    self._try(self.predict_graphs, (rows, sampling), f"codegen.predict_frame[{tag}]",
                              lambda r=rows, s=sampling: gen.predict_frame(r, sampling=s), (), common)
            if self.want_talker and not self.want_predictor:
                dev = gen.positions.device
                example = (torch.zeros(rows, dtype=torch.long, device=dev),
                           torch.zeros(rows, hidden, dtype=gen.past_hidden.dtype, device=dev),
                           torch.zeros(rows, groups - 1, dtype=torch.long, device=dev))
                self._try(self.talker_graphs, rows, f"codegen.advance_talker[rows={rows}]",
                          lambda c0, e, rest, r=rows: gen.advance_talker(r, c0, e, rest), example, common)
            if self.want_decoder:
                state = state_rows(rows)
                codes = torch.zeros(rows, groups, 1, dtype=torch.long, device=state.positions.device)
                self._try(self.decoder_graphs, rows, f"decoder.step[rows={rows}]", dec.step, (codes, state), common)
        if self.want_talker and self.prefills is not None:
            self.prefills.capture(lambda table, key, name, fn: self._try(table, key, name, fn, (), common))
        torch.cuda.synchronize()
        reset_decoder_state()  # warm-up runs advanced the decoder state; code-generator rows reset on admission

    def _decode_fn(self, rows: int, state: Any) -> Callable[[], torch.Tensor]:
        codes = torch.zeros(rows, self.codegen.cfg.num_code_groups, 1, dtype=torch.long, device=state.positions.device)
        return lambda: self.decoder.step(codes, state)

    def _overlapped_frame(self, rows: int, sampling: bool, state: Any, side: torch.cuda.Stream) -> Callable[[], Any]:
        gen, dec = self.codegen, self.decoder

        def frame() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            main = torch.cuda.current_stream()
            c0, c0_embed, rest = gen.predict_frame(rows, sampling)
            side.wait_stream(main)
            with torch.cuda.stream(side):  # allocated on the side stream, so no cross-stream reuse of its blocks
                pcm = dec.step(torch.cat((c0[:, None], rest), dim=1)[:, :, None], state)
            codes, done = gen.advance_talker(rows, c0, c0_embed, rest)
            main.wait_stream(side)
            return codes, done, pcm

        return frame

    def _try(self, table: dict[Any, CapturedCall], key: Any, name: str, fn: Callable[..., Any],
             example: Sequence[Any], common: dict[str, Any]) -> None:
        try:
            table[key] = CapturedCall(fn, example, name=name, **common)
        except Exception as exc:  # noqa: BLE001 - a part that cannot be captured runs eagerly, with the reason counted
            torch.cuda.synchronize()
            self.capture_errors.append(f"{name}: {type(exc).__name__}: {exc}")

    # ---- the two call sites -------------------------------------------------------------------------------------
    def rows_for(self, n_rows: int) -> int:
        """The row count a step for n_rows runs with (its graph bucket; n_rows itself when nothing is graphed)."""
        for b in self.buckets:
            if b >= n_rows:
                return b
        return n_rows

    def frame_step(self, rows: int, state: Any,
                   mark: Callable[[int], None] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """codes [rows, 16], done [rows], pcm [rows, 1920] of one frame; `mark(1)` between codegen and decode."""
        overlapped = self.frame_graphs.get((rows, self.codegen.sampling))
        if overlapped is not None:
            codes, done, pcm = overlapped()
            if mark is not None:
                mark(1)
            return codes, done, pcm
        codes, done = self.codegen_step(rows)
        if mark is not None:
            mark(1)
        return codes, done, self.decode_step(codes[:, :, None], state)

    def codegen_step(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = self.codegen
        sampling = gen.sampling
        whole = self.codegen_graphs.get((rows, sampling))
        if whole is not None:
            return whole()
        predict = self.predict_graphs.get((rows, sampling))
        talker = self.talker_graphs.get(rows)
        if predict is None and talker is None:
            self.stats.count_eager(self._why_eager("codegen", rows, sampling))
            return gen.step(rows)
        if predict is not None:
            c0, c0_embed, rest = predict()
        else:
            self.stats.count_eager(self._why_eager("codegen.predictor", rows, sampling))
            c0, c0_embed, rest = gen.predict_frame(rows)
        if talker is not None:
            return talker(c0, c0_embed, rest)
        self.stats.count_eager(self._why_eager("codegen.talker", rows, sampling))
        return gen.advance_talker(rows, c0, c0_embed, rest)

    def decode_step(self, codes: torch.Tensor, state: Any) -> torch.Tensor:
        rows = codes.shape[0]
        graph = self.decoder_graphs.get(rows)
        if graph is not None and codes.shape[2] == 1:
            return graph(codes, state)
        reason = self._off_reason_decoder or ("not one frame" if codes.shape[2] != 1 else f"no graph for rows={rows}")
        self.stats.count_eager(f"decoder: {reason}")
        return self.decoder.step(codes, state)

    def _why_eager(self, part: str, rows: int, sampling: bool) -> str:
        if self._off_reason_codegen and part == "codegen":
            return f"codegen: {self._off_reason_codegen}"
        if sampling not in self.sampling_variants:
            return f"{part}: sampling={sampling} variant not captured"
        if part == "codegen.predictor" and not self.want_predictor:
            return f"{part}: disabled by TTS_CODEGEN_CUDAGRAPH_CP=0"
        if part == "codegen.talker" and not self.want_talker:
            return f"{part}: disabled by TTS_CODEGEN_CUDAGRAPH_TALKER=0"
        if self.capture_errors:
            return f"{part}: capture failed for rows={rows}"
        return f"{part}: no graph for rows={rows}"
