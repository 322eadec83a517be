"""ScriptedCaller: a LiveKit Python SDK caller that talks in real time and records everything it hears.

Contract
- `await ScriptedCaller.join(token_server_url, room)` takes a token from the token server (the dispatch the page
  gets), connects, publishes a microphone track and starts hearing the agent; `await caller.ready(timeout)`
  returns once the agent is in the room, its audio track is subscribed and its state is `listening`.
- The microphone: every 10 ms the process's `Pacer` captures one frame of each caller into its `rtc.AudioSource`
  (no queue: the frame goes to WebRTC as it is captured): the current clip's next frame, or silence.
  `await caller.play(pcm, marks)` plays samples from the next frame on and returns, once the last frame is
  captured, the capture time (Unix s) of each marked sample: its frame's capture time plus its place in it.
  The pacer's schedule is absolute (a late frame is followed by the next one at once) and every frame's lateness
  is recorded, as is the loop's lag, so a caller that falls behind shows in its own numbers.
- Heard: every agent audio frame (48 kHz mono, 10 ms) with its arrival time and level (`activity` follows it
  live), the agent's `lk.agent.state` changes, every `lk.transcription` stream, and the agent track's
  inbound-rtp stats once a second. `record_into(timeline)` hands them over; `aclose()` leaves.
Many callers share one process's pacer (`Pacer.shared()`): one timer for all, in each its own room.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Sequence
from typing import Any

import aiohttp
import numpy as np
from livekit import rtc

from common.percentiles import percentiles
from lab.convbench.activity import DEFAULT_THRESHOLDS, AgentActivity, Thresholds
from lab.convbench.audio import FRAME, RATE
from lab.convbench.timeline import Timeline

AGENT_STATE = "lk.agent.state"
RTC_STATS_EVERY_S = 1.0
_SILENCE = np.zeros(FRAME, dtype=np.int16)


class Pacer:
    """One 10 ms clock per event loop: each tick every registered caller captures its next frame."""

    _shared: dict[int, Pacer] = {}

    def __init__(self) -> None:
        self.callers: list[ScriptedCaller] = []
        self.lateness_ms = array("f")  # per tick: how late it ran against the absolute schedule
        self.loop_lag_ms = array("f")  # per 10 ms probe: how late the loop woke a 10 ms sleep
        self._tasks: list[asyncio.Task] = []

    @classmethod
    def shared(cls) -> Pacer:
        loop = asyncio.get_running_loop()
        pacer = cls._shared.get(id(loop))
        if pacer is None or not pacer._tasks or pacer._tasks[0].done():
            pacer = cls._shared[id(loop)] = cls()
        return pacer

    def add(self, caller: ScriptedCaller) -> None:
        self.callers.append(caller)
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._run()), asyncio.ensure_future(self._probe())]

    def remove(self, caller: ScriptedCaller) -> None:
        if caller in self.callers:
            self.callers.remove(caller)

    async def _run(self) -> None:
        start, tick = time.perf_counter(), 0
        while True:
            due = start + tick * 0.01
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            late = time.perf_counter() - due
            self.lateness_ms.append(late * 1000.0)
            if late > 1.0:  # a stall of over a second: start a new schedule rather than send a burst
                start, tick = time.perf_counter(), 0
            wall = time.time()
            callers = list(self.callers)
            if callers:
                await asyncio.gather(*(c._capture(wall) for c in callers), return_exceptions=True)
            tick += 1

    async def _probe(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            self.loop_lag_ms.append((time.perf_counter() - before - 0.01) * 1000.0)

    def health(self) -> dict[str, Any]:
        late, lag = list(self.lateness_ms), list(self.loop_lag_ms)
        return {
            "frames": len(late),
            "publish_late_ms": {**percentiles(late, (50, 99), 2), "max": round(max(late), 2) if late else None},
            "publish_late_over_20ms": sum(x > 20.0 for x in late),
            "loop_lag_ms": {**percentiles(lag, (50, 99), 2), "max": round(max(lag), 2) if lag else None},
        }


class _Playing:
    def __init__(self, pcm: np.ndarray, marks: Sequence[int]) -> None:
        n = -(-len(pcm) // FRAME) * FRAME
        self.pcm = np.zeros(n, dtype=np.int16)
        self.pcm[: len(pcm)] = pcm
        self.marks = list(marks)
        self.stamps: list[float | None] = [None] * len(self.marks)
        self.pos = 0
        self.done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()

    def next_frame(self, wall: float) -> np.ndarray:
        lo = self.pos
        for i, mark in enumerate(self.marks):
            if lo <= mark < lo + FRAME:
                self.stamps[i] = wall + (mark - lo) / RATE
        self.pos += FRAME
        return self.pcm[lo : self.pos]


class ScriptedCaller:
    def __init__(self, room: rtc.Room, pacer: Pacer, thresholds: Thresholds) -> None:
        self.room = room
        self.pacer = pacer
        self.activity = AgentActivity(thresholds)
        self.agent_identity: str | None = None
        self.agent_state = ""
        self.agent_joined = asyncio.Event()
        self.agent_left = asyncio.Event()
        self.agent_track: rtc.Track | None = None
        self.track_subscribed = asyncio.Event()
        self.agent_t, self.agent_db = array("d"), array("f")
        self.states: list[tuple[float, str]] = []
        self.transcripts: list[dict[str, Any]] = []
        self.rtc: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._source = rtc.AudioSource(RATE, 1, queue_size_ms=0)
        self._queue: list[_Playing] = []
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    async def join(
        cls, token_server_url: str, room_name: str, *, pacer: Pacer | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS, identity: str | None = None,
    ) -> ScriptedCaller:  # fmt: skip
        body = {"room": room_name, **({"name": identity} if identity else {})}
        async with aiohttp.ClientSession() as http:
            resp = await http.post(f"{token_server_url.rstrip('/')}/api/token", json=body)
            if resp.status != 200:
                raise RuntimeError(f"token server answered {resp.status}: {await resp.text()}")
            grant = await resp.json()
        caller = cls(rtc.Room(), pacer or Pacer.shared(), thresholds)
        caller._wire()
        await caller.room.connect(grant["url"], grant["token"])
        for participant in caller.room.remote_participants.values():
            caller._see(participant)
            for pub in participant.track_publications.values():
                if pub.track is not None:
                    caller._subscribed(pub.track, participant)
        track = rtc.LocalAudioTrack.create_audio_track("microphone", caller._source)
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        await caller.room.local_participant.publish_track(track, options)
        caller.pacer.add(caller)
        return caller

    @property
    def identity(self) -> str:
        return self.room.local_participant.identity

    def now(self) -> float:
        return time.time()

    async def ready(self, timeout: float = 60.0) -> None:
        async def _wait() -> None:
            await self.agent_joined.wait()
            await self.track_subscribed.wait()
            while self.agent_state != "listening":
                await asyncio.sleep(0.05)

        await asyncio.wait_for(_wait(), timeout)

    async def play(self, pcm: np.ndarray, marks: Sequence[int] = ()) -> list[float]:
        playing = _Playing(pcm, marks)
        self._queue.append(playing)
        return await playing.done

    async def _capture(self, wall: float) -> None:
        frame = _SILENCE
        if self._queue:
            playing = self._queue[0]
            frame = playing.next_frame(wall)
            if playing.pos >= len(playing.pcm):
                self._queue.pop(0)
                if not playing.done.done():
                    playing.done.set_result([s if s is not None else wall for s in playing.stamps])
        await self._source.capture_frame(rtc.AudioFrame(frame.tobytes(), RATE, 1, FRAME))

    # -- what the caller hears ----------------------------------------------------------------------------------
    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _see(self, participant: rtc.RemoteParticipant) -> None:
        if participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT and self.agent_identity is None:
            self.agent_identity = participant.identity
            self._set_state(participant.attributes.get(AGENT_STATE, ""))
            self.agent_joined.set()

    def _set_state(self, state: str) -> None:
        if state and state != self.agent_state:
            self.agent_state = state
            self.states.append((time.time(), state))

    def _subscribed(self, track: rtc.Track, participant: rtc.RemoteParticipant) -> None:
        if track.kind == rtc.TrackKind.KIND_AUDIO and participant.identity == self.agent_identity:
            if self.agent_track is None:
                self.agent_track = track
                self.track_subscribed.set()
                self._spawn(self._hear(track))
                self._spawn(self._sample_rtc(track))

    def _wire(self) -> None:
        room = self.room
        room.on("participant_connected", self._see)
        room.on("track_subscribed", lambda track, _pub, p: self._subscribed(track, p))

        @room.on("participant_disconnected")
        def _left(p: rtc.RemoteParticipant) -> None:
            if p.identity == self.agent_identity:
                self.agent_left.set()

        @room.on("participant_attributes_changed")
        def _attributes(changed: dict[str, str], p: rtc.Participant) -> None:
            if p.identity == self.agent_identity and AGENT_STATE in changed:
                self._set_state(changed[AGENT_STATE])

        async def _text(reader: rtc.TextStreamReader, identity: str) -> None:
            first, text = None, ""
            async for chunk in reader:
                first = first or time.time()
                text += chunk
            attributes = reader.info.attributes or {}
            who = "agent" if identity == self.agent_identity else "user" if identity == self.identity else identity
            self.transcripts.append({
                "t": first or time.time(), "t_end": time.time(), "who": who,
                "text": text, "final": attributes.get("lk.transcription_final") == "true",
                "segment": attributes.get("lk.segment_id", ""),
            })  # fmt: skip

        room.register_text_stream_handler("lk.transcription", lambda r, i: self._spawn(_text(r, i)))

    async def _hear(self, track: rtc.Track) -> None:
        stream = rtc.AudioStream(track, sample_rate=RATE, num_channels=1, frame_size_ms=10)
        try:
            async for ev in stream:
                t = time.time()
                x = np.frombuffer(ev.frame.data, dtype=np.int16).astype(np.float32)
                power = float(np.mean(x * x)) / (32768.0 * 32768.0) if x.size else 0.0
                db = 10.0 * np.log10(power) if power > 0 else -200.0
                self.agent_t.append(t)
                self.agent_db.append(db)
                self.activity.update(t, db)
        finally:
            await stream.aclose()

    async def _sample_rtc(self, track: rtc.Track) -> None:
        while True:
            await asyncio.sleep(RTC_STATS_EVERY_S)
            try:
                stats = await track.get_stats()
            except Exception as exc:  # noqa: BLE001 -- a stats failure must not end the call; it is recorded
                self.errors.append(f"get_stats: {exc}")
                continue
            for s in stats:
                if s.HasField("inbound_rtp"):
                    inbound, received = s.inbound_rtp.inbound, s.inbound_rtp.received
                    self.rtc.append({
                        "t": time.time(),
                        "concealed_samples": inbound.concealed_samples,
                        "silent_concealed_samples": inbound.silent_concealed_samples,
                        "concealment_events": inbound.concealment_events,
                        "total_samples_received": inbound.total_samples_received,
                        "jitter_buffer_delay": inbound.jitter_buffer_delay,
                        "jitter_buffer_emitted_count": inbound.jitter_buffer_emitted_count,
                        "packets_lost": received.packets_lost,
                    })  # fmt: skip
                    break

    def record_into(self, tl: Timeline) -> Timeline:
        """Hand what was heard over to `tl` (the conductor fills its items and plays)."""
        tl.agent_t, tl.agent_db = list(self.agent_t), list(self.agent_db)
        tl.states, tl.rtc = list(self.states), list(self.rtc)
        tl.transcripts = sorted(self.transcripts, key=lambda r: r["t"])
        tl.errors += self.errors
        tl.caller = self.pacer.health()
        return tl

    async def aclose(self) -> None:
        self.pacer.remove(self)
        for playing in self._queue:
            if not playing.done.done():
                playing.done.cancel()
        self._queue.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.room.disconnect()
        await self._source.aclose()
