"""Failure handling in a running call: STT or LLM endpoint down, slow (timeout), 500, or a malformed
answer. The agent must stay responsive (a short spoken apology, then back to listening), log the failure
once with the turn id, record it in the trace, and answer normally once the endpoint is healthy again."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.turn.states import State
from agent.voice import Apology
from lab.fake_openai import FakeOpenAIServer
from lab.simulate import SimOptions, load_vad, run_call

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "espeak-ng"], capture_output=True).returncode != 0, reason="needs espeak-ng"
)


def dead_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("stage", ["stt", "llm"])
@pytest.mark.parametrize("fault", ["down", "slow", "500", "malformed"])
async def test_agent_recovers(stage: str, fault: str, sim_backend: Any, tmp_path: Path,
                              caplog: pytest.LogCaptureFixture) -> None:
    cfg = dataclasses.replace(
        AgentConfig.from_env({}), aec_warmup_s=0.0, stt_timeout_s=1.0, llm_timeout_s=1.0, api_max_retry=0
    )

    def on_turn_start(index: int, server: FakeOpenAIServer) -> None:
        if fault != "down":
            server.script.update({f"{stage}_fault": fault if index == 0 else None, "slow_s": 5.0})

    opts = SimOptions(
        turns=2, config=cfg, speech_cache=tmp_path / "speech", turn_timeout_s=30,
        user_lines=["hello can you hear me"], on_turn_start=on_turn_start,
        stt_base_url=dead_url() if (stage, fault) == ("stt", "down") else None,
        llm_base_url=dead_url() if (stage, fault) == ("llm", "down") else None,
    )
    with caplog.at_level(logging.ERROR, logger="agent"):
        result = await run_call(opts, backend=sim_backend, vad=load_vad(cfg))
    assert not result.errors or all(stage in e for e in result.errors), result.errors
    first, second = result.traces[0], result.traces[1]
    failing = [first, second] if fault == "down" else [first]
    for trace in failing:
        assert len(trace["errors"]) == 1 and trace["errors"][0].startswith(f"{stage}:"), trace["errors"]
        cut_by = [(irq.get("source"), irq.get("interrupt_detected")) for irq in trace.get("interruptions", [])]
        assert trace["outcome"] == "error", f"turn {trace['turn_index']} cut by {cut_by}, points {trace['points']}"
        assert "first_frame_published" in trace["points"], "no apology was spoken"
        ours = [r for r in caplog.records if r.name.startswith("agent") and trace["turn_id"] in r.getMessage()]
        assert len(ours) == 1, [r.getMessage() for r in ours]
    if fault != "down":
        assert second["outcome"] == "answered" and second["complete"] and not second["errors"]
    assert result.illegal_transitions == 0
    assert all(t.frames > 0 for t in result.turns)
    assert result.final_state == State.LISTENING.value


class _SaySpy:
    """Stands in for the session's `say` and `user_state` (the two things the apology reads)."""

    def __init__(self, user_state: str) -> None:
        self.user_state, self.said = user_state, []

    def say(self, text: str, **kwargs: Any) -> Any:
        self.said.append(text)
        return asyncio.get_running_loop().create_future()  # a speech handle that has not played yet


async def test_the_apology_waits_for_the_sessions_own_vad_to_end_the_turn() -> None:
    """The STT's VAD (whose end of speech opened the failed turn) and the session's VAD run apart and drift under
    load. An apology said while the session's VAD still hears the turn was cut by that VAD's next hangover
    inference before its first frame (CI: outcome 'interrupted', nothing spoken). It is said once that VAD ends
    the speech too, and only once."""
    spy = _SaySpy("speaking")
    apology = Apology(spy, "sorry")
    apology.say()
    apology.say()  # a second failure meanwhile owes no second apology
    assert spy.said == [] and apology.pending
    apology.on_user_state(SimpleNamespace(old_state="speaking", new_state="listening"))
    apology.on_user_state(SimpleNamespace(old_state="listening", new_state="speaking"))
    assert spy.said == ["sorry"]
    spy = _SaySpy("listening")  # the usual order: the session's VAD ended first, so it is said at once
    apology = Apology(spy, "sorry")
    apology.say()
    assert spy.said == ["sorry"]
