"""Where the agent's end of turn goes: the uplink, and Silero's decision on the audio the agent receives.

`python -m lab.callbench.vad_lag --out DIR` runs only LiveKit's server. A sender (an SDK participant)
publishes callbench's questions in real time, 10 ms frames straight into WebRTC (no queue), and notes when
the last voiced frame of each question left (the page's rule: -50 dBFS). A receiver of kind agent takes the
track with the worker's input settings (`rtc.AudioStream` at 24 kHz in `INPUT_FRAME_MS` = 20 ms frames, as
LiveKit's room input gives the session) and feeds Silero loaded as the worker loads it (`agent.vad.load_vad`,
`VAD_SILENCE_MS`, 224 ms: seven windows, behind the -50 dBFS quiet gate). Per question:
- `uplink_ms`: the last voiced frame sent -> the last voiced frame received (Opus, LiveKit, the receiver's
  jitter buffer);
- `vad_decision_ms`: the last voiced frame received -> Silero's END_OF_SPEECH, minus the hangover it waits
  (224 ms): what the VAD model itself takes (its 32 ms windows, its smoothing, its probability decaying on
  decoded audio);
- `live_minus_offline_ms`: the same END found by running Silero offline over the recorded received audio,
  mapped to arrival times. ~0 means the live input path (resampling, framing, the executor) adds nothing.
Writes DIR/vad_lag.json and DIR/vad_lag.md; exit 0 when every question ended exactly one turn. `--questions N`
takes the first N of the 10; `--quiet-db off` measures Silero without the quiet gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from livekit import api, rtc
from livekit.agents import vad as agents_vad
from livekit.agents.voice import room_io

from agent.config import AgentConfig
from agent.config import quiet_db as quiet_db_from_env
from agent.vad import QUIET_DB, effective_hangover_ms, load_vad
from common.env import ConfigError, Env
from lab.callbench.bench import QUESTIONS, column_summary, device, versions
from lab.callbench.speech import RATE, speak
from lab.callbench.stack import LocalStack

SEND_FRAME = RATE // 100  # 10 ms, what a browser sends per capture callback
RECEIVE_RATE = room_io.AudioInputOptions().sample_rate  # the session's input: LiveKit's default, which
RECEIVE_FRAME_MS = 20  # agent/voice.py room_options keeps (its frame size: AGENT_INPUT_FRAME_MS's default)
HANGOVER_MS = effective_hangover_ms(AgentConfig.vad_silence_ms)  # what Silero waits, as the worker loads it
VOICED_DB = QUIET_DB  # the worker's quiet gate: quieter is silence
COLUMNS = ("uplink_ms", "vad_decision_ms", "live_minus_offline_ms")


def level_db(pcm: np.ndarray) -> float:
    x = pcm.astype(np.float32) / 32768.0
    rms = float(np.sqrt(np.mean(x * x))) if x.size else 0.0
    return 20.0 * np.log10(rms) if rms > 0 else -np.inf


async def vad_ends(stream: agents_vad.VADStream, out: list[float], clock: Any) -> None:
    async for ev in stream:
        if ev.type == agents_vad.VADEventType.END_OF_SPEECH:
            out.append(clock(ev))


async def send(url: str, token: str, pcm: np.ndarray, voiced_sent: list[tuple[int, float]]) -> None:
    room = rtc.Room()
    await room.connect(url, token)
    source = rtc.AudioSource(RATE, 1, queue_size_ms=0)  # no queue: each frame goes to WebRTC as it is captured
    track = rtc.LocalAudioTrack.create_audio_track("mic", source)
    await room.local_participant.publish_track(track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE))
    await asyncio.sleep(2.0)  # the receiver subscribes
    t0 = time.perf_counter()
    for i in range(len(pcm) // SEND_FRAME):
        while (wait := t0 + i * 0.01 - time.perf_counter()) > 0:
            await asyncio.sleep(min(wait, 0.005))
        frame = pcm[i * SEND_FRAME : (i + 1) * SEND_FRAME]
        await source.capture_frame(rtc.AudioFrame(frame.tobytes(), RATE, 1, SEND_FRAME))
        if level_db(frame) >= VOICED_DB:
            voiced_sent.append((i, time.time() * 1000.0))
    await asyncio.sleep(1.0)
    await room.disconnect()


class Receiver:
    def __init__(self, quiet_db: float | None) -> None:
        self.quiet_db = quiet_db  # the gate: agent/vad.py (None = Silero alone)
        self.ends: list[float] = []  # Unix ms of each live END_OF_SPEECH
        self.voiced: list[float] = []  # Unix ms at which each voiced frame arrived
        self.recording: list[tuple[float, np.ndarray]] = []
        self.stop = asyncio.Event()

    async def run(self, url: str, token: str) -> None:
        room = rtc.Room()
        subscribed: asyncio.Future[rtc.Track] = asyncio.get_running_loop().create_future()
        room.on("track_subscribed", lambda track, *_: subscribed.done() or subscribed.set_result(track))
        await room.connect(url, token)
        track = await subscribed
        vad_stream = load_vad(AgentConfig.vad_silence_ms, self.quiet_db).stream()
        ends_task = asyncio.ensure_future(vad_ends(vad_stream, self.ends, lambda _ev: time.time() * 1000.0))
        audio = rtc.AudioStream(track, sample_rate=RECEIVE_RATE, num_channels=1, frame_size_ms=RECEIVE_FRAME_MS)
        async for ev in audio:
            now = time.time() * 1000.0
            pcm = np.frombuffer(ev.frame.data, dtype=np.int16).copy()
            self.recording.append((now, pcm))
            if level_db(pcm) >= VOICED_DB:
                self.voiced.append(now)
            vad_stream.push_frame(ev.frame)
            if self.stop.is_set():
                break
        await audio.aclose()
        await vad_stream.aclose()
        ends_task.cancel()
        await room.disconnect()

    async def offline_ends(self) -> list[float]:
        """Silero over the recorded audio, each END mapped to the arrival time of the frame it fell in."""
        audio = np.concatenate([pcm for _, pcm in self.recording])
        edges = np.cumsum([len(pcm) for _, pcm in self.recording])
        arrivals = [t for t, _ in self.recording]

        def arrival(ev: agents_vad.VADEvent) -> float:
            k = int(np.searchsorted(edges, ev.timestamp * RECEIVE_RATE))
            return arrivals[min(k, len(arrivals) - 1)]

        stream, ends = load_vad(AgentConfig.vad_silence_ms, self.quiet_db).stream(), []
        task = asyncio.ensure_future(vad_ends(stream, ends, arrival))
        n = RECEIVE_RATE * RECEIVE_FRAME_MS // 1000
        for i in range(0, len(audio) - n + 1, n):
            stream.push_frame(rtc.AudioFrame(audio[i : i + n].tobytes(), RECEIVE_RATE, 1, n))
        stream.end_input()
        await task
        return ends


def questions_pcm(count: int, gap_s: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    parts, spans, at = [np.zeros(RATE, dtype=np.int16)], [], RATE
    for text, _ in QUESTIONS[:count]:
        speech = speak(text)
        spans.append((at // SEND_FRAME, (at + len(speech)) // SEND_FRAME + 1))
        parts += [speech, np.zeros(int(gap_s * RATE), dtype=np.int16)]
        at += len(speech) + int(gap_s * RATE)
    return np.concatenate(parts), spans


async def measure(
    stack: LocalStack, count: int, gap_s: float, quiet_db: float | None
) -> tuple[list[dict[str, float | None]], int]:
    key, secret = stack.env["LIVEKIT_API_KEY"], stack.env["LIVEKIT_API_SECRET"]

    def token(identity: str, kind: str) -> str:
        grants = api.VideoGrants(room_join=True, room="vad-lag")
        return api.AccessToken(key, secret).with_identity(identity).with_kind(kind).with_grants(grants).to_jwt()

    pcm, spans = questions_pcm(count, gap_s)
    receiver, voiced_sent = Receiver(quiet_db), []
    listening = asyncio.ensure_future(receiver.run(stack.livekit_url, token("vad-lag-agent", "agent")))
    await asyncio.sleep(1.0)
    await send(stack.livekit_url, token("vad-lag-user", "standard"), pcm, voiced_sent)
    receiver.stop.set()
    await asyncio.wait_for(listening, 10.0)
    offline = await receiver.offline_ends()
    rows = []
    for first, last in spans:
        sent = [t for i, t in voiced_sent if first <= i < last]
        if not sent:
            continue
        arrived = [t for t in receiver.voiced if sent[-1] - 50.0 <= t <= sent[-1] + 1000.0]
        end = next((t for t in receiver.ends if t > sent[-1]), None)
        twin = min(offline, key=lambda t: abs(t - end)) if end is not None and offline else None
        rows.append({
            "uplink_ms": arrived[-1] - sent[-1] if arrived else None,
            "vad_decision_ms": end - arrived[-1] - HANGOVER_MS if arrived and end is not None else None,
            "live_minus_offline_ms": None if twin is None else end - twin,
        })  # fmt: skip
    return rows, len(receiver.ends)


def run(
    workdir: Path, *, questions: int = len(QUESTIONS), gap_s: float = 2.0, quiet_db: float | None = QUIET_DB
) -> dict[str, Any]:
    stack = LocalStack(workdir / "stack")
    stack.start(services=("livekit",))
    try:
        rows, ends = asyncio.run(measure(stack, questions, gap_s, quiet_db))
    finally:
        stack.stop()
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": device().split(" (")[0] + " (LiveKit server and two SDK participants only)",
        "versions": versions(),
        "command": " ".join(["python -m lab.callbench.vad_lag", *sys.argv[1:]]),
        "config": {
            "questions": questions,
            "receive_rate": RECEIVE_RATE,
            "receive_frame_ms": RECEIVE_FRAME_MS,
            "hangover_ms": HANGOVER_MS,
            "voiced_dbfs": VOICED_DB,
            "quiet_db": quiet_db,
        },
        "ends": ends,  # END_OF_SPEECH events in all: more than the questions means a question was split
        "summary": {k: column_summary(rows, k) for k in COLUMNS},
        "rows": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# The agent's end of turn: {report['device']}, {report['date']}", "", f"`{report['command']}`", "",
             "| per question (ms) | n | P50 | P95 |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {k} | {s['n']} | {s['p50']} | {s['p95']} |" for k, s in report["summary"].items()]
    gate = report["config"]["quiet_db"]
    lines += [
        "",
        f"{report['ends']} ends of speech for {report['config']['questions']} questions; quiet gate "
        + ("off (Silero alone)" if gate is None else f"{gate:g} dBFS")
        + ".",
    ]
    lines += [
        "",
        "uplink = last voiced frame sent -> received (SDK to SDK through LiveKit); vad_decision = last "
        "voiced frame received -> Silero's end of speech, minus the hangover Silero waits ("
        f"{HANGOVER_MS:.0f} ms); live_minus_offline = the "
        "live end against Silero run offline over the received audio (~0: the live input path adds nothing).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.callbench.vad_lag", description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many of callbench's questions")
    parser.add_argument("--out", type=Path, required=True, help="folder for vad_lag.json and vad_lag.md")
    parser.add_argument("--quiet-db", default=str(QUIET_DB), help='the gate in dBFS, or "off" (default %(default)s)')
    args = parser.parse_args(argv)
    try:
        quiet_db = quiet_db_from_env(Env({"VAD_QUIET_DB": args.quiet_db}))
    except ConfigError as exc:
        parser.error(str(exc).replace("VAD_QUIET_DB", "--quiet-db"))
    if not 1 <= args.questions <= len(QUESTIONS):
        parser.error(f"--questions={args.questions} is out of range (allowed: 1..{len(QUESTIONS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args.out / "work", questions=args.questions, quiet_db=quiet_db)
    (args.out / "vad_lag.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "vad_lag.md").write_text(markdown(report))
    print(markdown(report))
    complete = [r for r in report["rows"] if r["vad_decision_ms"] is not None]
    return 0 if len(complete) == args.questions and report["ends"] == args.questions else 1


if __name__ == "__main__":
    sys.exit(main())
