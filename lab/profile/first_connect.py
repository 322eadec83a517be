"""`python -m lab.profile.first_connect --url ws://127.0.0.1:7880 --key K --secret S`: how long a bare process takes
to join its first, second ... room through LiveKit's Rust SDK, each room holding a caller that publishes audio, as a
job's room does (issue 41). A worker's job paid 0.6-1.5 s before the server saw its first join
(results/profiles/h200_2026-12-02/); this separates the SDK's own first connect from the worker's.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.profile.first_connect", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--rooms", type=int, default=3)
    a = p.parse_args(argv)
    for i, s in enumerate(asyncio.run(run(a.url, a.key, a.secret, a.rooms))):
        print(f"connect {i}: {s:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
