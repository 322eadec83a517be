"""Each finished turn trace as OpenTelemetry spans, through LiveKit's tracer provider, exported over OTLP.

- `TraceSpans(tracer_provider)` is a trace sink (`agent.tracing.SINKS`): called with each finished record (the dict
  `TraceCollector` writes, traces/README.md), it emits one `voice_agent.turn` span with a child per stage. Times are
  explicit, from the record alone: `wall_t0` (Unix s) + each point (s relative to t0), so the spans say when
  things happened, not when the record was finished.
  - the turn span covers every point and interruption of the record; each point is an event on it;
  - one child per stage of `agent.tracing.SEGMENTS` whose two points are in the record (`voice_agent.stt`,
    `voice_agent.llm_ttft`, ..., `voice_agent.e2e`), with `voice_agent.duration_ms` = its `segments_ms` value (a
    stage that runs backwards, e.g. `vad_to_stt` when STT starts at the pause, keeps its sign there and spans the
    two points in time order);
  - one child `voice_agent.interruption` per barge-in (detected -> silenced);
  - every other scalar (or list of scalars) field of the record is an attribute `voice_agent.<key>`; an `error`
    outcome sets the span's status to ERROR.
  A point, stage or field added to the trace later shows up with no change here.
- `install_from_env()`: when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, an SDK
  `TracerProvider` (service name `OTEL_SERVICE_NAME`, default `voice-agent`) with a batching OTLP exporter
  (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the default, or `grpc`; the exporter reads the other standard
  `OTEL_EXPORTER_OTLP_*` variables itself) becomes LiveKit's tracer provider
  (`livekit.agents.telemetry.set_tracer_provider`, so LiveKit's own session spans go the same way) and the sink is
  added to `agent.tracing.SINKS`. Once per process; without the variable it does nothing. The JSONL files stay.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Status, StatusCode

from agent import tracing
from common.env import ConfigError

logger = logging.getLogger("agent.trace_otel")

PREFIX = "voice_agent."
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_SERVICE_NAME = "voice-agent"
#: record fields that become spans and events rather than attributes
_STRUCTURE = ("points", "segments_ms", "interruptions")

_install_lock = threading.Lock()
_installed: TracerProvider | None = None


class TraceSpans:
    """A trace sink: each finished record -> one turn span and its stage children (see the module docstring)."""

    def __init__(self, tracer_provider: trace.TracerProvider) -> None:
        self._tracer = tracer_provider.get_tracer("voice_agent.tracing")

    def __call__(self, record: Mapping[str, Any]) -> None:
        wall_t0 = float(record["wall_t0"])
        points: dict[str, float] = dict(record.get("points") or {})
        interruptions = list(record.get("interruptions") or [])
        times = [*points.values(), 0.0]
        for irq in interruptions:
            times += [t for t in (irq.get("interrupt_detected"), irq.get("audio_silenced")) if t is not None]

        base_us = round(wall_t0 * 1e6)  # the record keeps wall_t0 in µs; summed in floats, 1.7e9 s loses ~200 ns

        def ns(rel_s: float) -> int:  # a time relative to t0 -> Unix ns
            return base_us * 1000 + round(rel_s * 1e9)

        # a root span (an empty context): the record is finished at whatever moment the next turn opens, inside
        # whichever LiveKit span happens to be current then, which says nothing about this turn
        turn = self._tracer.start_span(
            f"{PREFIX}turn", context=Context(), start_time=ns(min(times)), attributes=_attributes(record)
        )
        try:
            for point, rel in sorted(points.items(), key=lambda item: item[1]):
                turn.add_event(point, timestamp=ns(rel))
            parent = trace.set_span_in_context(turn)
            segments_ms = record.get("segments_ms") or {}
            for name, start, end in tracing.SEGMENTS:
                if start in points and end in points:
                    a, b = sorted((points[start], points[end]))
                    attrs: dict[str, str | float] = {f"{PREFIX}from": start, f"{PREFIX}to": end}
                    if name in segments_ms:
                        attrs[f"{PREFIX}duration_ms"] = float(segments_ms[name])
                    self._tracer.start_span(
                        f"{PREFIX}{name}", context=parent, start_time=ns(a), attributes=attrs
                    ).end(end_time=ns(b))
            for irq in interruptions:
                begin = irq.get("interrupt_detected")
                if begin is None:
                    continue
                silenced = irq.get("audio_silenced")
                span = self._tracer.start_span(
                    f"{PREFIX}interruption", context=parent, start_time=ns(begin), attributes=_attributes(irq)
                )
                span.end(end_time=ns(begin if silenced is None else max(begin, silenced)))
            if record.get("outcome") == "error" or record.get("errors"):
                turn.set_status(Status(StatusCode.ERROR, "; ".join(map(str, record.get("errors") or []))[:500]))
        finally:
            turn.end(end_time=ns(max(times)))


def _attributes(fields: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attributes of a record's plain fields (scalars and lists of one scalar type)."""
    attrs: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _STRUCTURE or value is None:
            continue
        if isinstance(value, bool | int | float | str):
            attrs[PREFIX + key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            attrs[PREFIX + key] = [str(v) for v in value]
        elif isinstance(value, list | tuple) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                     for v in value):
            attrs[PREFIX + key] = [float(v) for v in value]
    return attrs


def otlp_protocol(environ: Mapping[str, str] | None = None) -> str:
    """`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf; ConfigError
    naming the variable for a protocol this agent cannot export with."""
    env = os.environ if environ is None else environ
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if value := (env.get(name) or "").strip():
            if value not in PROTOCOLS:
                raise ConfigError(f"{name}={value!r} is not supported; allowed: {', '.join(PROTOCOLS)}")
            return value
    return "http/protobuf"


def otlp_exporter(protocol: str) -> SpanExporter:
    """The OTLP span exporter for `protocol`; the endpoint, headers, timeout and TLS settings come from the
    standard `OTEL_EXPORTER_OTLP_*` variables, read by the exporter itself."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter()
    raise ValueError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")


def check_env(environ: Mapping[str, str] | None = None) -> None:
    """ConfigError naming the variable when an OTLP endpoint is set with a protocol this agent cannot export."""
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in ENDPOINT_VARS):
        otlp_protocol(env)


def install_from_env(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """With an OTLP endpoint configured: LiveKit's tracer provider exporting over OTLP, and the trace sink
    (see the module docstring). Returns the provider (the same one on every later call), or None."""
    global _installed
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in ENDPOINT_VARS):
        return None
    with _install_lock:
        if _installed is None:
            from livekit.agents.telemetry import set_tracer_provider

            service = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE_NAME}
            protocol = otlp_protocol(env)
            provider = TracerProvider(resource=Resource.create(service))
            provider.add_span_processor(BatchSpanProcessor(otlp_exporter(protocol)))
            set_tracer_provider(provider)
            tracing.SINKS.append(TraceSpans(provider))
            _installed = provider
            endpoint = next(env[name] for name in ENDPOINT_VARS if env.get(name))
            logger.info("OpenTelemetry: turn traces and LiveKit's spans go to %s (OTLP %s)", endpoint, protocol)
        return _installed


def flush(timeout_s: float = 5.0) -> None:
    """Send the spans still queued (a job ending; the provider also flushes when the process exits)."""
    if _installed is not None:
        _installed.force_flush(int(timeout_s * 1000))
