"""The GPU worker: one thread that owns all model work and runs a frame step for all active streams.

Contract:
- Which stream sits in which row is the slot table's (runtime/slots.py): running streams are always rows 0..n-1
  (new ones are admitted at n.., and when one ends the highest running stream moves into its row). Each iteration
  calls `CodeGenerator.step(n)` once (the one call site of the talker/predictor step) and decodes the new frame of
  every row with `CodecDecoder.step` at a fixed one-frame granularity (the one call site of the decoder step),
  both through runtime/frame_step.FrameStepper. A step for n rows runs the smallest row bucket >= n
  (runtime/step_graphs.StepGraphs, graphed per bucket).
- Only live rows advance in a step (`FrameStepper.run(n, live)`): a streaming-text stream whose next text token has
  not arrived keeps its row, and the step leaves that row unchanged, as it leaves the bucket's free rows
  (runtime/text_rows.py gives the others their text rows). With no live row there is no step.
- Between two steps the worker drops streams whose consumer cancelled (a flag set by the consumer), so a cancelled
  stream's GPU work stops within one frame step, and admits waiting streams: at most `capacity` run at once
  (measured at load: `measure_costs`), and how many start before the next step is the deadline-first decision of
  runtime/admission.AdmissionPolicy (least slack among running streams), so a burst of arrivals delays only the
  new streams. Waiting streams start in arrival order.
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
from typing import Any

import numpy as np
import torch

from common.audio_format import SAMPLES_PER_FRAME, samples_to_seconds
from tts_engine.errors import EmptyTextError, TTSInputError
from tts_engine.model.codec import CodecDecoder
from tts_engine.runtime.admission import AdmissionPolicy, capacity_from_costs
from tts_engine.runtime.codegen import CodeGenerator
from tts_engine.runtime.costs import StepCosts
from tts_engine.runtime.frame_step import FrameStepper, StepOutput
from tts_engine.runtime.metrics import EngineCounters
from tts_engine.runtime.packetizer import Packetizer
from tts_engine.runtime.slots import SlotState, SlotTable
from tts_engine.runtime.step_graphs import StepGraphs
from tts_engine.runtime.stream import EngineClosedError, Packet, StreamChannel, StreamOverflowError
from tts_engine.runtime.text_rows import TextRows

log = logging.getLogger(__name__)


class EngineStepError(RuntimeError):
    """A frame step failed inside the engine (not the caller's fault); the engine keeps serving."""


class _Call:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


_STOP = object()
_WAKE = object()  # text arrived for a streaming-text stream (runtime/text_rows.py)


class Scheduler:
    """The worker thread over `max_slots` static slots (the code generator's rows)."""

    def __init__(
        self,
        codegen: CodeGenerator,
        decoder: CodecDecoder,
        *,
        max_slots: int,
        device: torch.device,
        eos_code: int,
        counters: EngineCounters,
        on_stream_end: Callable[[StreamChannel], None],
        timing: bool = True,
        graphs: StepGraphs | None = None,
        policy: AdmissionPolicy | None = None,
    ) -> None:
        self.codegen = codegen
        self.decoder = decoder
        self.max_slots = max_slots
        self.device = device
        self.eos_code = eos_code
        self.counters = counters
        self._on_stream_end = on_stream_end
        # the step call sites go through StepGraphs: CUDA graphs per row bucket, or eager (counted reasons)
        graphs = graphs or StepGraphs(codegen, decoder, max_slots=max_slots, device=device, talker=False,
                                      predictor=False, decoder_graph=False)
        self.stepper = FrameStepper(codegen, decoder, graphs, max_slots=max_slots, device=device, timing=timing)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: deque[StreamChannel] = deque()
        self.slots = SlotTable(max_slots, self._move_rows)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tts-engine-worker", daemon=True)
        self.fatal_error: BaseException | None = None
        self.policy = policy or AdmissionPolicy()
        self.capacity = max_slots  # streams running at once; measure_costs() sets the measured figure
        self.costs = StepCosts(self.stepper.graphs.rows_for)
        #: optional observer (benchmarks): called on the worker thread with (waiting, admitted) whenever streams wait
        self.on_admission: Callable[[int, int], None] | None = None
        # streaming-text streams: their text row per step; a row whose text has not come does not advance
        self.text_rows = TextRows(self.slots, codegen, counters)

    # ---- public, any thread -------------------------------------------------------------------
    def start(self) -> int | None:
        self._thread.start()
        return self._thread.native_id  # the OS thread id (engine.py lowers its priority on a CPU)

    def submit(self, channel: StreamChannel) -> None:
        self._inbox.put(channel)

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `fn` on the worker thread between two steps (model work that must not race the loop)."""
        item = _Call(fn)
        self._inbox.put(item)
        return item.future

    def wake(self) -> None:
        """Text arrived for a streaming-text stream (or one was cancelled): wake a worker that sleeps."""
        self._inbox.put(_WAKE)

    def close(self, timeout: float = 10.0) -> None:
        self._inbox.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def running_count(self) -> int:
        """Streams in the stepped rows."""
        return len(self.slots.running)

    @property
    def waiting_count(self) -> int:
        """Streaming-text streams that waited for their text at the last step."""
        return self.text_rows.waiting

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # ---- costs (before start(), on the constructing thread) ---------------------------------------------------
    def measure_costs(self, admit_probe: Callable[[list[int]], None], budget_ms: float) -> int:
        """Measure step and admission costs (runtime/costs.py) and set `capacity` from the step budget. Call before
        `start()`; rows' state is reset afterwards (slots are reset on admission)."""
        self.costs.measure(self.stepper, admit_probe, self.codegen.release, min(8, self.max_slots), self.device)
        self.capacity = capacity_from_costs(self.costs.step_ms_by_bucket, budget_ms, self.max_slots)
        return self.capacity

    # ---- worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        phases = self.counters.phases
        try:
            with torch.no_grad():  # no_grad, not inference_mode: CUDA-graph capture needs plain tensors
                while not self._stopping:
                    self._drain_inbox(self._idle_wait())
                    if self._stopping:
                        break
                    phases.start()
                    self._drop_cancelled()
                    self._admit_pending()
                    phases.lap("admit")
                    live = self.text_rows.prepare_step()  # the rows this step advances
                    phases.lap("text_rows")
                    if live is not None:
                        self._advance(live)
                        phases.lap("step")
        except BaseException as exc:  # a dead worker must never leave consumers hanging
            self.fatal_error = exc
            log.exception("engine worker died")
        finally:
            self._shutdown()

    def _idle_wait(self) -> float | None:
        """How long the worker may wait for its inbox: 0 with work to do, None (until something arrives) when no row
        can step (every running stream waits for its text) and nothing waits for admission."""
        return 0.0 if self.text_rows.poll() or self._pending else None

    def _rows_free(self) -> int:
        return min(self.capacity, self.max_slots) - len(self.slots.running)

    def _drain_inbox(self, wait: float | None) -> None:
        while True:
            try:
                item = self._inbox.get_nowait() if wait == 0.0 else self._inbox.get(timeout=wait)
            except queue.Empty:
                return
            wait = 0.0
            if item is _STOP:
                self._stopping = True
                return
            if item is _WAKE:
                continue
            if isinstance(item, _Call):
                if item.future.set_running_or_notify_cancel():
                    try:
                        item.future.set_result(item.fn())
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        item.future.set_exception(exc)
            else:
                self._pending.append(item)

    def _drop_cancelled(self) -> None:
        for slot, state in list(self.slots.running.items()):
            if state.channel.cancel_requested:
                self._end(slot, "cancelled", None)

    def _admit_pending(self) -> None:
        while self._pending and self._pending[0].cancel_requested:
            self._finish_unadmitted(self._pending.popleft(), "cancelled", None)
        if not self._pending:
            return
        waiting = len(self._pending)
        admitted = self._admit_allowed(min(self._rows_free(), self.slots.room()))
        if self.on_admission is not None:
            self.on_admission(waiting, admitted)

    def _admit_allowed(self, room: int) -> int:
        """Admit as many waiting streams as the room and the admission policy allow; returns how many."""
        if room <= 0:
            return 0
        fixed, each = self.costs.admit_ms()
        running = len(self.slots.running)
        # k admissions make the next step run running + k rows, maybe in a larger (slower) bucket
        allowed = self.policy.allowed(time.perf_counter(), (s.playout() for s in self.slots.running.values()),
                                      lambda k: self.costs.step_ms(running + k), fixed, each,
                                      min(room, len(self._pending)))
        if allowed == 0:
            self.counters.add("admissions_deferred")
            return 0
        batch: list[StreamChannel] = []
        while self._pending and len(batch) < allowed:
            channel = self._pending.popleft()
            if channel.cancel_requested:
                self._finish_unadmitted(channel, "cancelled", None)
            else:
                batch.append(channel)
        t0 = time.perf_counter()
        admitted = self._admit(batch)
        self.costs.observe_admissions(admitted, (time.perf_counter() - t0) * 1000.0)
        return admitted

    def _admit(self, channels: list[StreamChannel]) -> int:
        """Prepare each stream (host), then prefill them together into the lowest free slots; a stream whose input
        is bad fails alone. Returns how many were admitted."""
        prepared = []
        for channel in channels:
            req = channel.request
            try:
                if req.text_feed is not None:  # streaming text: the prompt holds its first token only
                    first = req.text_feed.ids_from(0)[:1]
                    if not first:
                        raise EmptyTextError()
                    prompt = self.codegen.prepare_streaming(first[0], req.speaker, req.language, req.instruct,
                                                            max_frames=req.max_frames)
                else:
                    prompt = self.codegen.prepare(req.text, req.speaker, req.language, req.instruct,
                                                  max_frames=req.max_frames)
            except TTSInputError as exc:
                self.counters.add("input_errors")
                self._finish_unadmitted(channel, "error", exc)
                continue
            except Exception as exc:  # this stream fails, the engine keeps serving
                log.exception("admission of %s failed", req.metrics.request_id)
                self._finish_unadmitted(channel, "error", EngineStepError(f"admission failed: {exc}"))
                continue
            prepared.append((channel, prompt))
        if not prepared:
            return 0
        free = self.slots.claim(len(prepared))  # n..n+k-1
        try:
            self.codegen.admit_many(free, [p for _, p in prepared], [c.request.params for c, _ in prepared])
            for slot in free:
                self.stepper.state.reset_(slot)
        except Exception as exc:  # these streams fail, the engine keeps serving
            log.exception("admission of %d stream(s) failed", len(prepared))
            for slot, (channel, _) in zip(free, prepared, strict=True):
                self._safe_release(slot)
                self._finish_unadmitted(channel, "error", EngineStepError(f"admission failed: {exc}"))
            return 0
        now = time.perf_counter()
        for slot, (channel, prompt) in zip(free, prepared, strict=True):
            req, metrics = channel.request, channel.request.metrics
            metrics.t_admitted = now
            metrics.max_frames = int(prompt.max_frames)
            metrics.status = "running"
            state = SlotState(channel, Packetizer(req.first_packet_frames, req.packet_frames), metrics.max_frames)
            TextRows.start(state, int(prompt.embeds.shape[0]), metrics.max_frames)
            self.slots.occupy(slot, state)
        return len(prepared)

    def _move_rows(self, src: int, dst: int) -> None:
        """A stream's whole per-row state from row src to the free row dst (the slot table's only way to move)."""
        t0 = time.perf_counter()
        self.codegen.move(src, dst)
        self.stepper.state.move_(src, dst)
        self.counters.add("slot_moves")
        self.counters.phases.add("moves", (time.perf_counter() - t0) * 1000.0)

    def _advance(self, live: np.ndarray) -> None:
        """One step over rows 0..n-1 (compact: `prepare_step` compacted them); the rows where `live` is false (a
        streaming-text stream waiting for its text) are left as they were and produce nothing."""
        running = self.slots.running
        n_rows = len(running)
        t0 = time.perf_counter()
        try:
            out = self.stepper.run(n_rows, live)
        except Exception as exc:  # fail these streams, keep the engine serving
            log.exception("frame step failed (rows=%d)", n_rows)
            self.counters.add("worker_errors")
            self.stepper.reset_state()
            for slot in list(running):
                self._end(slot, "error", EngineStepError(f"frame step failed: {exc}"))
            return
        self.counters.add_step(n_rows, out.codegen_ms, out.decode_ms)
        for slot, state in list(running.items()):
            if live[slot]:
                self._consume_row(slot, state, out)
        self.costs.observe_iteration(n_rows, (time.perf_counter() - t0) * 1000.0)

    def _consume_row(self, slot: int, state: SlotState, out: StepOutput) -> None:
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

    def _emit(self, slot: int, state: SlotState, pcm: np.ndarray, t_ready: float) -> bool:
        metrics = state.channel.request.metrics
        frames = pcm.shape[0] // SAMPLES_PER_FRAME
        packet = Packet(pcm=pcm, index=state.packetizer.packets_out - 1, frames=frames, t_ready=t_ready)
        if metrics.t_first_packet is None:
            metrics.t_first_packet = t_ready
        if state.t_first is None:
            state.t_first = t_ready
        state.emitted_samples += pcm.shape[0]
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
            buffered_s = samples_to_seconds(state.channel.buffered_frames * SAMPLES_PER_FRAME)
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
        """End the stream in `slot`."""
        state = self.slots.vacate(slot)
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
        except Exception:  # bookkeeping must not kill the worker
            log.exception("on_stream_end failed")
        channel.finish(error)

    def _safe_release(self, slot: int) -> None:
        try:
            self.codegen.release(slot)
        except Exception:
            log.exception("release of slot %d failed", slot)

    def _shutdown(self) -> None:
        error = EngineClosedError("the TTS engine was closed")
        if self.fatal_error is not None:
            error = EngineClosedError(f"the TTS engine worker failed: {self.fatal_error}")
        for slot in list(self.slots.running):
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
