"""agent/livekit_internals.py, the only place the agent reads private LiveKit state (issue 18): the names it
relies on exist in the installed livekit-agents, that version is the one the adapter was written for, and
inside a real call its functions return the speech that runs the node, its interrupt future and cause."""

from __future__ import annotations

import asyncio
import logging
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from livekit.agents.ipc.job_thread_executor import ThreadJobExecutor
from livekit.agents.voice.speech_handle import SpeechHandle

from agent import livekit_internals as lk
from lab.fake_openai import FakeOpenAIServer
from tests.agent.duplex_harness import EnergyVAD, ScriptedBackend
from tests.agent.duplex_schedule import Cut, ScheduleRunner, TurnPlan

ROOT = Path(__file__).resolve().parents[2]


def test_relied_on_private_names_exist() -> None:
    missing = lk.missing_internals()
    assert not missing, (
        f"livekit-agents {lk.installed_version()} lacks {', '.join(missing)}, which agent/livekit_internals.py "
        f"relies on (written for {lk.WRITTEN_FOR}): the call falls back to public API only; find the new name "
        "or a public equivalent and update the adapter"
    )


def test_installed_livekit_agents_is_the_version_the_adapter_was_written_for() -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "livekit-agents==" + lk.WRITTEN_FOR in pins, f"pyproject.toml pins {pins}: re-check the adapter"
    assert lk.installed_version() == lk.WRITTEN_FOR, (
        f"livekit-agents {lk.installed_version()} is installed, agent/livekit_internals.py was checked against "
        f"{lk.WRITTEN_FOR}: re-read its private names in the new version, then update WRITTEN_FOR"
    )


def test_a_missing_name_is_reported_and_falls_back_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lk, "_warned", set())
    monkeypatch.setattr(lk, "_context_var", lambda: None)  # as if agent_activity had lost the name
    assert lk.missing_internals() == [lk.CONTEXT_VAR]
    with caplog.at_level(logging.WARNING, logger="agent.livekit_internals"):
        assert lk.current_speech_handle() is None
        assert lk.current_speech_handle() is None
        assert lk.interrupt_future(object()) is None
        assert lk.interrupt_source(object()) is None
        assert lk.interrupt_source(object()) is None
    warned = [r.getMessage() for r in caplog.records if r.name == "agent.livekit_internals"]
    assert len(warned) == 3, warned  # once per missing name
    assert lk.CONTEXT_VAR in warned[0] and lk.installed_version() in warned[0]


async def test_the_silero_stream_runs_the_model_it_is_handed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from livekit.plugins import silero

    from agent.vad import QuietGate, load_vad

    vad = load_vad(224, -50.0)
    stream = vad.stream()
    try:
        assert isinstance(stream, silero.VADStream) and isinstance(stream._model, QuietGate)
        assert stream in vad._streams  # update_options reaches it
    finally:
        await stream.aclose()
    # where the plugin's names are gone: a warning, and the plugin's own stream (Silero alone)
    monkeypatch.setattr(lk, "_warned", set())
    monkeypatch.delattr(vad, "_onnx_session")
    with caplog.at_level(logging.WARNING, logger="agent.livekit_internals"):
        assert lk.silero_stream_with_model(vad, lambda model: model) is None
    assert any(lk.SILERO_MODEL in r.getMessage() for r in caplog.records)


def test_a_session_without_its_room_io_is_warned_and_left_to_livekit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lk, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="agent.livekit_internals"):
        assert lk.session_room_io(object()) is None
    assert any(lk.SESSION_ROOM_IO in r.getMessage() for r in caplog.records)


async def test_on_a_speech_handle_created_as_livekit_creates_one() -> None:
    assert lk.current_speech_handle() is None  # not inside any speech
    assert lk.missing_internals() == []  # also with a loop running
    handle = SpeechHandle.create()
    fut = lk.interrupt_future(handle)
    assert isinstance(fut, asyncio.Future) and not fut.done()
    assert lk.interrupt_source(handle) is None
    handle.interrupt(source="user_turn")
    assert fut.done() and handle.interrupted
    assert lk.interrupt_source(handle) == "user_turn"
    handle.interrupt(source="audio_activity")  # the first cause is the one kept
    assert lk.interrupt_source(handle) == "user_turn"


