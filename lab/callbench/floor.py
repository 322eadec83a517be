"""The transport floor: what the browser measures when the agent takes no time at all.

`python -m lab.callbench.floor --cycles 20 --out DIR` runs only LiveKit's server and the token server
(the page), joins the real page in Chromium with a WAV of spoken phrases as its microphone, and puts an
`EchoAgent` in the room in place of the worker: a LiveKit Python SDK participant of kind agent (so the page
treats it as the agent) that detects the user's speech with the page's own energy VAD rules (-50 dBFS, 60 ms
to start, the same hangover to end) on the audio it receives, answers each end of speech at once with a spoken
sentence (over a quiet noise bed, so that it never pauses, like the worker's voice: `gapless_reply`) published
the way the worker publishes (24 kHz `rtc.AudioSource`, 100 ms queue, 20 ms frames), and on a new onset while
it speaks clears its queue, sends 60 ms of silence and a cut notice to the page (the worker's barge-in cut).
It publishes its agent state (`lk.agent.state` speaking / listening) as the worker's session does: the page's
playback gate, closed by a cut, opens on "speaking". No model, no VAD model, no framework.

So the browser's `response` here is pure transport + WebRTC buffering + the browser's playout: the floor
under callbench's `overhead` (which is the same browser figure minus model times), and its barge-in
decision -> silence is the floor under callbench's. Per turn it is split at the echo's own clock: uplink
(the browser's end of speech -> the echo's, same VAD rules on both ends) and downlink (first answer frame into
the AudioSource -> heard). Writes DIR/floor.json and DIR/floor.md; exit 0 when every cycle was measured and
the page saw the echo's state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
from livekit import api, rtc

from agent.turn.cut_notice import CutNotice
from common.audio_format import SAMPLE_RATE
from lab.callbench.bench import HANGOVER_MS, column_summary, device, receiver_stats, versions
from lab.callbench.browser import BrowserCall
from lab.callbench.speech import RATE, speak
from lab.callbench.stack import LocalStack

PHRASES = ["Hello there, can you hear me?", "Tell me more about it.", "Wait a second please."]
REPLY = "Sure, I can hear you well, and I will keep on talking about the weather until you stop me."
TURN_COLUMNS = ("response_ms", "uplink_end_lag_ms", "echo_decision_ms", "publish_to_heard_ms")
BARGE_COLUMNS = ("onset_to_silence_ms", "onset_to_cut_ms", "cut_to_silence_ms")
OUT_RATE = SAMPLE_RATE  # the worker's RtcAudioOutput rate (the TTS audio format), queue and frame size
OUT_FRAME = OUT_RATE // 50
ECHO_STATES = ("speaking", "listening")  # what the echo publishes as lk.agent.state, as the worker's session does


class EnergyVad:
    """web/stats.js's EnergyVad on 10 ms frames: start after `min_speech_ms` loud, end `hangover_ms` after the
    last loud frame."""

    def __init__(
        self, threshold_db: float = -50.0, min_speech_ms: float = 60.0, hangover_ms: float = HANGOVER_MS
    ) -> None:
        self.threshold_db, self.min_speech_ms, self.hangover_ms = threshold_db, min_speech_ms, hangover_ms
        self.state, self.onset_t, self.last_voice_t = "silent", 0.0, 0.0

    def update(self, level_db: float, t_ms: float) -> str | None:
        loud = level_db >= self.threshold_db
        if self.state == "silent":
            if loud:
                self.state, self.onset_t, self.last_voice_t = "onset", t_ms, t_ms
            return None
        if self.state == "onset":
            if not loud:
                self.state = "silent"
                return None
            self.last_voice_t = t_ms
            if t_ms - self.onset_t >= self.min_speech_ms:
                self.state = "speech"
                return "speech_start"
            return None
        if loud:
            self.last_voice_t = t_ms
        elif t_ms - self.last_voice_t >= self.hangover_ms:
            self.state = "silent"
            return "speech_end"
        return None


def level_db(frame: rtc.AudioFrame) -> float:
    pcm = np.frombuffer(frame.data, dtype=np.int16).astype(np.float32) / 32768.0
    rms = float(np.sqrt(np.mean(pcm * pcm))) if pcm.size else 0.0
    return 20.0 * np.log10(rms) if rms > 0 else -np.inf


def gapless_reply(bed_dbfs: float = -40.0, seed: int = 0) -> np.ndarray:
    """The echo's answer at 24 kHz: espeak-ng speech (the page's level rules were made for speech) over a quiet
    noise bed, so that no 10 ms of it falls below the page's silence threshold (-55 dBFS) while it speaks.
    espeak alone pauses between words (18 % of its 10 ms windows, runs of 30-160 ms below -55 dBFS): a cut that
    reached the browser inside a pause was "heard" from the pause's start, before the cut could have arrived,
    which made the barge-in floor look ~15 ms shorter than the worker's (whose random-weight voice never pauses)."""
    voice = speak(REPLY).astype(np.float32)
    voice = voice[: voice.size // 2 * 2].reshape(-1, 2).mean(axis=1)  # 48 -> 24 kHz
    bed = np.random.default_rng(seed).standard_normal(voice.size) * (32768.0 * 10 ** (bed_dbfs / 20.0))
    return np.clip(voice + bed, -32768, 32767)


class EchoAgent:
    """Answers every end of speech at once with up to `reply_s` of speech; a new onset while it speaks cuts it."""

    def __init__(self, url: str, token: str, *, hangover_ms: float, reply_s: float) -> None:
        self.url, self.token, self.reply_s = url, token, reply_s
        self.vad = EnergyVad(hangover_ms=hangover_ms)
        self.events: list[dict[str, Any]] = []  # Unix ms, the echo's clock
        self.stop = threading.Event()
        self.source: rtc.AudioSource | None = None  # made in run(): the SDK binds it to the running loop
        voice = gapless_reply()
        frames = min(int(reply_s * 50), voice.size // OUT_FRAME)
        self.reply_frames = [voice[i * OUT_FRAME : (i + 1) * OUT_FRAME].astype(np.int16).tobytes()
                             for i in range(frames)]  # fmt: skip
        self._reply: asyncio.Task | None = None
        self._inflight: asyncio.Future | None = None  # the source finishes a capture even if its caller is cut
        self.notice: CutNotice | None = None
        self.participant: rtc.LocalParticipant | None = None
        self._state_tasks: set[asyncio.Task] = set()

    def _set_state(self, state: str) -> None:
        """The agent state the worker's session publishes: the page's playback gate, closed by a cut, opens
        again when the agent is "speaking" (else only after 1.5 s, which the floor would measure instead)."""
        if self.participant is not None:
            task = asyncio.ensure_future(self.participant.set_attributes({"lk.agent.state": state}))
            self._state_tasks.add(task)
            task.add_done_callback(self._state_tasks.discard)

    async def _capture(self, data: bytes) -> None:
        assert self.source is not None
        if self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight])  # the source refuses a second capture while one is in flight
        self._inflight = asyncio.ensure_future(self.source.capture_frame(rtc.AudioFrame(data, OUT_RATE, 1, OUT_FRAME)))
        await asyncio.shield(self._inflight)

    async def _speak(self) -> None:
        for i, data in enumerate(self.reply_frames):
            if i == 0:
                self._set_state("speaking")
                self.events.append({"type": "published", "at_ms": time.time() * 1000.0})
            await self._capture(data)
        self._set_state("listening")

    async def _silence_tail(self) -> None:
        """What the worker sends after a cut (RtcAudioOutput.cut_silence_ms): 60 ms of digital silence, so the
        listener's decoder ends the voice at once instead of concealing the missing packets."""
        for _ in range(3):
            await self._capture(bytes(OUT_FRAME * 2))

    def _on_vad(self, event: str, now_ms: float) -> None:
        speaking = self._reply is not None and not self._reply.done()
        if event == "speech_start" and speaking:
            self._reply.cancel()
            self.source.clear_queue()
            self.events.append({"type": "cut", "at_ms": now_ms})
            self._set_state("listening")
            asyncio.ensure_future(self._silence_tail())
            if self.notice is not None:
                self.notice(None)  # as the worker does: the page's playback gate closes when it arrives
        elif event == "speech_end":
            self.events.append({"type": "user_end", "at_ms": now_ms})
            self._reply = asyncio.ensure_future(self._speak())

    async def _listen(self, track: rtc.Track) -> None:
        stream = rtc.AudioStream(track, sample_rate=48_000, num_channels=1)
        async for ev in stream:
            now_ms = time.time() * 1000.0
            event = self.vad.update(level_db(ev.frame), now_ms)
            if event is not None:
                self._on_vad(event, now_ms)
            if self.stop.is_set():
                break
        await stream.aclose()

    async def run(self) -> None:
        room = rtc.Room()
        listeners: set[asyncio.Task] = set()

        def on_track(track: rtc.Track, _pub: Any, _participant: Any) -> None:
            if track.kind == rtc.TrackKind.KIND_AUDIO:
                listeners.add(asyncio.ensure_future(self._listen(track)))

        room.on("track_subscribed", on_track)
        self.source = rtc.AudioSource(OUT_RATE, 1, queue_size_ms=100)
        await room.connect(self.url, self.token)
        self.notice = CutNotice(room.local_participant)
        self.participant = room.local_participant
        track = rtc.LocalAudioTrack.create_audio_track("echo-voice", self.source)
        await room.local_participant.publish_track(
            track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        )
        while not self.stop.is_set():
            await asyncio.sleep(0.1)
        for task in [*listeners, *([self._reply] if self._reply else [])]:
            task.cancel()
        await self.notice.aclose()
        await room.disconnect()


