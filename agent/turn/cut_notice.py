"""CutNotice: tell the listeners in the room that the agent cut its voice, so their playback stops at once.

Contract
- `CutNotice(participant)` is the `on_cut` hook of `RtcAudioOutput`: each call publishes one reliable data
  packet on topic `CUT_TOPIC` ("voice_agent.cut") with JSON `{"reply_id": str | null, "sent_at_ms": Unix ms}`.
- Why: when the worker cuts a reply (barge-in), its own queue is cleared at once, but ~100 ms of that reply
  is already in flight and in the listener's jitter buffer, and WebRTC plays it out. A data packet overtakes
  that audio (no jitter buffer on the data channel), so the page (web/app.js) closes its playback gate for
  the agent's track and the person hears silence within a few ms of the agent's decision. A listener that
  ignores the topic hears the normal drain; nothing else changes.
- Publishing is best effort and never blocks the cut: it runs in a task; a failure is logged at WARNING.
  `aclose()` cancels what is still pending (a call that ends leaves no task behind).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from livekit import rtc

CUT_TOPIC = "voice_agent.cut"

logger = logging.getLogger("agent.turn.cut_notice")


class CutNotice:
    def __init__(self, participant: rtc.LocalParticipant) -> None:
        self.participant = participant
        self.sent = 0
        self._pending: set[asyncio.Task[None]] = set()

    def __call__(self, reply_id: str | None) -> None:
        payload = json.dumps({"reply_id": reply_id, "sent_at_ms": round(time.time() * 1000.0, 3)})
        task = asyncio.ensure_future(self._publish(payload))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _publish(self, payload: str) -> None:
        try:
            await self.participant.publish_data(payload, reliable=True, topic=CUT_TOPIC)
            self.sent += 1
        except Exception as exc:  # noqa: BLE001 - the room is closing, or the engine refused: the listener hears the drain
            logger.warning("cut notice not sent: %s", exc)

    async def aclose(self) -> None:
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.wait(list(self._pending))
