"""The open-call journal (agent/journal.py): a worker killed mid-turn leaves its open turn on disk, and recovery
closes it in the traces (and OpenTelemetry) as `worker_lost`, once. The dead worker is a real process killed with
SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent import tracing
from agent.journal import WORKER_LOST, CallJournal, journal_dir, recover
from agent.trace_otel import TraceSpans
from agent.tracing import TraceCollector

ROOT = Path(__file__).resolve().parents[2]

# a "worker": one call, a turn that got as far as the LLM request, then it waits to be killed
DYING_WORKER = textwrap.dedent(
    """
    import sys, time
    from agent.journal import CallJournal
    from agent.tracing import TraceCollector
    traces = sys.argv[1]
    collector = TraceCollector("room-a-123456", traces)
    journal = CallJournal(traces, room="room-a", agent_identity="agent-AJ_x", job_id="AJ_x", session_id="room-a-123456")
    journal.watch(collector)
    collector.speech_started()
    turn = collector.open_turn()
    turn.user_text = "hello there"
    turn.mark("stt_done")
    turn.mark("llm_request")
    print("ready", flush=True)
    time.sleep(60)
    """
)


def records(traces: Path) -> list[dict]:
    return [json.loads(line) for path in traces.glob("*.jsonl") for line in path.read_text().splitlines()]


def test_a_killed_workers_open_turn_is_closed_as_worker_lost_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()  # OpenTelemetry, as agent/trace_otel.py installs it with an endpoint set
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "SINKS", [TraceSpans(provider)])
    traces = tmp_path / "traces"
    proc = subprocess.Popen(
        [sys.executable, "-c", DYING_WORKER, str(traces)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert recover(traces) == []  # its worker is alive: not recovered
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert records(traces) == []  # the dead worker wrote nothing itself

    lost = recover(traces, reason="killed by signal 9")
    assert [(c.room, c.agent_identity, c.job_id, c.turns) for c in lost] == [("room-a", "agent-AJ_x", "AJ_x", 1)]
    (record,) = records(traces)
    assert record["outcome"] == WORKER_LOST and record["turn_id"] == "room-a-123456-t1"
    assert set(record["points"]) == {"vad_speech_start", "vad_speech_end", "stt_done", "llm_request"}
    assert record["errors"] == [f"worker_lost: the worker (pid {proc.pid}) died: killed by signal 9"]
    assert record["user_text_chars"] == len("hello there") and record["complete"] is False
    (span,) = [sp for sp in exporter.get_finished_spans() if sp.name == "voice_agent.turn"]  # the same record as a span
    attributes = span.attributes or {}
    assert attributes["voice_agent.outcome"] == WORKER_LOST and attributes["voice_agent.turn_id"] == record["turn_id"]
    assert recover(traces) == [] and len(records(traces)) == 1  # claimed and gone: never written twice
    assert list(journal_dir(traces).iterdir()) == []


def test_a_call_that_ends_normally_leaves_no_entry_and_its_finished_turns_are_not_replayed(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    collector = TraceCollector("s1", traces)
    journal = CallJournal(traces, room="r", agent_identity="agent-1", job_id="AJ_1", session_id="s1")
    journal.watch(collector)
    first = collector.open_turn()
    first.mark("first_frame_published")
    collector.open_turn()  # finishes the first (its record written by the collector)
    entry = json.loads(journal.path.read_text())
    assert [t["turn_id"] for t in entry["turns"]] == ["s1-t2"] and entry["room"] == "r"
    # recovering only a given pid: this live process is named, so its call counts as lost (the supervisor's case)
    lost = recover(traces, pids={os.getpid()}, reason="test")
    assert [c.turns for c in lost] == [1]
    outcomes = [r["outcome"] for r in records(traces)]
    assert sorted(outcomes) == ["answered", WORKER_LOST]

    journal2 = CallJournal(traces, room="r", agent_identity="agent-2", job_id="AJ_2", session_id="s2")
    assert journal2.path.exists()
    journal2.close()
    assert not journal2.path.exists() and recover(traces, pids={os.getpid()}) == []