def phrases_wav(path: Path, cycles: int, gap_s: float) -> None:
    spoken = [speak(text) for text in PHRASES]
    parts = [np.zeros(RATE, dtype=np.int16)]
    for i in range(cycles):
        parts += [spoken[i % len(spoken)], np.zeros(int(gap_s * RATE), dtype=np.int16)]
    parts.append(np.zeros(30 * RATE, dtype=np.int16))  # the loop must not start over within the run
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.concatenate(parts).tobytes())


def match(log: list[dict], events: list[dict]) -> tuple[list[dict], list[dict]]:
    """Browser records against the echo's events (one host, one wall clock), matched by cause: the reply the
    page heard is the echo's last publish before the page heard it (and after the page's previous turn), and
    that reply's end of speech is the echo's last one before it. The echo's VAD hears the decoded uplink, the
    page's its own microphone, so either may decide first: `uplink_end_lag_ms` can be negative."""
    ends = [e["at_ms"] for e in events if e["type"] == "user_end"]
    published = [e["at_ms"] for e in events if e["type"] == "published"]
    cuts = [e["at_ms"] for e in events if e["type"] == "cut"]
    turns, barges = [], []
    previous_heard = float("-inf")
    for rec in (r for r in log if r.get("type") == "turn" and "userEndAtMs" in r):
        heard = rec["agentStartAtMs"]
        pub = max((t for t in published if previous_heard < t <= heard), default=None)
        end = None if pub is None else max((t for t in ends if previous_heard < t <= pub), default=None)
        previous_heard = heard
        turns.append({
            "response_ms": rec["responseMs"],
            "uplink_end_lag_ms": None if end is None else end - rec["userEndAtMs"],
            "echo_decision_ms": None if end is None or pub is None else pub - end,
            "publish_to_heard_ms": None if pub is None else rec["agentStartAtMs"] - pub,
        })  # fmt: skip
    previous_silent = float("-inf")
    for rec in (r for r in log if r.get("type") == "barge_in" and "silentAtMs" in r):
        cut = max((t for t in cuts if previous_silent < t <= rec["silentAtMs"]), default=None)  # what silenced it
        previous_silent = rec["silentAtMs"]
        barges.append({
            "onset_to_silence_ms": rec["silentAtMs"] - rec["userStartAtMs"],
            "onset_to_cut_ms": None if cut is None else cut - rec["userStartAtMs"],
            "cut_to_silence_ms": None if cut is None else rec["silentAtMs"] - cut,
        })  # fmt: skip
    return turns, barges


