"""A fast, deterministic stage for the real duplex path: `agent.voice.Call` (AgentSession, VoiceAgent nodes,
DuplexController, RtcAudioOutput, OmniSTT and the LLM plugin over real HTTP to `FakeOpenAIServer`) with
three scripted edges, so one schedule takes tens of milliseconds:

- `EnergyVAD`: a `livekit.agents.vad.VAD` that calls a frame speech when it is not silent (the framework's
  VAD interface: START_OF_SPEECH / INFERENCE_DONE / END_OF_SPEECH events, sample-based durations), so
  user turns and VAD barge-ins go through AgentSession's own turn detection and interruption code;
- `ScriptedMic`: an `AudioInput` playing silence, or "speech" when told, in 20 ms frames at `speed` x real time;
- `ScriptedBackend`: an `agent.engine_client.TTSBackend` with scripted packet timings and failures;
- `FastSource`: stands in for `rtc.AudioSource` behind the real RtcAudioOutput: same queue semantics
  (capture waits while the queue is full, `clear_queue`, `queued_duration`), audio plays `speed` x faster.
Hooks report milestones (speech created, LLM request/token, TTS segment/packet, frame) to one callback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import vad
from livekit.agents.voice import io

from agent.config import AgentConfig
from agent.engine_client import RemotePacket
from agent.turn.options import TurnMode, TurnOptions

MIC_RATE = 16_000
MIC_FRAME_MS = 20


# -- user side ---------------------------------------------------------------------------------
class EnergyVAD(vad.VAD):
    def __init__(self, *, min_speech_s: float = 0.02, min_silence_s: float = 0.06) -> None:
        super().__init__(capabilities=vad.VADCapabilities(update_interval=MIC_FRAME_MS / 1000))
        self.min_speech_s = min_speech_s
        self.min_silence_s = min_silence_s

    def stream(self) -> vad.VADStream:
        return _EnergyStream(self)


class _EnergyStream(vad.VADStream):
    async def _main_task(self) -> None:
        opts: EnergyVAD = self._vad
        speaking, speech_s, silence_s, samples = False, 0.0, 0.0, 0
        frames: list[rtc.AudioFrame] = []
        async for item in self._input_ch:
            if isinstance(item, vad.VADStream._FlushSentinel):
                speaking, speech_s, silence_s, frames = False, 0.0, 0.0, []
                continue
            data = np.frombuffer(item.data, dtype=np.int16)
            voiced = bool(data.size) and int(np.abs(data).max()) > 500
            dur = item.samples_per_channel / item.sample_rate
            samples += item.samples_per_channel
            if voiced:
                speech_s, silence_s = speech_s + dur, 0.0
            else:
                silence_s += dur
                if not speaking:
                    speech_s = 0.0
            if voiced or speaking:
                frames.append(item)

            def event(kind: vad.VADEventType, sp: float = speech_s, si: float = silence_s, **kw: Any) -> vad.VADEvent:
                return vad.VADEvent(type=kind, samples_index=samples, timestamp=time.time(),  # noqa: B023 - called in this iteration
                                    speech_duration=sp, silence_duration=si, **kw)

            if voiced and not speaking and speech_s >= opts.min_speech_s:
                speaking = True
                self._event_ch.send_nowait(event(vad.VADEventType.START_OF_SPEECH, frames=list(frames), speaking=True))
            self._event_ch.send_nowait(event(
                vad.VADEventType.INFERENCE_DONE, frames=[item], probability=1.0 if voiced else 0.0,
                speaking=speaking, raw_accumulated_speech=speech_s if voiced else 0.0,
                raw_accumulated_silence=silence_s))
            if speaking and silence_s >= opts.min_silence_s:
                self._event_ch.send_nowait(event(vad.VADEventType.END_OF_SPEECH, frames=frames, speaking=False))
                speaking, speech_s, frames = False, 0.0, []


class ScriptedMic(io.AudioInput):
    def __init__(self, speed: float = 4.0) -> None:
        super().__init__(label="scripted-mic")
        self.spf = MIC_RATE * MIC_FRAME_MS // 1000
        self.speed = speed
        self._pending: deque[int] = deque()  # voiced frames still to play
        self._t_next: float | None = None
        self._closed = False
        self.quiet_frames = 0  # silent frames played since the last voiced one
        t = np.arange(self.spf) / MIC_RATE
        self._voiced = (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16).tobytes()
        self._silent = bytes(self.spf * 2)

    def speak(self, seconds: float) -> None:
        self._pending.extend([1] * max(1, round(seconds * 1000 / MIC_FRAME_MS)))

    @property
    def speaking(self) -> bool:
        return bool(self._pending)

    def quiet_for(self, seconds: float) -> bool:
        """Nothing voiced is left to play and at least `seconds` of silence (audio time) went out since."""
        return not self._pending and self.quiet_frames * MIC_FRAME_MS >= seconds * 1000

    def close(self) -> None:
        self._closed = True

    async def __anext__(self) -> rtc.AudioFrame:
        if self._closed:
            raise StopAsyncIteration
        now = time.perf_counter()
        self._t_next = now if self._t_next is None else max(self._t_next, now - 0.05)
        if self._t_next > now:
            await asyncio.sleep(self._t_next - now)
        self._t_next += MIC_FRAME_MS / 1000 / self.speed
        data = self._silent
        self.quiet_frames += 1
        if self._pending:
            self._pending.popleft()
            data, self.quiet_frames = self._voiced, 0
        return rtc.AudioFrame(data, MIC_RATE, 1, self.spf)


# -- agent side ---------------------------------------------------------------------------------
class FastSource:
    """`rtc.AudioSource` semantics in wall time, with audio playing `speed` x faster than real time."""

    def __init__(self, sample_rate: int = 24_000, queue_ms: int = 100, speed: float = 8.0) -> None:
        self.sample_rate = sample_rate
        self.speed = speed
        self._cap = queue_ms / 1000 / speed
        self._until = 0.0

    @property
    def queued_duration(self) -> float:
        return max(0.0, self._until - time.perf_counter())

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        dur = frame.samples_per_channel / frame.sample_rate / self.speed
        wait = self.queued_duration + dur - self._cap
        if wait > 0:
            await asyncio.sleep(wait)
        self._until = max(self._until, time.perf_counter()) + dur

    def clear_queue(self) -> None:
        self._until = 0.0

    async def aclose(self) -> None:
        self._until = 0.0


@dataclass
class TTSPlan:
    packet_delays_s: list[float] = field(default_factory=lambda: [0.0])  # cycled, one per packet
    packets_per_segment: int = 2
    packet_samples: int = 960  # 40 ms at 24 kHz: two 20 ms frames
    fail_at_packet: int | None = None  # raise before this packet (counted over the reply's segments)


class ScriptedBackend:
    """A TTSBackend whose packets come on a scripted clock; `on_event("tts_segment" | "tts_packet")`."""

    def __init__(self, capacity: int = 8) -> None:
        self.plan = TTSPlan()
        self.on_event: Callable[[str], None] | None = None
        self._capacity = capacity
        self._active = 0
        self.packets_sent = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def active_streams(self) -> int:
        return self._active

    async def stream(self, text: str, *, speaker: str, language: str) -> AsyncIterator[RemotePacket]:
        plan = self.plan
        self._active += 1
        try:
            if self.on_event is not None:
                self.on_event("tts_segment")
            pcm = (1000 * np.sin(np.arange(plan.packet_samples) / 10)).astype(np.int16)
            for i in range(plan.packets_per_segment):
                delays = plan.packet_delays_s or [0.0]
                await asyncio.sleep(delays[self.packets_sent % len(delays)])
                if plan.fail_at_packet is not None and self.packets_sent >= plan.fail_at_packet:
                    plan.fail_at_packet = None
                    raise RuntimeError("scripted engine failure")
                self.packets_sent += 1
                if self.on_event is not None:
                    self.on_event("tts_packet")
                yield RemotePacket(pcm, i, time.perf_counter())
        finally:
            self._active -= 1

    async def aclose(self) -> None:
        return None


def fast_config(base_url: str, *, turn_handling: str = "ours", **overrides: Any) -> AgentConfig:
    """Real config, endpoints on the fake server, short timings so a schedule runs in tens of ms. `overrides` may
    name fields of AgentConfig or of its TurnOptions (agent/turn/options.py)."""
    base = AgentConfig.from_env({})
    turn: dict[str, Any] = dict(
        mode=TurnMode(turn_handling), resume_false_interruption=False, min_endpointing_s=0.0,
        interrupt_min_speech_s=0.04, eot_max_delay_s=0.05, eot_medium_delay_s=0.03, overlap_confirm_s=0.04,
        # off: its extra STT requests would take the schedule's scripted STT outcomes; the cut it makes is the
        # public AgentSession.interrupt(), which the schedules' API cuts already drive
        overlap_early_words=False,
    )
    values: dict[str, Any] = dict(
        stt_base_url=base_url, llm_base_url=base_url, aec_warmup_s=0.0, stt_timeout_s=2.0, llm_timeout_s=2.0,
        api_max_retry=0, enable_continuation=False, traces_dir="",
    )
    turn_fields = {f.name for f in dataclasses.fields(TurnOptions)}
    for name, value in overrides.items():
        (turn if name in turn_fields else values)[name] = value
    return dataclasses.replace(base, turn=dataclasses.replace(base.turn, **turn), **values)


class StarvationClock:
    """Seconds this process was kept off the CPU, seen by a thread that sleeps 50 ms at a time and notes how
    late it woke. A call stuck on its event loop (a hang, or product code blocking the loop, even in a sleep)
    leaves this thread on time; a process the host stops scheduling (an overloaded machine) makes it late too.
    The harness's "no progress" budget is counted in time the process could run (duplex_schedule.py)."""

    def __init__(self, tick_s: float = 0.05, late_s: float = 0.2) -> None:
        self._lost = 0.0
        self._tick, self._late = tick_s, late_s
        threading.Thread(target=self._run, name="starvation-clock", daemon=True).start()

    def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            time.sleep(self._tick)
            late = time.monotonic() - t0 - self._tick
            if late > self._late:
                self._lost += late

    def lost_s(self) -> float:
        return self._lost


def own_tasks(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    """Pending tasks created since `before`, leaving out the fake server's own (aiohttp web handlers)."""
    out = []
    for task in asyncio.all_tasks():
        if task in before or task.done() or task is asyncio.current_task():
            continue
        code = getattr(task.get_coro(), "cr_code", None)
        if code is not None and "/aiohttp/web" in code.co_filename:
            continue
        out.append(task)
    return out
