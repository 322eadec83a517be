"""RtcCaller: a light caller, the LiveKit Python SDK publishing a WAV as its microphone.

Contract: `await RtcCaller.join(token_server_url, room, wav)` gets a token from the token server (so the
room's agent dispatch is the one the page gets), connects, publishes the WAV in real time (looped, 10 ms
frames) and records what the agent does: `agent_identity` once an agent joined, `agent_track` once its
audio track is subscribed, its `agent_state` (`lk.agent.state`), `agent_left` when it left, the loudest
agent audio level seen (`agent_peak`), and the transcripts. `aclose()` disconnects.
"""

from __future__ import annotations

import asyncio
import json
import time
import wave
from pathlib import Path

import aiohttp
import numpy as np
from livekit import rtc

from lab.callbench.speech import RATE

FRAME = RATE // 100


class RtcCaller:
    def __init__(self, room: rtc.Room, wav: Path) -> None:
        self.room = room
        self.agent_identity: str | None = None
        self.agent_left = asyncio.Event()
        self.agent_joined = asyncio.Event()
        self.agent_track = asyncio.Event()
        self.agent_state = ""
        self.agent_peak = 0.0
        self.transcripts: list[tuple[str, str]] = []
        with wave.open(str(wav)) as w:
            if w.getframerate() != RATE or w.getnchannels() != 1:
                raise ValueError(f"{wav}: expected 48 kHz mono (lab.callbench.speech writes that)")
            self._pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    async def join(cls, token_server_url: str, room_name: str, wav: Path) -> RtcCaller:
        async with aiohttp.ClientSession() as http:
            resp = await http.post(f"{token_server_url.rstrip('/')}/api/token", json={"room": room_name})
            resp.raise_for_status()
            grant = await resp.json()
        caller = cls(rtc.Room(), wav)
        caller._wire()
        await caller.room.connect(grant["url"], grant["token"])
        for p in caller.room.remote_participants.values():
            caller._see(p)
        source = rtc.AudioSource(RATE, 1)
        track = rtc.LocalAudioTrack.create_audio_track("mic", source)
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        await caller.room.local_participant.publish_track(track, options)
        caller._spawn(caller._speak(source))
        return caller

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _see(self, participant: rtc.RemoteParticipant) -> None:
        if participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT and self.agent_identity is None:
            self.agent_identity = participant.identity
            self.agent_state = participant.attributes.get("lk.agent.state", "")
            self.agent_joined.set()

    def _wire(self) -> None:
        room = self.room

        @room.on("participant_connected")
        def _joined(p: rtc.RemoteParticipant) -> None:
            self._see(p)

        @room.on("participant_disconnected")
        def _left(p: rtc.RemoteParticipant) -> None:
            if p.identity == self.agent_identity:
                self.agent_left.set()

        @room.on("track_subscribed")
        def _track(track: rtc.Track, _pub: rtc.RemoteTrackPublication, p: rtc.RemoteParticipant) -> None:
            if track.kind == rtc.TrackKind.KIND_AUDIO and p.identity == self.agent_identity:
                self.agent_track.set()
                self._spawn(self._listen(track))

        @room.on("participant_attributes_changed")
        def _attributes(changed: dict[str, str], p: rtc.Participant) -> None:
            if p.identity == self.agent_identity and "lk.agent.state" in changed:
                self.agent_state = changed["lk.agent.state"]

        async def _text(reader: rtc.TextStreamReader, identity: str) -> None:
            self.transcripts.append((identity, await reader.read_all()))

        room.register_text_stream_handler("lk.transcription", lambda r, i: self._spawn(_text(r, i)))

    async def _listen(self, track: rtc.Track) -> None:
        async for ev in rtc.AudioStream(track):
            pcm = np.frombuffer(ev.frame.data, dtype=np.int16).astype(np.float32) / 32768.0
            if pcm.size:
                self.agent_peak = max(self.agent_peak, float(np.sqrt((pcm**2).mean())))

    async def _speak(self, source: rtc.AudioSource) -> None:
        pcm = self._pcm
        while True:
            for i in range(0, len(pcm) - FRAME + 1, FRAME):
                await source.capture_frame(rtc.AudioFrame(pcm[i : i + FRAME].tobytes(), RATE, 1, FRAME))

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.room.disconnect()


def worker_info(health_port: int) -> dict:
    """LiveKit Agents' GET /worker of the worker whose health server listens on `health_port`
    (`active_jobs`, `worker_load`: the load it last reported to the LiveKit server)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/worker", timeout=3) as resp:
        return json.loads(resp.read())


def worker_jobs(health_port: int) -> int:
    return int(worker_info(health_port).get("active_jobs", 0))


def until_no_jobs(health_port: int, timeout: float = 30.0) -> int:
    """Block until the worker on `health_port` runs no job, at most `timeout` s; the jobs still running (0 = idle)."""
    deadline = time.monotonic() + timeout
    while (jobs := worker_jobs(health_port)) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    return jobs


async def wait_for_jobs(health_port: int, want: int, timeout: float = 60.0) -> None:
    """Until the worker on `health_port` runs exactly `want` jobs; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (jobs := await asyncio.to_thread(worker_jobs, health_port)) != want:
        if time.monotonic() > deadline:
            raise AssertionError(f"worker on :{health_port} has {jobs} active jobs, expected {want}")
        await asyncio.sleep(0.5)
