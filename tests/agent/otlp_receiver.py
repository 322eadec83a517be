"""A stand-in OTLP trace receiver for the tests: the real protocol on loopback, spans kept in memory.

- OTLP/HTTP: `POST /v1/traces` with an ExportTraceServiceRequest in protobuf (gzip or deflate when the exporter says
  so in Content-Encoding) -> 200 with an ExportTraceServiceResponse. A client mistake gets a 4xx and the server
  serves the next request: 415 for another content type, 400 for a body that does not decode, 404 for another path.
- OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, through the proto package's own servicer.
- `spans(service)` / `wait(service, name, want)`: what arrived for one `service.name`, as `Span` records (ids in hex,
  times in Unix ns, attributes and event names as plain Python values).
- Replaces Jaeger as the test receiver (a ~15-minute Go build on two cores, docs/operations.md "Setup"): what is
  checked is that the agent exports OTLP, which the message types of opentelemetry-proto define.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PROTOBUF = "application/x-protobuf"
DECOMPRESS = {"": lambda b: b, "identity": lambda b: b, "gzip": gzip.decompress, "deflate": zlib.decompress}


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int]] = field(default_factory=list)  # (name, Unix ns)


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return None if kind is None else getattr(v, kind)


class OtlpReceiver:
    """Start with `start()` (or as a context manager); `http_endpoint` / `grpc_endpoint` go to the exporter."""

    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self.requests = {"http": 0, "grpc": 0}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    return self._answer(404, b"OTLP traces are POSTed to /v1/traces")
                if (self.headers.get("Content-Type") or "").split(";")[0].strip() != PROTOBUF:
                    return self._answer(415, f"this receiver takes {PROTOBUF}".encode())
                encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
                if encoding not in DECOMPRESS:
                    return self._answer(415, f"unknown Content-Encoding {encoding!r}".encode())
                try:
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(DECOMPRESS[encoding](body))
                except (DecodeError, OSError, zlib.error) as exc:
                    return self._answer(400, f"not an ExportTraceServiceRequest: {exc}".encode())
                receiver._keep(request, "http")
                self._answer(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString(), PROTOBUF)

            def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet: the test reads the store, not a log
                pass

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver._keep(request, "grpc")
                return trace_service_pb2.ExportTraceServiceResponse()

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._grpc)
        self.grpc_endpoint = f"http://127.0.0.1:{self._grpc.add_insecure_port('127.0.0.1:0')}"

    def start(self) -> OtlpReceiver:
        threading.Thread(target=self._http.serve_forever, name="otlp-http", daemon=True).start()
        self._grpc.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=None)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _keep(self, request: trace_service_pb2.ExportTraceServiceRequest, transport: str) -> None:
        spans = []
        for rs in request.resource_spans:
            service = str(next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(Span(
                        service=service, name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano, attributes={a.key: _value(a.value) for a in s.attributes},
                        events=[(e.name, e.time_unix_nano) for e in s.events],
                    ))
        with self._lock:
            self._spans += spans
            self.requests[transport] += 1

    def spans(self, service: str) -> list[Span]:
        with self._lock:
            return [s for s in self._spans if s.service == service]

    def wait(self, service: str, name: str, want: int = 1, timeout_s: float = 30.0) -> list[Span]:
        """The service's spans once `want` spans called `name` arrived (exporters batch), or at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans(service)
            if sum(s.name == name for s in spans) >= want or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)
