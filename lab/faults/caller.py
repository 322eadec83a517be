"""FaultCaller: callbench's SDK caller (lab/callbench/rtc_caller.py) that follows agents coming and going.

Contract: as `RtcCaller`, plus, with one monotonic clock (`time.monotonic()`):
- `agents[identity]`: when each agent joined and left (`AgentSeen`); `agent_identity` is the newest agent;
- `heard[identity]`: when its audio was first and last heard above `HEARD_RMS` (what a person would hear), and
  where the current run of it began (`onset`: a gap over `GAP_S` starts a new one);
- `disconnected`: set when this caller's own room connection ended, with LiveKit's reason in `disconnect_reason`;
- `events`: (time, what) of each of the above, the SDK's `reconnecting` / `reconnected`, each onset of an agent's
  audio and each transcript; `on_event(t, what)` is called with each as it happens (the namespaced caller prints them).
- `FaultCaller.connect(url, token, wav)`: as `join`, with a token obtained elsewhere (a caller in a network
  namespace cannot reach the token server on this host's loopback).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from livekit import rtc

from lab.callbench.rtc_caller import RtcCaller

HEARD_RMS = 0.01  # about -40 dBFS: the random-weight voice is far above it, the silence between turns far below
GAP_S = 0.5


@dataclass
class AgentSeen:
    joined: float
    left: float | None = None


@dataclass
class Heard:
    first: float
    last: float
    onset: float


class FaultCaller(RtcCaller):
    def __init__(self, room: rtc.Room, wav) -> None:
        super().__init__(room, wav)
        self.agents: dict[str, AgentSeen] = {}
        self.heard: dict[str, Heard] = {}
        self.disconnected = asyncio.Event()
        self.disconnect_reason = ""
        self.events: list[tuple[float, str]] = []  # (time, what) for the report
        self.on_event: Callable[[float, str], None] | None = None

    @classmethod
    async def connect(cls, url: str, token: str, wav: Path) -> FaultCaller:
        caller = cls(rtc.Room(), wav)
        caller._wire()
        await caller.room.connect(url, token)
        for p in caller.room.remote_participants.values():
            caller._see(p)
        source = rtc.AudioSource(48_000, 1)
        track = rtc.LocalAudioTrack.create_audio_track("mic", source)
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        await caller.room.local_participant.publish_track(track, options)
        caller._spawn(caller._speak(source))
        return caller

    def note(self, what: str, t: float | None = None) -> None:
        t = time.monotonic() if t is None else t
        self.events.append((t, what))
        if self.on_event is not None:
            self.on_event(t, what)

    def _see(self, participant: rtc.RemoteParticipant) -> None:
        if participant.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT or participant.identity in self.agents:
            return
        now = time.monotonic()
        self.agents[participant.identity] = AgentSeen(now)
        self.note(f"agent joined: {participant.identity}", now)
        self.agent_identity = participant.identity  # the newest agent is the one that talks
        self.agent_state = participant.attributes.get("lk.agent.state", "")
        self.agent_joined.set()

    def _wire(self) -> None:
        super()._wire()
        room = self.room

        @room.on("participant_disconnected")
        def _gone(p: rtc.RemoteParticipant) -> None:
            seen = self.agents.get(p.identity)
            if seen is not None and seen.left is None:
                seen.left = time.monotonic()
                self.note(f"agent left: {p.identity}", seen.left)

        @room.on("disconnected")
        def _disconnected(reason: rtc.DisconnectReason.ValueType) -> None:
            self.disconnect_reason = rtc.DisconnectReason.Name(reason)
            self.note(f"disconnected: {self.disconnect_reason}")
            self.disconnected.set()

        for name in ("reconnecting", "reconnected"):
            room.on(name, lambda *_a, n=name: self.note(n))

        async def _text(reader: rtc.TextStreamReader, identity: str) -> None:
            text = await reader.read_all()
            self.transcripts.append((identity, text))
            self.note(f"transcript: {identity}: {text}")

        # replaces RtcCaller's handler: a stream cut by a dead agent ends here, not as an unretrieved task error
        room.unregister_text_stream_handler("lk.transcription")
        room.register_text_stream_handler("lk.transcription", lambda r, i: self._spawn(self._quietly(_text(r, i))))

    async def _listen(self, track: rtc.Track) -> None:
        identity = self.agent_identity or ""
        async for ev in rtc.AudioStream(track):
            pcm = np.frombuffer(ev.frame.data, dtype=np.int16).astype(np.float32) / 32768.0
            if not pcm.size:
                continue
            rms = float(np.sqrt((pcm**2).mean()))
            self.agent_peak = max(self.agent_peak, rms)
            if rms > HEARD_RMS:
                now = time.monotonic()
                heard = self.heard.get(identity)
                if heard is None:
                    self.heard[identity] = Heard(now, now, now)
                    self.note(f"heard: {identity}", now)
                else:
                    if now - heard.last > GAP_S:
                        heard.onset = now
                        self.note(f"heard: {identity}", now)
                    heard.last = now

    @staticmethod
    async def _quietly(coro) -> None:
        try:
            await coro
        except rtc.data_stream.StreamError:  # the sender left in the middle (a killed agent)
            pass

    def heard_after(self, t: float, *, exclude: str = "") -> float | None:
        """The first time an agent other than `exclude` was heard after `t` (None: not yet)."""
        times = [h.first for who, h in self.heard.items() if who != exclude and h.first >= t]
        return min(times) if times else None

    async def wait_speaking(self, timeout: float, *, for_s: float = 0.5) -> str:
        """Wait until the current agent has been heard for `for_s` (mid-reply); returns its identity."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            who = self.agent_identity or ""
            heard = self.heard.get(who)
            if heard is not None and heard.last - heard.onset >= for_s and time.monotonic() - heard.last < 0.2:
                return who
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the agent was not heard speaking within {timeout:.0f}s")
