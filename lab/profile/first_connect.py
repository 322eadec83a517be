"""`python -m lab.profile.first_connect --url ws://127.0.0.1:7880 --key K --secret S`: how long a bare process takes
to join its first, second ... room through LiveKit's Rust SDK, each room holding a caller that publishes audio, as a
job's room does (issue 41). A worker's job paid 0.6-1.5 s before the server saw its first join
(results/profiles/h200_2026-12-02/); this separates the SDK's own first connect from the worker's.

`--burst N`: N fresh processes (multiprocessing's forkserver, as a PROCESS worker starts its jobs) each join their
first room at the same moment; prints each one's join time. On a GPU host the SDK creates a CUDA context in that join
(results/convbench/h200_many_2026-12-03/README.md): run it with and without `CUDA_VISIBLE_DEVICES=`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import secrets
import time
from typing import Any

from livekit import api, rtc


def token(key: str, secret: str, room: str, identity: str, *, agent: bool) -> str:
    grants = api.VideoGrants(room_join=True, room=room, agent=agent, can_publish=True, can_subscribe=True,
                             can_publish_data=True)  # fmt: skip
    return (api.AccessToken(key, secret).with_identity(identity).with_kind("agent" if agent else "standard")
            .with_grants(grants).to_jwt())  # fmt: skip


async def run(url: str, key: str, secret: str, rooms: int) -> list[float]:
    tag = secrets.token_hex(3)
    callers, agents, took = [], [], []
    try:
        for i in range(rooms):
            caller = rtc.Room()
            await caller.connect(url, token(key, secret, f"fc-{tag}-{i}", f"user-{i}", agent=False))
            source = rtc.AudioSource(48000, 1)
            track = rtc.LocalAudioTrack.create_audio_track("mic", source)
            await caller.local_participant.publish_track(
                track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
            )
            callers.append(caller)
        for i in range(rooms):
            room = rtc.Room()
            t = time.perf_counter()
            await room.connect(url, token(key, secret, f"fc-{tag}-{i}", f"agent-{i}", agent=True),
                               options=rtc.RoomOptions(auto_subscribe=True))  # fmt: skip
            took.append(time.perf_counter() - t)
            agents.append(room)
    finally:
        for room in agents + callers:
            await room.disconnect()
    return took


def _burst_one(url: str, key: str, secret: str, room: str, out: Any, start_at: float) -> None:
    async def join() -> None:
        agent = rtc.Room()
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        t = time.perf_counter()
        await agent.connect(url, token(key, secret, room, f"agent-{room}", agent=True),
                            options=rtc.RoomOptions(auto_subscribe=True))  # fmt: skip
        out.put(time.perf_counter() - t)
        await asyncio.sleep(1.0)
        await agent.disconnect()

    asyncio.run(join())


async def burst(url: str, key: str, secret: str, n: int) -> list[float]:
    """N processes join N rooms (each holding a publishing caller) at once: each process's first join, in seconds."""
    tag = secrets.token_hex(3)
    callers = []
    try:
        for i in range(n):
            caller = rtc.Room()
            await caller.connect(url, token(key, secret, f"fb-{tag}-{i}", f"user-{i}", agent=False))
            track = rtc.LocalAudioTrack.create_audio_track("mic", rtc.AudioSource(48000, 1))
            await caller.local_participant.publish_track(
                track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
            )
            callers.append(caller)
        ctx = multiprocessing.get_context("forkserver")
        out = ctx.Queue()
        start_at = time.time() + 3.0  # every process imported and waiting by then
        procs = [ctx.Process(target=_burst_one, args=(url, key, secret, f"fb-{tag}-{i}", out, start_at))
                 for i in range(n)]  # fmt: skip
        for proc in procs:
            proc.start()
        took = sorted(out.get(timeout=120) for _ in range(n))
        for proc in procs:
            proc.join()
        return took
    finally:
        for caller in callers:
            await caller.disconnect()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.profile.first_connect", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--rooms", type=int, default=3)
    p.add_argument("--burst", type=int, default=0, help="N processes' first joins at once (instead of --rooms)")
    a = p.parse_args(argv)
    if a.burst:
        print(f"{a.burst} first joins at once: " + ", ".join(f"{s:.2f}" for s in
                                                            asyncio.run(burst(a.url, a.key, a.secret, a.burst))) + " s")
        return 0
    for i, s in enumerate(asyncio.run(run(a.url, a.key, a.secret, a.rooms))):
        print(f"connect {i}: {s:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
