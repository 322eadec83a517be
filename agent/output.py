"""RtcAudioOutput: the agent's `AudioOutput`, owning the `rtc.AudioSource` that WebRTC publishes.

Why our own: the framework's room output re-chunks audio to 50 ms behind its own timer; here every
frame our `tts_node` yields (exact 20 ms, see agent/tts.py) goes straight into `AudioSource.capture_frame`
the moment it arrives. The source's small queue (`AUDIO_QUEUE_MS`, default 100 ms) paces playout in
real time: `capture_frame` returns at once while the queue has room and waits for playout after that.

Contract with the framework (`livekit.agents.voice.io.AudioOutput`):
- `capture_frame` calls `super().capture_frame` (segment counting) and `on_playback_started` on the first
  frame of a segment; `flush()` ends a segment and `on_playback_finished(interrupted=False)` fires when
  its audio has played (queued duration elapsed); `clear_buffer()` drops queued audio and reports the
  open segment as `interrupted=True`. Exactly one `on_playback_finished` per segment.
- `pause()` / `resume()` are idempotent (the framework calls pause once per VAD window); they are only
  advertised when false-interruption resume is enabled.
Contract with the DuplexController: frames carry `userdata["reply_id"]`; `silence(reply_id)` closes that
reply's gate (later frames of it are dropped, never captured) and clears the queue, returning the time;
`duck()` lowers the voice by `duck_db` from now on, the audio already queued included (the queue is cleared and
its frames captured again, lowered, in order), and `restore()` brings later frames back to full level (each
change ramps over one frame, so it does not click);
`on_frame_published` / `on_playout_finished` / `on_clear_buffer` report back, and `on_playout_gap` each time
the queue ran dry inside a segment (the next frame came late: the listener hears a gap, and WebRTC sends the
rest late, which deepens the listener's jitter buffer). `frame_observer` sees every frame actually captured
(the simulator's timestamping hook).
After a cut (`silence`, `clear_buffer`) the source sends `cut_silence_ms` of digital silence: a listener whose
packets simply stop hears WebRTC's packet-loss concealment stretch and fade the last sound for tens of ms;
silent packets end the agent's voice at once. They belong to no reply (never counted as published frames).
`on_cut(reply_id)` is called once per cut that truncated audio (a segment open or still playing out): what
WebRTC already sent (~100 ms in flight and in the listener's jitter buffer) can only be stopped by the
listener, so the call tells the page (agent/turn/cut_notice.py publishes it; web/app.js closes its playback gate).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from livekit import rtc
from livekit.agents.voice import io

from common.audio_format import SAMPLE_RATE

if TYPE_CHECKING:
    from agent.turn.reply_life import ReplyLife

logger = logging.getLogger("agent.output")


@dataclass(frozen=True)
class FrameRecord:
    t_start: float  # perf_counter when handed to the source
    t_end: float  # perf_counter when capture_frame returned (the frame is in WebRTC's queue)
    reply_id: str
    samples: int
    sample_rate: int
    t_ready: float | None  # the packet's t_ready, for the first frame of a packet

    @property
    def duration_ms(self) -> float:
        return self.samples * 1000.0 / self.sample_rate


class RtcAudioOutput(io.AudioOutput):
    def __init__(
        self,
        *,
        sample_rate: int = SAMPLE_RATE,
        queue_ms: int = 100,
        cut_silence_ms: int = 60,
        pause_capable: bool = False,
        duck_db: float = -15.0,
        source: rtc.AudioSource | None = None,
        replies: ReplyLife | None = None,
        frame_observer: Callable[[FrameRecord], None] | None = None,
        on_cut: Callable[[str | None], None] | None = None,
    ) -> None:
        super().__init__(
            label="qwen-rtc-output",
            capabilities=io.AudioOutputCapabilities(pause=pause_capable),
            sample_rate=sample_rate,
        )
        self.source = source or rtc.AudioSource(sample_rate, 1, queue_size_ms=queue_ms)
        self.replies = replies
        self.frame_observer = frame_observer
        self.on_cut = on_cut
        self._cut_told: str | None = None  # the reply whose cut was last reported (silence, then clear_buffer)
        self.frames_captured = 0
        self.frames_dropped = 0
        self.playout_gaps = 0
        self._silenced: set[str] = set()
        self._segment_open = False
        self._segment_reply: str | None = None
        self._segment_captured_s = 0.0
        self._dry_at = 0.0  # perf_counter when the queued audio runs out if no frame follows
        self._finish_tasks: list[tuple[asyncio.Task[None], str | None, float]] = []
        self._resumed = asyncio.Event()
        self._resumed.set()
        self.cut_silence_ms = cut_silence_ms
        # the rtc.AudioSource refuses a capture while another is in flight (RtcError InvalidState), and one is
        # still in flight after the task awaiting it was cancelled (a cut): `_capture` makes them take turns
        self._capture_lock = asyncio.Lock()
        self._inflight: asyncio.Future[None] | None = None
        self._inflight_frame: rtc.AudioFrame | None = None
        self._silence_tail: asyncio.Task[None] | None = None
        # ducking: the gain later frames get, the gain the last frame got (a change ramps from it), the frames
        # now in the source's queue at full level (so a duck can capture them again, lowered)
        self.duck_gain = 10 ** (duck_db / 20)
        self._gain = self._last_gain = 1.0
        self._queued: deque[rtc.AudioFrame] = deque(maxlen=max(2, queue_ms // 10))
        self._reduck: asyncio.Task[None] | None = None

    async def warmup(self) -> None:
        """Exercise the FFI capture path once on a private source (never published): the first capture in
        a process costs ~10 ms of one-time setup, which must not land on the first reply."""
        scratch = rtc.AudioSource(self.source.sample_rate, 1, queue_size_ms=100)
        try:
            spf = self.source.sample_rate // 50
            await scratch.capture_frame(rtc.AudioFrame(bytes(spf * 2), self.source.sample_rate, 1, spf))
            scratch.clear_queue()
        finally:
            await scratch.aclose()

    # -- DuplexController side ---------------------------------------------------------------
    def silence(self, reply_id: str) -> float:
        self._silenced.add(reply_id)
        self._drop_queue()
        t = time.perf_counter()
        self._end_with_silence()
        self._tell_cut(reply_id)
        return t

    def duck(self) -> float:
        """Lower the agent's voice: later frames, and the queued ones (captured again, lowered)."""
        t = time.perf_counter()
        if self._gain != 1.0:
            return t
        self._gain = self.duck_gain
        if self._reduck is None or self._reduck.done():
            with contextlib.suppress(RuntimeError):  # no loop (closing): nothing is playing either
                self._reduck = asyncio.get_running_loop().create_task(self._lower_queued())
        return t

    def restore(self) -> float:
        """Back to full level from the next frame on (what is queued plays out lowered: <= the queue's length)."""
        self._gain = 1.0
        return time.perf_counter()

    async def _lower_queued(self) -> None:
        """Capture again, lowered and in order, what the source still holds (the frame in flight last)."""
        async with self._capture_lock:
            spf = self.source.sample_rate // 50
            waiting = round(self.source.queued_duration * self.source.sample_rate / spf)
            frames = list(self._queued)[-waiting:] if waiting > 0 else []
            self.source.clear_queue()
            inflight = self._inflight
            if inflight is not None and not inflight.done() and self._inflight_frame is not None:
                await asyncio.wait([inflight])  # the queue has room now: it lands at once; take it out again
                self.source.clear_queue()
                frames.append(self._inflight_frame)
            self._queued.clear()
            for frame in frames:
                if self._allowed(str(frame.userdata.get("reply_id", ""))):  # not cut meanwhile
                    await self._capture_unlocked(frame)

    def _scaled(self, frame: rtc.AudioFrame) -> rtc.AudioFrame:
        """`frame` at the current gain, ramped from the last frame's gain."""
        start, end = self._last_gain, self._gain
        self._last_gain = end
        if start == end == 1.0:
            return frame
        pcm = np.frombuffer(frame.data, dtype=np.int16).astype(np.float32)
        gain = np.linspace(start, end, len(pcm), dtype=np.float32) if start != end else end
        out = np.clip(pcm * gain, -32768, 32767).astype(np.int16)
        scaled = rtc.AudioFrame(out.tobytes(), frame.sample_rate, frame.num_channels, frame.samples_per_channel)
        scaled.userdata.update(frame.userdata)
        return scaled

    def _drop_queue(self) -> None:
        """A cut: the queued audio goes, and so does any duck (the next answer starts at full level)."""
        self.source.clear_queue()
        self._queued.clear()
        self._gain = self._last_gain = 1.0

    def _tell_cut(self, reply_id: str | None) -> None:
        """Report a cut that truncated audio, once per reply (the controller's silence and the framework's
        clear_buffer both cut the same reply)."""
        playing = self._segment_open or bool(self._finish_tasks)
        if self.on_cut is None or not playing or (reply_id is not None and reply_id == self._cut_told):
            return
        self._cut_told = reply_id
        try:
            self.on_cut(reply_id)
        except Exception:  # telling the listener is best effort; the cut itself is done
            logger.exception("on_cut failed [reply %s]", reply_id)

    def _end_with_silence(self) -> None:
        if self.cut_silence_ms <= 0 or (self._silence_tail is not None and not self._silence_tail.done()):
            return
        try:
            self._silence_tail = asyncio.get_running_loop().create_task(self._send_silence())
        except RuntimeError:  # no loop (closing): nothing is playing either
            self._silence_tail = None

    async def _send_silence(self) -> None:
        rate = self.source.sample_rate
        spf = rate // 50
        captured = self.frames_captured
        for _ in range(max(1, self.cut_silence_ms // 20)):
            if self.frames_captured != captured:  # the next reply already speaks: its own audio follows
                return
            await self._capture(rtc.AudioFrame(bytes(spf * 2), rate, 1, spf))

    async def _capture(self, frame: rtc.AudioFrame) -> float:
        """Capture into the source, one at a time even across cancelled callers; returns the start time."""
        async with self._capture_lock:
            return await self._capture_unlocked(frame)

    async def _capture_unlocked(self, frame: rtc.AudioFrame) -> float:
        prev = self._inflight
        if prev is not None and not prev.done():
            await asyncio.wait([prev])  # the source finishes it whether or not anyone awaits it
        t_start = time.perf_counter()
        fut = asyncio.ensure_future(self.source.capture_frame(self._scaled(frame)))
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, never "never retrieved"
        self._inflight, self._inflight_frame = fut, frame
        await asyncio.shield(fut)
        self._queued.append(frame)
        return t_start

    def _allowed(self, reply_id: str) -> bool:
        """The reply's gate is open: not silenced, and its speech not interrupted (the controller reads the
        speech's own flag, so a frame racing the interruption's notification is dropped too)."""
        if reply_id in self._silenced:
            return False
        return self.replies is None or not reply_id or self.replies.frame_allowed(reply_id)

    # -- framework side ----------------------------------------------------------------------
    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        reply_id = str(frame.userdata.get("reply_id", ""))
        if not self._allowed(reply_id):
            self.frames_dropped += 1
            return
        await super().capture_frame(frame)
        if self._segment_open:
            self._check_gap(reply_id)
        else:
            self._segment_open = True
            self._segment_reply = reply_id or None
            self._segment_captured_s = 0.0
            self.on_playback_started(created_at=time.time())
        if not self._resumed.is_set():
            await self._resumed.wait()
            if not self._allowed(reply_id):
                self.frames_dropped += 1
                return
        t_start = await self._capture(frame)
        t_end = time.perf_counter()
        self._dry_at = t_end + self.source.queued_duration
        if not self._allowed(reply_id):
            # cut while this capture was in flight: clear it out of the queue; it never plays, so it is
            # not published (and not counted as a stale frame: it started before the cut)
            self.source.clear_queue()
            self.frames_dropped += 1
            return
        self.frames_captured += 1
        self._segment_captured_s += frame.samples_per_channel / frame.sample_rate
        if self.frame_observer is not None:
            t_ready = frame.userdata.get("t_ready")
            self.frame_observer(
                FrameRecord(t_start, t_end, reply_id, frame.samples_per_channel, frame.sample_rate, t_ready)
            )
        if self.replies is not None and reply_id:
            self.replies.on_frame_published(reply_id, t_end)

    def _check_gap(self, reply_id: str) -> None:
        gap = time.perf_counter() - self._dry_at
        if gap > 0.001 and self.source.queued_duration == 0:
            self.playout_gaps += 1
            if self.replies is not None and reply_id:
                self.replies.on_playout_gap(reply_id, gap)

    def flush(self) -> None:
        super().flush()
        if not self._segment_open:
            return
        self._segment_open = False
        remaining = self.source.queued_duration
        task = asyncio.ensure_future(asyncio.sleep(remaining))
        entry = (task, self._segment_reply, self._segment_captured_s)
        self._finish_tasks.append(entry)
        task.add_done_callback(functools.partial(self._segment_played, entry))

    def _segment_played(self, entry: tuple[asyncio.Task[None], str | None, float], task: asyncio.Task[None]) -> None:
        if entry not in self._finish_tasks or task.cancelled():
            return
        self._finish_tasks.remove(entry)
        _, reply_id, captured = entry
        self.on_playback_finished(playback_position=captured, interrupted=False)
        if self.replies is not None and reply_id:
            self.replies.on_playout_finished(reply_id, interrupted=False)

    def clear_buffer(self) -> None:
        queued = self.source.queued_duration
        reply_id = self._segment_reply if self._segment_open else None
        if reply_id is None and self._finish_tasks:
            reply_id = self._finish_tasks[-1][1]
        if self.replies is not None:
            self.replies.on_clear_buffer(reply_id)
        self._drop_queue()
        self._end_with_silence()
        self._tell_cut(reply_id)
        finished: list[tuple[str | None, float]] = []
        for task, rid, captured in self._finish_tasks:
            task.cancel()
            finished.append((rid, max(0.0, captured - queued)))
        self._finish_tasks.clear()
        if self._segment_open:
            super().flush()
            self._segment_open = False
            finished.append((self._segment_reply, max(0.0, self._segment_captured_s - queued)))
        for rid, position in finished:
            self.on_playback_finished(playback_position=position, interrupted=True)
            if self.replies is not None and rid:
                self.replies.on_playout_finished(rid, interrupted=True)

    def pause(self) -> None:
        if self._resumed.is_set():
            self._resumed.clear()
        super().pause()

    def resume(self) -> None:
        if not self._resumed.is_set():
            self._resumed.set()
        super().resume()

    async def aclose(self) -> None:
        for task, _, _ in self._finish_tasks:
            task.cancel()
        if self._silence_tail is not None:
            self._silence_tail.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._silence_tail
        with contextlib.suppress(Exception):
            await self.source.aclose()
