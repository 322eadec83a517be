"""What `GET /metrics` exposes (Prometheus text, the server's own registry, never the process-global one).

HTTP instruments, written by the routes: `tts_http_requests{endpoint, status}` (status is the HTTP code, or
`disconnected` / `error` for a stream that ended after its headers), `tts_stream_ttfa_seconds` (request received ->
first audio byte written, completed streams only), `tts_stream_rtf` (stream wall time / audio duration),
`tts_stream_client_disconnects`, `tts_stream_client_stalls` (streams cut after their client took nothing for the idle
timeout), `tts_http_streams_in_flight` (HTTP and WebSocket streams being written). Engine
counters and gauges (`tts_engine_*`: every name of `engine.counters.NAMES`, open/running streams, capacity,
worker_alive) are read from `engine.stats()` at scrape time, so they are never stale.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineCollector:
    """Exposes the engine's counters and gauges at scrape time."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def collect(self) -> Any:
        stats = self.engine.stats()
        for name in self.engine.counters.NAMES:
            family = CounterMetricFamily(f"tts_engine_{name}", f"engine counter {name}")
            family.add_metric([], stats[name])
            yield family
        for name, key in (
            ("open_streams", "open_streams"),
            ("running_streams", "running_streams"),
            ("capacity", "capacity"),
            ("worker_alive", "worker_alive"),
        ):
            gauge = GaugeMetricFamily(f"tts_engine_{name}", f"engine gauge {name}")
            gauge.add_metric([], float(stats[key]))
            yield gauge


class ServerMetrics:
    """One registry with the HTTP instruments and the engine collector; `render()` is the `/metrics` body."""

    def __init__(self, engine: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests_total = Counter(
            "tts_http_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=self.registry
        )
        self.ttfa = Histogram(
            "tts_stream_ttfa_seconds",
            "request received -> first PCM byte written",
            registry=self.registry,
            buckets=(0.02, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1.0, 2.0, 5.0),
        )
        self.rtf = Histogram(
            "tts_stream_rtf",
            "stream wall time / audio duration",
            registry=self.registry,
            buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 5.0),
        )
        self.disconnects = Counter(
            "tts_stream_client_disconnects", "streams ended by the client", registry=self.registry
        )
        self.stalls = Counter(
            "tts_stream_client_stalls", "streams cut: their client took nothing for the idle timeout",
            registry=self.registry,
        )
        self.in_flight = Gauge("tts_http_streams_in_flight", "HTTP streams being written", registry=self.registry)
        self.registry.register(EngineCollector(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)
