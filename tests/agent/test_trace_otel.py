"""Turn traces as OpenTelemetry spans (agent/trace_otel.py).

- The sink on the SDK's in-memory exporter: one turn span, a child per stage with the record's own times, every
  point an event, fields as attributes; a point or field the trace gains later shows up with no code change.
- The hook in agent/tracing.py: every finished record reaches every sink; a failing sink never ends a call.
- Over the wire: a stand-in OTLP receiver (tests/agent/otlp_receiver.py: OTLP/HTTP and OTLP/gRPC on loopback,
  decoded with opentelemetry-proto's own message types). `python -m agent simulate` with
  OTEL_EXPORTER_OTLP_ENDPOINT exports a real call's turn spans and LiveKit's own session spans over OTLP/HTTP; they
  are checked against the call's traces.jsonl. OTLP/gRPC is checked the same way with one record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent import trace_otel, tracing
from agent.trace_otel import TraceSpans
from tests.agent.otlp_receiver import OtlpReceiver
from tts_engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def record_of(points: dict[str, float], **fields: Any) -> dict[str, Any]:
    """A finished record as TraceCollector writes it, with a fixed clock (t0 = 100.0 s)."""
    ticks = iter([100.0])
    collector = tracing.TraceCollector("sess", None, clock=lambda: next(ticks, 100.0))
    if "vad_speech_start" in points:
        collector.speech_started(100.0 + points["vad_speech_start"])
    turn = collector.open_turn(100.0)
    turn.wall_t0 = 1_700_000_000.0
    for point, rel in points.items():
        turn.mark(point, 100.0 + rel)
    for key, value in fields.items():
        setattr(turn, key, value)
    record = collector.finish(turn)
    assert record is not None
    return record


@pytest.fixture
def spans() -> Iterator[tuple[TraceSpans, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield TraceSpans(provider), exporter
    provider.shutdown()


FULL = {"vad_speech_start": -1.2, "vad_speech_end": 0.0, "stt_request": -0.1, "stt_done": 0.08,
        "turn_committed": 0.081, "llm_request": 0.082, "llm_first_token": 0.125,
        "tts_first_text": 0.131, "tts_first_packet": 0.162, "first_frame_published": 0.163}


def test_a_turn_becomes_one_span_with_a_child_per_stage(spans) -> None:
    sink, exporter = spans
    record = record_of(FULL, user_text="hello", reply_chars=42)
    sink(record)
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    turn = by_name.pop("voice_agent.turn")
    ns = lambda rel: 1_700_000_000 * 10**9 + round(rel * 1e9)  # noqa: E731 - a one-line conversion
    assert (turn.start_time, turn.end_time) == (ns(-1.2), ns(0.163))
    assert turn.parent is None  # a root span, whatever span was current
    assert [e.name for e in turn.events] == sorted(record["points"], key=record["points"].get)
    assert all(e.timestamp == ns(record["points"][e.name]) for e in turn.events)
    attrs = turn.attributes
    assert attrs["voice_agent.turn_id"] == record["turn_id"] and attrs["voice_agent.outcome"] == "answered"
    assert attrs["voice_agent.reply_text_chars"] == 42 and attrs["voice_agent.complete"] is True
    assert turn.status.status_code is StatusCode.UNSET
    assert set(by_name) == {f"voice_agent.{name}" for name, _, _ in tracing.SEGMENTS}
    for name, start, end in tracing.SEGMENTS:
        child = by_name[f"voice_agent.{name}"]
        assert child.parent.span_id == turn.context.span_id and child.context.trace_id == turn.context.trace_id
        a, b = sorted((record["points"][start], record["points"][end]))
        assert (child.start_time, child.end_time) == (ns(a), ns(b)), name
        assert child.attributes["voice_agent.duration_ms"] == record["segments_ms"][name]
    # the words went to STT at the pause: the stage runs backwards, its sign is kept, its span runs forwards
    assert by_name["voice_agent.vad_to_stt"].attributes["voice_agent.duration_ms"] == -100.0


def test_what_the_trace_gains_later_appears_without_code(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    sink, exporter = spans
    record = record_of({"stt_request": 0.01, "stt_done": 0.05})
    record["points"]["eou_decided"] = 0.02  # a new point
    record["retries"] = 2  # a new field
    record["stages"] = ["a", "b"]
    monkeypatch.setattr(tracing, "SEGMENTS", (*tracing.SEGMENTS, ("eou", "vad_speech_end", "eou_decided")))
    sink(record)
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    turn = by_name["voice_agent.turn"]
    assert "eou_decided" in [e.name for e in turn.events]
    assert turn.attributes["voice_agent.retries"] == 2 and list(turn.attributes["voice_agent.stages"]) == ["a", "b"]
    assert "voice_agent.eou" in by_name and "voice_agent.llm_ttft" not in by_name  # only stages with both points


def test_an_error_and_an_interruption(spans) -> None:
    sink, exporter = spans
    irq = tracing.Interruption(interrupt_detected=100.3, audio_silenced=100.305, frames_published=7)
    record = record_of(FULL, errors=["llm: APITimeoutError: timed out"], outcome=tracing.Outcome.ERROR,
                       interruptions=[irq])
    sink(record)
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    turn = by_name["voice_agent.turn"]
    assert turn.status.status_code is StatusCode.ERROR and "APITimeoutError" in turn.status.description
    assert list(turn.attributes["voice_agent.errors"]) == ["llm: APITimeoutError: timed out"]
    cut = by_name["voice_agent.interruption"]
    assert cut.parent.span_id == turn.context.span_id
    assert cut.end_time - cut.start_time == 5_000_000  # 5 ms, in ns
    assert cut.attributes["voice_agent.frames_published"] == 7
    assert turn.end_time >= cut.end_time


def test_every_finished_record_reaches_every_sink_and_a_failing_one_is_contained(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def broken(_record: dict[str, Any]) -> None:
        raise RuntimeError("collector down")

    monkeypatch.setattr(tracing, "SINKS", [broken, lambda r: seen.append(r["turn_id"])])
    record = record_of({"stt_done": 0.05})
    assert seen == [record["turn_id"]]
    assert "trace sink" in caplog.text and "collector down" in caplog.text


def test_nothing_is_installed_without_an_endpoint_and_a_bad_protocol_is_named() -> None:
    assert trace_otel.install_from_env({}) is None
    assert trace_otel.otlp_protocol({}) == "http/protobuf"
    assert trace_otel.otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported"):
        trace_otel.otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


# -- a real OTLP receiver --------------------------------------------------------------------------------------
@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def test_a_simulated_call_reaches_the_receiver_over_otlp_http(receiver: OtlpReceiver, tiny_checkpoint: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "sim"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint, OTEL_SERVICE_NAME="voice-agent-otlp-http",
               TTS_DEEP_STREAM_DEVICE="cpu", ENV_FILE=os.devnull)
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "simulate", "--turns", "1", "--out", str(out),
         "--model-dir", str(tiny_checkpoint), "--max-frames-per-segment", "6"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 1  # the JSONL stays
    spans = receiver.wait("voice-agent-otlp-http", "voice_agent.turn")
    assert receiver.requests["http"] >= 1
    # LiveKit's own session spans went through the same tracer provider
    assert {"agent_session", "user_turn", "agent_turn", "llm_node", "tts_node"} <= {s.name for s in spans}
    (turn,) = [s for s in spans if s.name == "voice_agent.turn"]
    record = records[0]
    assert turn.attributes["voice_agent.turn_id"] == record["turn_id"] and turn.parent_span_id == ""
    ns = lambda rel: round((record["wall_t0"] + rel) * 1e9)  # noqa: E731 - a one-line conversion
    points = record["points"]
    assert abs(turn.start_ns - ns(min(points.values()))) <= 1000  # the record keeps wall_t0 in µs
    children = {s.name: s for s in spans if s.parent_span_id == turn.span_id}
    assert all(c.trace_id == turn.trace_id for c in children.values())
    for name, start, end in tracing.SEGMENTS:
        if start in points and end in points:
            child = children[f"voice_agent.{name}"]
            assert abs(child.start_ns - ns(min(points[start], points[end]))) <= 1000, name
            assert child.attributes["voice_agent.duration_ms"] == pytest.approx(record["segments_ms"][name])
    assert {name for name, _ in turn.events} == set(points)  # the points, as span events


def test_a_record_reaches_the_receiver_over_otlp_grpc(receiver: OtlpReceiver) -> None:
    script = (
        "from agent import trace_otel, tracing\n"
        "provider = trace_otel.install_from_env()\n"
        "collector = tracing.TraceCollector('grpc-sess', None)\n"
        "turn = collector.open_turn()\n"
        "turn.mark('stt_request'); turn.mark('stt_done')\n"
        "collector.finish(turn)\n"
        "provider.force_flush()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.grpc_endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
               OTEL_SERVICE_NAME="voice-agent-otlp-grpc")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = receiver.wait("voice-agent-otlp-grpc", "voice_agent.turn")
    assert receiver.requests["grpc"] >= 1 and receiver.requests["http"] == 0
    turn = next(s for s in spans if s.name == "voice_agent.turn")
    assert turn.attributes["voice_agent.session_id"] == "grpc-sess"
    assert {s.name for s in spans} >= {"voice_agent.stt", "voice_agent.vad_to_stt"}


def test_the_stand_in_receiver_answers_a_client_mistake_and_serves_on(receiver: OtlpReceiver) -> None:
    """The receiver is the test's peer: a bad request gets a 4xx, not a hang, and the next export still lands."""
    def post(path: str, body: bytes, content_type: str, encoding: str = "") -> int:
        headers = {"Content-Type": content_type, **({"Content-Encoding": encoding} if encoding else {})}
        req = urllib.request.Request(receiver.http_endpoint + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post("/v1/traces", b"{}", "application/json") == 415
    assert post("/v1/traces", b"\xff\xff\xff", "application/x-protobuf") == 400
    assert post("/v1/traces", b"not gzip", "application/x-protobuf", "gzip") == 400
    assert post("/v1/logs", b"", "application/x-protobuf") == 404
    assert post("/v1/traces", b"", "application/x-protobuf") == 200  # an empty request is a valid one
