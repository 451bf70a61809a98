"""A test OTLP/HTTP receiver of traces and metrics: a real HTTP server that decodes the OTLP protobuf the exporters
send."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received, its ids in hex."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[str]
    status_code: int
    start_ns: int = 0
    end_ns: int = 0


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point as received: a sum's or a gauge's ``value``, or a histogram's count, sum, bucket
    counts and bounds."""

    service: str
    metric: str
    kind: str  # sum, gauge, histogram
    attributes: dict[str, Any]
    value: float = 0.0
    monotonic: bool = False
    cumulative: bool = False
    count: int = 0
    sum: float = 0.0
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    start_ns: int = 0
    time_ns: int = 0


@dataclass
class OtlpReceiver:
    """Serves ``POST /v1/traces`` and ``POST /v1/metrics`` on a free loopback port; :attr:`spans` holds every span
    received, :attr:`points` every metric data point (in the order received)."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    bad_requests: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver._add(ExportTraceServiceRequest.FromString(body))
                    out = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver._add_metrics(ExportMetricsServiceRequest.FromString(body))
                    out = ExportMetricsServiceResponse().SerializeToString()
                else:
                    receiver.bad_requests.append(self.path)
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _add(self, request: ExportTraceServiceRequest) -> None:
        got: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name")),
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=[e.name for e in s.events],
                            status_code=s.status.code,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans.extend(got)

    def _add_metrics(self, request: ExportMetricsServiceRequest) -> None:
        got: list[ReceivedPoint] = []
        cumulative = 2  # AGGREGATION_TEMPORALITY_CUMULATIVE
        for rm in request.resource_metrics:
            service = str({a.key: _value(a.value) for a in rm.resource.attributes}.get("service.name"))
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if kind in ("sum", "gauge"):
                        data = m.sum if kind == "sum" else m.gauge
                        for p in data.data_points:
                            value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
                            got.append(
                                ReceivedPoint(
                                    service,
                                    m.name,
                                    kind,
                                    {a.key: _value(a.value) for a in p.attributes},
                                    value=value,
                                    monotonic=kind == "sum" and m.sum.is_monotonic,
                                    cumulative=kind == "sum" and m.sum.aggregation_temporality == cumulative,
                                    start_ns=p.start_time_unix_nano,
                                    time_ns=p.time_unix_nano,
                                )
                            )
                    elif kind == "histogram":
                        for h in m.histogram.data_points:
                            got.append(
                                ReceivedPoint(
                                    service,
                                    m.name,
                                    kind,
                                    {a.key: _value(a.value) for a in h.attributes},
                                    cumulative=m.histogram.aggregation_temporality == cumulative,
                                    count=h.count,
                                    sum=h.sum,
                                    bucket_counts=tuple(h.bucket_counts),
                                    bounds=tuple(h.explicit_bounds),
                                    start_ns=h.start_time_unix_nano,
                                    time_ns=h.time_unix_nano,
                                )
                            )
        with self._lock:
            self.points.extend(got)

    def latest(self, metric: str, **attributes: Any) -> ReceivedPoint | None:
        """The last point received of ``metric`` whose attributes include ``attributes``."""
        with self._lock:
            for p in reversed(self.points):
                if p.metric == metric and all(p.attributes.get(k) == v for k, v in attributes.items()):
                    return p
        return None

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith(prefix)]
