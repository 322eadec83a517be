"""CutNotice publishes one reliable data packet per cut on the page's topic, never blocks or raises, and leaves
no task behind when the call closes."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from agent.turn.cut_notice import CUT_TOPIC, CutNotice


class FakeParticipant:
    def __init__(self, *, fail: bool = False, delay_s: float = 0.0) -> None:
        self.sent: list[tuple[Any, dict[str, Any]]] = []
        self.fail, self.delay_s = fail, delay_s

    async def publish_data(self, payload: Any, **kwargs: Any) -> None:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("engine is closed")
        self.sent.append((payload, kwargs))


async def test_each_cut_is_one_reliable_packet_on_the_topic() -> None:
    participant = FakeParticipant()
    notice = CutNotice(participant)
    notice("r1")
    notice(None)
    await asyncio.sleep(0.01)
    assert [kw for _, kw in participant.sent] == [{"reliable": True, "topic": CUT_TOPIC}] * 2
    assert [json.loads(p)["reply_id"] for p, _ in participant.sent] == ["r1", None]
    assert all(json.loads(p)["sent_at_ms"] > 0 for p, _ in participant.sent)
    assert notice.sent == 2
    await notice.aclose()


async def test_a_failed_publish_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    notice = CutNotice(FakeParticipant(fail=True))
    with caplog.at_level(logging.WARNING, logger="agent.turn.cut_notice"):
        notice("r1")
        await asyncio.sleep(0.01)
    assert notice.sent == 0 and "cut notice not sent" in caplog.text
    await notice.aclose()


async def test_close_cancels_what_is_pending() -> None:
    notice = CutNotice(FakeParticipant(delay_s=10.0))
    notice("r1")
    await asyncio.sleep(0)
    await asyncio.wait_for(notice.aclose(), 1.0)
    assert notice.sent == 0 and not notice._pending