@pytest.mark.parametrize(
    ("kind", "source", "cause"), [("api", "programmatic", "api"), ("vad", "audio_activity", "vad")]
)
async def test_inside_a_real_speech(monkeypatch: pytest.MonkeyPatch, kind: str, source: str, cause: str) -> None:
    """The real call (AgentSession + VoiceAgent): the nodes see the speech that runs them, and the interrupt
    future and source of the cut speech are the framework's. (Under TURN_HANDLING=vad, so the cut lands on a
    scheduled answer rather than one prepared before the commit.)"""
    in_nodes: list[Any] = []
    futures: dict[str, tuple[Any, asyncio.Future[None] | None]] = {}
    current, future = lk.current_speech_handle, lk.interrupt_future

    def recording_current() -> Any:
        in_nodes.append(current())
        return in_nodes[-1]

    def recording_future(handle: Any) -> asyncio.Future[None] | None:
        futures[handle.id] = (handle, future(handle))
        return futures[handle.id][1]

    monkeypatch.setattr(lk, "current_speech_handle", recording_current)
    monkeypatch.setattr(lk, "interrupt_future", recording_future)
    async with FakeOpenAIServer() as server:
        out = await ScheduleRunner(server, ScriptedBackend(), EnergyVAD(), turn_handling="vad").run(
            [TurnPlan(words=8, cut=Cut(kind, "llm_token")), TurnPlan()]
        )
    assert out.violations == []
    assert out.traces[0]["interruptions"][0]["source"] == cause
    assert in_nodes and all(isinstance(h, SpeechHandle) and h.id in futures for h in in_nodes), in_nodes
    (cut, cut_fut), *_, (last, last_fut) = futures.values()
    assert isinstance(cut, SpeechHandle) and cut.interrupted and cut_fut is not None and cut_fut.done()
    assert lk.interrupt_source(cut) == source
    assert isinstance(last, SpeechHandle) and not last.interrupted and last_fut is not None and not last_fut.done()
    assert lk.interrupt_source(last) is None
    assert {h.id for h in in_nodes} >= {cut.id, last.id}


async def test_a_runner_cancelled_in_prewarm_still_closes() -> None:
    """The pool cancels a runner's initialize() when the worker closes during its prewarm; aclose() must then
    return once prewarm ends (livekit-agents 1.8.9 without the fix waits forever, the CI hang of 2026-11-27)."""
    assert lk.close_runners_cancelled_in_prewarm() and lk.close_runners_cancelled_in_prewarm()  # idempotent
    in_prewarm, release = threading.Event(), threading.Event()

    def slow_prewarm(_proc: Any) -> None:
        in_prewarm.set()
        release.wait(10)

    async def entrypoint(_ctx: Any) -> None:  # never called: no job is launched
        raise AssertionError("no job was launched")

    runner = ThreadJobExecutor(
        initialize_process_fnc=slow_prewarm,
        job_entrypoint_fnc=entrypoint,
        session_end_fnc=None,
        simulation_end_fnc=None,
        inference_executor=None,
        initialize_timeout=30.0,
        close_timeout=1.0,
        session_end_timeout=1.0,
        ping_interval=2.5,
        high_ping_threshold=0.5,
        http_proxy=None,
        loop=asyncio.get_running_loop(),
    )
    await runner.start()
    init = asyncio.create_task(runner.initialize())
    assert await asyncio.to_thread(in_prewarm.wait, 10), "prewarm never started"
    init.cancel()  # what ProcPool does to its spawn tasks on close
    with pytest.raises(asyncio.CancelledError):
        await init
    release.set()  # prewarm ends; the runner then reads the queued shutdown request
    await asyncio.wait_for(runner.aclose(), timeout=15)
    await asyncio.wait_for(runner.join(), timeout=5)


async def test_a_closed_runner_sends_the_worker_status_at_once(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """On the pool's process_closed (LiveKit's own EventEmitter, as the pool is one), the load is refreshed and
    the status sent, in that order, in a task of its own; a server without a pool is warned about, not patched."""
    from livekit.agents.utils import EventEmitter

    calls: list[str] = []

    class Server:
        _proc_pool: EventEmitter[str] = EventEmitter()

        async def _refresh_worker_load(self) -> None:
            calls.append("load")

        async def _update_worker_status(self) -> None:
            calls.append("status")

    server = Server()
    assert lk.report_status_when_jobs_end(server)
    server._proc_pool.emit("process_closed", object())
    assert calls == []  # not inside the pool's own step: after it took the runner off its list
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert calls == ["load", "status"]
    monkeypatch.setattr(lk, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="agent.livekit_internals"):
        assert not lk.report_status_when_jobs_end(object())
    assert lk.STATUS_NOW in caplog.text
