"""A cut while a frame's capture is in flight: the cut's silence tail and that capture share one real
`rtc.AudioSource`, which refuses concurrent captures (RtcError InvalidState). The tail must wait its turn,
not fail (a failed tail was an unretrieved task exception: an ERROR line in every stress round)."""

from __future__ import annotations

import asyncio

from livekit import rtc

from agent.output import RtcAudioOutput


def frame(reply_id: str) -> rtc.AudioFrame:
    return rtc.AudioFrame(bytes(480 * 2), 24_000, 1, 480, userdata={"reply_id": reply_id})


async def test_silence_tail_waits_for_the_capture_in_flight() -> None:
    output = RtcAudioOutput(queue_ms=100, cut_silence_ms=60)
    try:
        for _ in range(5):
            await output.capture_frame(frame("r1"))  # the source's 100 ms queue is full now
        blocked = asyncio.ensure_future(output.capture_frame(frame("r1")))  # waits for queue room
        await asyncio.sleep(0.005)
        assert not blocked.done()
        output.clear_buffer()  # the cut: clears the queue and starts the silence tail
        await asyncio.wait_for(blocked, 1.0)
        tail = output._silence_tail
        assert tail is not None
        await asyncio.wait_for(asyncio.shield(tail), 1.0)
        assert tail.exception() is None
    finally:
        await output.aclose()


async def test_silence_tail_after_the_capturing_task_was_cancelled() -> None:
    """The framework cancels the task whose frame capture waits for queue room (the cut), then the tail
    starts: the source still finishes that capture and refuses another until it has."""
    output = RtcAudioOutput(queue_ms=100, cut_silence_ms=60)
    try:
        for _ in range(5):
            await output.capture_frame(frame("r1"))
        blocked = asyncio.ensure_future(output.capture_frame(frame("r1")))
        await asyncio.sleep(0.005)
        blocked.cancel()  # what cancel_and_wait on the reply's forwarding task does
        await asyncio.sleep(0)
        output.clear_buffer()
        tail = output._silence_tail
        assert tail is not None
        await asyncio.wait_for(asyncio.shield(tail), 1.0)
        assert tail.exception() is None
        await output.capture_frame(frame("r2"))  # and the next reply captures normally
    finally:
        await output.aclose()
