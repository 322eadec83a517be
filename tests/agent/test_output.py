"""RtcAudioOutput over a real rtc.AudioSource (no room): frames go in as given, playback events are exact
(one finished event per segment), clear_buffer reports an interruption, the silence gate drops a cut
reply's frames, pause/resume are idempotent."""

from __future__ import annotations

import asyncio

from livekit import rtc

from agent.output import FrameRecord, RtcAudioOutput


def frame(reply_id: str, samples: int = 480) -> rtc.AudioFrame:
    return rtc.AudioFrame(bytes(samples * 2), 24_000, 1, samples, userdata={"reply_id": reply_id, "t_ready": 0.0})


def make() -> tuple[RtcAudioOutput, list[FrameRecord], list[tuple[str, object]]]:
    records: list[FrameRecord] = []
    events: list[tuple[str, object]] = []
    out = RtcAudioOutput(queue_ms=100, frame_observer=records.append)
    out.on("playback_started", lambda ev: events.append(("started", ev)))
    out.on("playback_finished", lambda ev: events.append(("finished", ev)))
    return out, records, events


async def test_segment_plays_out_and_finishes_once() -> None:
    out, records, events = make()
    for _ in range(3):
        await out.capture_frame(frame("r1"))
    out.flush()
    assert [name for name, _ in events] == ["started"]
    ev = await asyncio.wait_for(out.wait_for_playout(), 2.0)
    assert not ev.interrupted and abs(ev.playback_position - 0.06) < 1e-9
    assert [name for name, _ in events] == ["started", "finished"]
    assert [r.duration_ms for r in records] == [20.0, 20.0, 20.0]
    await out.aclose()


async def test_clear_buffer_interrupts_the_open_segment() -> None:
    out, _, events = make()
    for _ in range(4):
        await out.capture_frame(frame("r1"))
    out.clear_buffer()
    ev = await asyncio.wait_for(out.wait_for_playout(), 1.0)
    assert ev.interrupted and ev.playback_position < 0.08
    out.clear_buffer()  # nothing open: no second event
    assert [name for name, _ in events] == ["started", "finished"]
    await out.aclose()


async def test_flush_then_clear_reports_one_interrupted_finish() -> None:
    out, _, events = make()
    await out.capture_frame(frame("r1"))
    out.flush()
    out.clear_buffer()
    await asyncio.sleep(0.1)
    finished = [ev for name, ev in events if name == "finished"]
    assert len(finished) == 1 and finished[0].interrupted
    await out.aclose()


async def test_silenced_reply_frames_are_never_captured() -> None:
    out, records, _ = make()
    out.cut_silence_ms = 0  # the silent tail after a cut has its own test below
    await out.capture_frame(frame("r1"))
    t = out.silence("r1")
    await out.capture_frame(frame("r1"))
    await out.capture_frame(frame("r2"))
    assert [r.reply_id for r in records] == ["r1", "r2"]
    assert records[0].t_end <= t
    assert out.frames_dropped == 1 and out.source.queued_duration <= 0.021
    await out.aclose()


async def test_a_cut_ends_with_silent_frames_that_belong_to_no_reply() -> None:
    out, records, _ = make()
    await out.capture_frame(frame("r1"))
    out.silence("r1")
    await asyncio.sleep(0.01)  # the tail is sent from the loop, after the cut returned
    assert 0.03 < out.source.queued_duration <= 0.065  # up to 60 ms of digital silence (it plays out in real time)
    assert out.frames_captured == 1 and [r.reply_id for r in records] == ["r1"]  # not counted as published
    # a reply that starts at once is not held back by more than one silent frame
    out.silence("r1")
    await out.capture_frame(frame("r2"))
    assert out.source.queued_duration <= 0.085
    await out.aclose()


async def test_pause_and_resume_are_idempotent() -> None:
    out = RtcAudioOutput(pause_capable=True)
    assert out.can_pause
    out.pause()
    out.pause()
    task = asyncio.create_task(out.capture_frame(frame("r1")))
    await asyncio.sleep(0.05)
    assert not task.done() and out.frames_captured == 0
    out.resume()
    out.resume()
    await asyncio.wait_for(task, 1.0)
    assert out.frames_captured == 1
    await out.aclose()


async def test_a_queue_that_ran_dry_mid_segment_is_a_counted_gap() -> None:
    class ReplyLife:  # the calls the output makes that matter here (agent/turn/reply_life.py)
        gaps: list[tuple[str, float]] = []

        def frame_allowed(self, reply_id: str) -> bool:
            return True

        def on_frame_published(self, reply_id: str, t: float) -> None:
            pass

        def on_playout_gap(self, reply_id: str, gap_s: float) -> None:
            self.gaps.append((reply_id, gap_s))

    out, _, _ = make()
    replies = ReplyLife()
    out.replies = replies  # a stand-in with only the three calls used here
    for _ in range(3):  # back to back: the queue never runs dry
        await out.capture_frame(frame("r1"))
    assert out.playout_gaps == 0
    await asyncio.sleep(0.2)  # 60 ms queued, then 140 ms with nothing to play
    await out.capture_frame(frame("r1"))
    assert out.playout_gaps == 1
    [(reply, gap)] = replies.gaps
    assert reply == "r1" and 0.1 < gap < 0.3
    out.flush()
    await asyncio.sleep(0.1)
    await out.capture_frame(frame("r2"))  # a new segment's first frame after silence is not a gap
    assert out.playout_gaps == 1
    await out.aclose()


async def test_a_cut_that_truncates_audio_is_told_once() -> None:
    """on_cut (the page's cut notice, agent/turn/cut_notice.py) fires once per reply whose audio a cut truncated:
    the controller's silence and the framework's clear_buffer of the same reply tell it once; a cut with
    nothing playing tells nothing."""
    told: list[str | None] = []
    out = RtcAudioOutput(queue_ms=100, on_cut=told.append)
    out.silence("r0")  # nothing played yet
    for _ in range(3):
        await out.capture_frame(frame("r1"))
    out.silence("r1")
    out.clear_buffer()
    assert told == ["r1"]
    await out.aclose()


async def test_a_failing_cut_hook_does_not_break_the_cut() -> None:
    def broken(_reply_id: str | None) -> None:
        raise RuntimeError("room gone")

    out = RtcAudioOutput(queue_ms=100, on_cut=broken)
    await out.capture_frame(frame("r1"))
    out.silence("r1")  # logged, not raised
    await out.capture_frame(frame("r1"))
    assert out.frames_dropped == 1  # the gate is closed all the same
    await out.aclose()
