"""The barge-in cascade: everything a reply has running is cut at once, in the order a person hears it.

`cut(reply, irq, output=, clock=)` runs synchronously on the session's loop and records what it did on `irq`:
1. silence: the output's gate for the reply closes and its queued audio is dropped (`audio_silenced`: nothing of it
   is captured after this);
2. the engine streams: the reply's TTS producers are cancelled (their `finally` closes the engine stream: GPU work
   stops, the slot frees);
3. the LLM streams are closed (a closer that fails is logged; the cascade goes on).
Who decided the cut, and what it means for the turn, is the controller's (agent/turn/controller.py `interrupt`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.tracing import Interruption
from agent.turn.reply import Reply, Silenceable

logger = logging.getLogger("agent.turn.controller")  # the cascade's lines belong to the controller's log


def cut(reply: Reply, irq: Interruption, *, output: Silenceable | None, clock: Callable[[], float]) -> None:
    # 1. silence: gate closed + queued audio dropped
    irq.audio_silenced = output.silence(reply.reply_id) if output is not None else clock()
    irq.frames_published = reply.frames_published
    # 2. engine streams (GPU work stops when the producer's finally closes the stream)
    pending_tts = [task for task in reply.tts_tasks if not task.done()]
    for task in pending_tts:
        task.cancel()
    irq.tts_cancelled = bool(pending_tts)
    # 3. LLM streams
    for closer in reply.llm_closers:
        try:
            result = closer()
            if asyncio.iscoroutine(result):
                asyncio.ensure_future(result)
            irq.llm_cancelled = True
        except Exception:  # closing a dead stream must not break the cascade
            logger.exception("closing LLM stream failed [turn %s]", reply.turn_id)
    reply.llm_closers.clear()