def run(
    workdir: Path, *, cycles: int, gap_s: float = 1.0, reply_s: float = 3.0, hangover_ms: float = HANGOVER_MS
) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    wav = workdir / "phrases.wav"
    phrases_wav(wav, cycles, gap_s)
    stack = LocalStack(workdir / "stack", VAD_SILENCE_MS=str(int(hangover_ms)))
    stack.start(services=("livekit", "token"))
    room = "floor"
    token = (
        api.AccessToken(stack.env["LIVEKIT_API_KEY"], stack.env["LIVEKIT_API_SECRET"])
        .with_identity("echo-agent")
        .with_kind("agent")
        .with_grants(api.VideoGrants(room_join=True, room=room, can_update_own_metadata=True))  # its agent state
        .to_jwt()
    )
    echo = EchoAgent(stack.livekit_url, token, hangover_ms=hangover_ms, reply_s=reply_s)
    thread = threading.Thread(target=asyncio.run, args=(echo.run(),), name="echo-agent", daemon=True)
    try:
        thread.start()
        with BrowserCall(stack.page_url, wav) as call:
            call.join(room)
            deadline = time.monotonic() + 20 + cycles * (2.5 + gap_s) * 1.5
            while time.monotonic() < deadline:
                time.sleep(2.0)
                snap = call.snapshot()
                if sum(r["type"] == "turn" for r in snap["log"]) >= cycles:
                    break
            time.sleep(1.0)
            snap = call.snapshot()
            call.leave()
            problems = list(call.problems)
    finally:
        echo.stop.set()
        thread.join(10)
        stack.stop()
    turns, barges = match(snap["log"], echo.events)
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": device().split(" (")[0] + " (no worker: LiveKit server, page and the echo agent only)",
        "versions": versions(),
        "command": " ".join(["python -m lab.callbench.floor", *sys.argv[1:]]),
        "config": {"cycles": cycles, "gap_s": gap_s, "reply_s": reply_s, "vad_hangover_ms": hangover_ms},
        "counts": {"turns_heard": len(turns), "barge_ins_heard": len(barges), "page_problems": problems,
                   "page_agent_state": snap["agentState"]},  # fmt: skip
        "turns": {k: column_summary(turns, k) for k in TURN_COLUMNS},
        "barge_in": {k: column_summary(barges, k) for k in BARGE_COLUMNS},
        "receiver": receiver_stats(snap["inbound"]),
        "rows": {"turns": turns, "barge_ins": barges},
        "raw": {"page_log": snap["log"], "echo_events": echo.events},
    }


