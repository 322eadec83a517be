"""The GPU worker: one thread that owns all model work and runs a frame step for all active streams.

Contract:
- Streams are admitted into static slots, lowest free slot first, so active rows stay packed at the
  bottom; each iteration calls `CodeGenerator.step(highest_active_slot + 1)` once (the one call site
  of the talker/predictor step) and decodes the new frame of every row with `CodecDecoder.step` at a
  fixed one-frame granularity (the one call site of the decoder step). Rows of free slots inside that
  range are computed and ignored (fixed shapes; runtime/cuda_graphs.StepGraphs runs both, graphed per row bucket).
- Between two steps the worker takes new admissions, and drops streams whose consumer cancelled
  (a flag set by the consumer), so a cancelled stream's GPU work stops within one frame step.
- There is one host sync per step: codes, done flags and int16 PCM of all rows are copied out together.
  Packets go to each consumer's event loop without ever blocking (see runtime/stream.py).
- An exception inside a step fails the streams that were in it with a clear error, resets the decoder
  state and the worker keeps serving. Bad input found at admission (`TTSInputError` from `prepare`)
  fails only that stream.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tts_engine.errors import TTSInputError
from tts_engine.runtime.cuda_graphs import StepGraphs
from tts_engine.runtime.metrics import EngineCounters, StepTimer
from tts_engine.runtime.packetizer import SAMPLES_PER_FRAME, Packetizer
from tts_engine.runtime.stream import EngineClosedError, Packet, StreamChannel, StreamOverflowError

log = logging.getLogger(__name__)


class EngineStepError(RuntimeError):
    """A frame step failed inside the engine (not the caller's fault); the engine keeps serving."""


@dataclass
class _Slot:
    channel: StreamChannel
    packetizer: Packetizer
    max_frames: int
    frames: int = 0


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


class _Call:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


_STOP = object()


def pcm_to_int16(pcm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float PCM in [-1, 1] -> int16 (round half to even of x * 32767), plus a count of non-finite samples."""
    nonfinite = (~torch.isfinite(pcm)).sum(dim=-1)
    clean = torch.nan_to_num(pcm, nan=0.0, posinf=1.0, neginf=-1.0).clamp(-1.0, 1.0)
    return torch.round(clean * 32767.0).to(torch.int16), nonfinite


class Scheduler:
    def __init__(
        self,
        codegen: Any,  # runtime.codegen.CodeGenerator
        decoder: Any,  # model.codec.CodecDecoder
        *,
        max_slots: int,
        device: torch.device,
        eos_code: int,
        counters: EngineCounters,
        on_stream_end: Callable[[StreamChannel], None],
        timing: bool = True,
        graphs: StepGraphs | None = None,
    ) -> None:
        self.codegen = codegen
        self.decoder = decoder
        self.max_slots = max_slots
        self.device = device
        self.eos_code = eos_code
        self.counters = counters
        self._on_stream_end = on_stream_end
        self._reset_decoder_state()
        # the step call sites go through StepGraphs: CUDA graphs per row bucket, or eager (counted reasons)
        self.graphs = graphs or StepGraphs(codegen, decoder, max_slots=max_slots, device=device, talker=False,
                                           predictor=False, decoder_graph=False)
        self.graphs.capture(self._state_rows, self._reset_decoder_state)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: deque[StreamChannel] = deque()
        self._slots: dict[int, _Slot] = {}
        self._timer = StepTimer(device, enabled=timing)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tts-engine-worker", daemon=True)
        self.fatal_error: BaseException | None = None

    # ---- public, any thread -------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, channel: StreamChannel) -> None:
        self._inbox.put(channel)

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `fn` on the worker thread between two steps (model work that must not race the loop)."""
        item = _Call(fn)
        self._inbox.put(item)
        return item.future

    def close(self, timeout: float = 10.0) -> None:
        self._inbox.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def active_count(self) -> int:
        return len(self._slots)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # ---- worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            with torch.no_grad():  # no_grad, not inference_mode: CUDA-graph capture needs plain tensors
                while not self._stopping:
                    self._drain_inbox(block=not self._slots and not self._pending)
                    if self._stopping:
                        break
                    self._drop_cancelled()
                    self._admit_pending()
                    if self._slots:
                        self._advance()
        except BaseException as exc:  # noqa: BLE001 - a dead worker must never leave consumers hanging
            self.fatal_error = exc
            log.exception("engine worker died")
        finally:
            self._shutdown()

    def _drain_inbox(self, block: bool) -> None:
        while True:
            try:
                item = self._inbox.get() if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if item is _STOP:
                self._stopping = True
                return
            if isinstance(item, _Call):
                if item.future.set_running_or_notify_cancel():
                    try:
                        item.future.set_result(item.fn())
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        item.future.set_exception(exc)
            else:
                self._pending.append(item)

    def _drop_cancelled(self) -> None:
        for slot, state in list(self._slots.items()):
            if state.channel.cancel_requested:
                self._end(slot, "cancelled", None)

    def _admit_pending(self) -> None:
        while self._pending and len(self._slots) < self.max_slots:
            channel = self._pending.popleft()
            metrics = channel.request.metrics
            if channel.cancel_requested:
                self._finish_unadmitted(channel, "cancelled", None)
                continue
            slot = min(set(range(self.max_slots)) - self._slots.keys())
            req = channel.request
            try:
                prompt = self.codegen.prepare(
                    req.text, req.speaker, req.language, req.instruct, max_frames=req.max_frames
                )
                self.codegen.admit(slot, prompt, req.params)
                self._decoder_state.reset_(slot)
            except TTSInputError as exc:
                self.counters.add("input_errors")
                self._finish_unadmitted(channel, "error", exc)
                continue
            except Exception as exc:  # noqa: BLE001 - this stream fails, the engine keeps serving
                log.exception("admission of %s failed", metrics.request_id)
                self._safe_release(slot)
                self._finish_unadmitted(channel, "error", EngineStepError(f"admission failed: {exc}"))
                continue
            metrics.t_admitted = time.perf_counter()
            metrics.slot = slot
            metrics.max_frames = int(prompt.max_frames)
            metrics.status = "running"
            self._slots[slot] = _Slot(
                channel, Packetizer(req.first_packet_frames, req.packet_frames), metrics.max_frames
            )

    def run_step(self, n_rows: int) -> StepOutput:
        """One batched frame step for rows [0, n_rows): codegen, decode, one host copy."""
        timer = self._timer
        rows = self.graphs.rows_for(n_rows)  # the graph bucket; rows past n_rows are free slots, ignored
        timer.mark(0)
        codes, done, pcm = self.graphs.frame_step(rows, self._state_rows(rows), timer.mark)  # marks 1 in between
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

    def _state_rows(self, n_rows: int) -> Any:
        """The decoder state of rows [0, n_rows) as views (the decoder updates its state in place)."""
        view = self._state_views.get(n_rows)
        if view is None:
            full = self._decoder_state
            view = type(full)(
                tails=[t[:n_rows] for t in full.tails],
                kv_k=full.kv_k[:, :n_rows],
                kv_v=full.kv_v[:, :n_rows],
                positions=full.positions[:n_rows],
            )
            self._state_views[n_rows] = view
        return view

    def _reset_decoder_state(self) -> None:
        # reset in place once it exists: captured decoder graphs hold these tensors (and the cached views)
        if getattr(self, "_decoder_state", None) is not None:
            self._decoder_state.reset_(slice(None))
            return
        self._decoder_state = self.decoder.new_state(self.max_slots)
        self._state_views: dict[int, Any] = {}

    def _advance(self) -> None:
        n_rows = max(self._slots) + 1
        try:
            out = self.run_step(n_rows)
        except Exception as exc:  # noqa: BLE001 - fail these streams, keep the engine serving
            log.exception("frame step failed (rows=%d)", n_rows)
            self.counters.add("worker_errors")
            self._reset_decoder_state()
            for slot in list(self._slots):
                self._end(slot, "error", EngineStepError(f"frame step failed: {exc}"))
            return
        self.counters.add_step(len(self._slots), out.codegen_ms, out.decode_ms)
        for slot, state in list(self._slots.items()):
            self._consume_row(slot, state, out)

    def _consume_row(self, slot: int, state: _Slot, out: StepOutput) -> None:
        metrics = state.channel.request.metrics
        metrics.codegen_wall_ms += out.codegen_ms
        metrics.decode_wall_ms += out.decode_ms
        done = bool(out.done[slot])
        code0 = int(out.codes[slot, 0])
        # done means EOS (that frame's codes are not audio) or the frame cap (that frame is valid).
        valid = not done or code0 != self.eos_code
        packet_pcm: np.ndarray | None = None
        if valid:
            state.frames += 1
            metrics.frames = state.frames
            metrics.nonfinite_samples += int(out.nonfinite[slot])
            state.channel.request.codes.append(out.codes[slot].copy())
            self.counters.add("frames_generated")
            packet_pcm = state.packetizer.push(out.pcm[slot].copy())
        if packet_pcm is not None and not self._emit(slot, state, packet_pcm, out.t_ready):
            return
        if done:
            rest = state.packetizer.flush()
            if rest is not None and not self._emit(slot, state, rest, out.t_ready):
                return
            self._end(slot, "eos" if code0 == self.eos_code else "cap", None)

    def _emit(self, slot: int, state: _Slot, pcm: np.ndarray, t_ready: float) -> bool:
        metrics = state.channel.request.metrics
        frames = pcm.shape[0] // SAMPLES_PER_FRAME
        packet = Packet(pcm=pcm, index=state.packetizer.packets_out - 1, frames=frames, t_ready=t_ready)
        if metrics.t_first_packet is None:
            metrics.t_first_packet = t_ready
        if state.channel.offer(packet):
            metrics.packets += 1
            metrics.samples += pcm.shape[0]
            self.counters.add("packets_emitted")
            self.counters.add("samples_emitted", pcm.shape[0])
            return True
        if state.channel.cancel_requested:
            self._end(slot, "cancelled", None)
        else:
            self.counters.add("streams_overflowed")
            buffered_s = state.channel.buffered_frames * SAMPLES_PER_FRAME / 24_000
            self._end(
                slot,
                "overflow",
                StreamOverflowError(
                    f"stream {metrics.request_id} cancelled: the consumer left {buffered_s:.1f} s of audio unread "
                    "(over the engine's buffer cap); read packets as they come"
                ),
            )
        return False

    def _end(self, slot: int, reason: str, error: BaseException | None) -> None:
        state = self._slots.pop(slot)
        self._safe_release(slot)
        self._complete(state.channel, reason, error)

    def _finish_unadmitted(self, channel: StreamChannel, reason: str, error: BaseException | None) -> None:
        self._complete(channel, reason, error)

    def _complete(self, channel: StreamChannel, reason: str, error: BaseException | None) -> None:
        metrics = channel.request.metrics
        metrics.t_done = time.perf_counter()
        metrics.end_reason = reason
        if reason in ("eos", "cap"):
            metrics.status = "completed"
            self.counters.add("streams_completed")
        elif reason == "cancelled":
            metrics.status = "cancelled"
            self.counters.add("streams_cancelled")
        else:
            metrics.status = "error"
            metrics.error = str(error) if error is not None else reason
            self.counters.add("streams_failed")
        try:  # bookkeeping first (slot reservation, code dump, listeners), so it is done when the consumer sees the end
            self._on_stream_end(channel)
        except Exception:  # noqa: BLE001 - bookkeeping must not kill the worker
            log.exception("on_stream_end failed")
        channel.finish(error)

    def _safe_release(self, slot: int) -> None:
        try:
            self.codegen.release(slot)
        except Exception:  # noqa: BLE001
            log.exception("release of slot %d failed", slot)

    def _shutdown(self) -> None:
        error = EngineClosedError("the TTS engine was closed")
        if self.fatal_error is not None:
            error = EngineClosedError(f"the TTS engine worker failed: {self.fatal_error}")
        for slot in list(self._slots):
            self._end(slot, "error", error)
        while self._pending:
            self._finish_unadmitted(self._pending.popleft(), "error", error)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Call):
                item.future.set_exception(error)
            elif isinstance(item, StreamChannel):
                self._finish_unadmitted(item, "error", error)