def markdown(report: dict) -> str:
    lines = [f"# Transport floor: {report['device']}, {report['date']}", "", f"`{report['command']}`", "",
             "| per turn (ms) | n | P50 | P95 |", "|---|---|---|---|"]  # fmt: skip
    for table in ("turns", "barge_in"):
        if table == "barge_in":
            lines += ["", "| barge-in (ms) | n | P50 | P95 |", "|---|---|---|---|"]
        for key, s in report[table].items():
            lines.append(f"| {key} | {s['n']} | {s['p50']} | {s['p95']} |")
    rx = report["receiver"]
    lines += ["", f"Browser receiver (echo's track): jitter buffer {rx.get('jitter_buffer_avg_ms')} ms on average, "
              f"interarrival jitter {rx.get('interarrival_jitter_ms')} ms.", "",
              "response = browser end of speech (energy VAD + hangover) -> first echo audio heard, with no model, "
              "VAD model or framework in between: the floor under callbench's overhead."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.callbench.floor", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20, help="phrases spoken (a turn each; a barge-in from the 2nd)")
    parser.add_argument("--out", type=Path, required=True, help="folder for floor.json and floor.md")
    args = parser.parse_args(argv)
    if not 1 <= args.cycles <= 200:
        parser.error(f"--cycles={args.cycles} is out of range (allowed: 1..200)")
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args.out / "work", cycles=args.cycles)
    (args.out / "floor.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "floor.md").write_text(markdown(report))
    print(markdown(report))
    counts = report["counts"]
    # the page saw the echo's state: else its playback gate, closed by each cut, reopens only after 1.5 s
    return 0 if counts["turns_heard"] >= args.cycles and counts["page_agent_state"] in ECHO_STATES else 1


if __name__ == "__main__":
    sys.exit(main())
