"""Prometheus metrics: what an operator watches, in the text format at the gateway's ``/metrics`` and on an opt-in
port of the other processes (``A2AMESH_METRICS_PORT`` / ``--metrics-port``).

Nothing is recorded until a process exposes them (:func:`enable`, or :func:`serve`): every hook is one test of
the module flag :data:`enabled`, and ``prometheus_client`` is imported only then. Every metric is listed in
docs/observability.md.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from a2amesh import tracing
from a2amesh.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "configure_export",
    "enable",
    "export_interval",
    "export_wanted",
    "enabled",
    "execution_finished",
    "exposition",
    "http_request",
    "model_tokens",
    "node_finished",
    "serve",
    "set_executions",
    "store_error",
    "takeover",
    "task_finished",
    "task_received",
    "track_runners",
]

enabled = False
"""Whether this process records metrics (set by :func:`enable`)."""

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_m: _Metrics | None = None


class _Metrics:
    """The metric objects, made once by :func:`enable`."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.calls: Counter = Counter(
            "a2amesh_calls", "Tasks an agent replica finished, by agent and final state", ["agent", "outcome"]
        )
        self.call_seconds: Histogram = Histogram(
            "a2amesh_call_duration_seconds",
            "Time from pick-up to the stored final of a task",
            ["agent"],
            buckets=_LATENCY,
        )
        self.queue_wait: Histogram = Histogram(
            "a2amesh_queue_wait_seconds",
            "Time a request waited in its work queue before its first delivery",
            ["agent"],
            buckets=_LATENCY,
        )
        self.redeliveries: Counter = Counter(
            "a2amesh_redeliveries", "Deliveries of a request after its first (a crash, a hand-back)", ["agent"]
        )
        self.pending: Gauge = Gauge(
            "a2amesh_consumer_pending",
            "Requests waiting in an agent's JetStream consumer, as of its last delivery here",
            ["agent"],
        )
        self.nodes: Counter = Counter(
            "a2amesh_node_executions",
            "Node attempts answered, by workflow, agent and status",
            ["workflow", "agent", "status"],
        )
        self.node_seconds: Histogram = Histogram(
            "a2amesh_node_duration_seconds",
            "Time from a node attempt's dispatch to its answer",
            ["workflow", "agent"],
            buckets=_LATENCY,
        )
        self.executions: Counter = Counter(
            "a2amesh_executions",
            "Executions that ended on this replica, by workflow and status",
            ["workflow", "status"],
        )
        self.execution_seconds: Histogram = Histogram(
            "a2amesh_execution_duration_seconds",
            "Time from an execution's start to its end",
            ["workflow"],
            buckets=_LATENCY,
        )
        self.takeovers: Counter = Counter(
            "a2amesh_takeovers", "Executions this replica took over from a replica that went away", ["workflow"]
        )
        self.fenced: Counter = Counter(
            "a2amesh_fenced",
            "Runs whose write was refused by a stale fencing token or lease epoch (another replica took the work "
            "over while this one was paused or starved), each counted once, by process kind (agent, executor)",
            ["kind"],
        )
        self.runners: Gauge = Gauge("a2amesh_executions_in_flight", "Executions this executor replica is running")
        self.by_status: Gauge = Gauge(
            "a2amesh_executions_by_status",
            "Executions of the namespace in each status now (paused: waiting for a review), read by the gateway",
            ["status"],
        )
        self.store_errors: Counter = Counter(
            "a2amesh_store_errors", "Redis/Valkey calls that failed as unavailable (the work was handed back)"
        )
        self.tokens: Counter = Counter(
            "a2amesh_model_tokens", "Model tokens, by model and kind (input, output)", ["model", "kind"]
        )
        self.http: Counter = Counter(
            "a2amesh_http_requests",
            "Gateway requests to agents and workflows, by agent and status",
            ["agent", "status"],
        )
        self.http_seconds: Histogram = Histogram(
            "a2amesh_http_request_duration_seconds", "Gateway request latency", ["agent"], buckets=_LATENCY
        )


_children: dict[tuple[Any, ...], Any] = {}


def _bound(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once: prometheus_client checks the values and takes a lock on every
    ``labels()`` call, which the hot path would pay per task (the set of children is bounded as the registry's)."""
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def enable() -> None:
    """Record metrics in this process from now on (idempotent)."""
    global enabled, _m
    if _m is None:
        _m = _Metrics()
    enabled = True


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Record metrics and serve them in the text format on ``host:port`` (``/metrics``, from a thread of its own)."""
    from prometheus_client import start_http_server

    enable()
    start_http_server(port, addr=host)


def exposition() -> tuple[bytes, str]:
    """The metrics in the Prometheus text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    enable()
    return generate_latest(), CONTENT_TYPE_LATEST


# --- OTLP export -------------------------------------------------------------------------------

_EXPORTERS = ("otlp", "console")
_export_interval: float | None = None


def export_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for metrics over OTLP (:func:`a2amesh.tracing.signal_wanted`)."""
    return tracing.signal_wanted(environ, "metrics")


def configure_export(service: str, environ: MutableMapping[str, str] | None = None) -> bool:
    """Export this process's metrics (the same as ``/metrics``) over OTLP/HTTP, or to the console, every
    ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60,000 by default) and once more at exit, when the standard variables
    ask for it (:func:`export_wanted`); returns whether they are. Recording starts with it.

    Raises:
        ConfigError: ``OTEL_METRICS_EXPORTER`` names an exporter this build does not ship, or the protocol is not
            ``http/protobuf``.
    """
    env = os.environ if environ is None else environ
    if not export_wanted(env):
        return False
    names = [n.strip() for n in (env.get("OTEL_METRICS_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ConfigError("OTEL_METRICS_EXPORTER", "", f"unknown exporter {unknown[0]!r}; use otlp, console or none")
    protocol = env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if "otlp" in names and protocol and protocol != "http/protobuf":
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL", "", f"{protocol!r} is not shipped; use http/protobuf")
    try:
        interval = max(float(env.get("OTEL_METRIC_EXPORT_INTERVAL") or 60000) / 1000, 0.05)
    except ValueError:
        raise ConfigError("OTEL_METRIC_EXPORT_INTERVAL", "", "milliseconds, a number") from None
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExporter
    from opentelemetry.sdk.resources import Resource

    exporters: list[MetricExporter] = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporters.append(OTLPMetricExporter())
        else:
            exporters.append(ConsoleMetricExporter(out=sys.stderr))
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    enable()
    global _export_interval
    _export_interval = interval
    _Export(Resource.create({} if named else {"service.name": service}), exporters, interval).start()
    return True


def export_interval() -> float | None:
    """Seconds between two OTLP exports of this process's metrics, or None when they are not exported."""
    return _export_interval


class _Export:
    """Reads the Prometheus registry every ``interval`` seconds, in a thread of its own, and sends it as OTLP
    data points: counters as monotonic cumulative sums (named without ``_total``), gauges as gauges, histograms
    as cumulative explicit-bucket histograms; ``_created`` samples give each series its start time."""

    def __init__(self, resource: Any, exporters: list[Any], interval: float) -> None:
        self.resource, self.exporters, self.interval = resource, exporters, interval
        self.started = time.time_ns()
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="a2amesh-metrics-export", daemon=True).start()
        atexit.register(self.close)

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            self.export()

    def close(self) -> None:
        """The last export, at exit: given 2 s (a collector away must not hold the process's exit for the exporter's
        timeout and retries)."""
        self.stop.set()
        last = threading.Thread(target=self.export, name="a2amesh-metrics-last", daemon=True)
        last.start()
        last.join(2.0)
        if not last.is_alive():
            for exporter in self.exporters:
                exporter.shutdown()

    def export(self) -> None:
        with self.lock:  # the loop's export and the one at exit
            data = self.collect()
            for exporter in self.exporters:
                try:
                    exporter.export(data)
                except Exception as e:  # an export failure is not the process's: the next one may pass
                    print(f"a2amesh: metrics export failed: {e}", file=sys.stderr)

    def collect(self) -> Any:
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Gauge,
            Histogram,
            HistogramDataPoint,
            Metric,
            MetricsData,
            NumberDataPoint,
            ResourceMetrics,
            ScopeMetrics,
            Sum,
        )
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from prometheus_client import REGISTRY

        now = time.time_ns()
        cumulative = AggregationTemporality.CUMULATIVE
        out: list[Metric] = []
        for family in REGISTRY.collect():
            series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
            for sample in family.samples:
                labels = {k: v for k, v in sample.labels.items() if k != "le"}
                one = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": []})
                suffix = sample.name[len(family.name) :]
                if suffix == "_created":
                    one["start"] = int(sample.value * 1e9)
                elif suffix == "_bucket":
                    one["buckets"].append((float(sample.labels["le"]), sample.value))
                else:
                    one[suffix or "value"] = sample.value
            start = self.started
            data: Any
            if family.type == "counter":
                points = [
                    NumberDataPoint(s["labels"], s.get("start", start), now, s.get("_total", s.get("value", 0.0)))
                    for s in series.values()
                ]
                data = Sum(points, cumulative, is_monotonic=True)
            elif family.type == "gauge":
                data = Gauge([NumberDataPoint(s["labels"], start, now, s.get("value", 0.0)) for s in series.values()])
            elif family.type == "histogram":
                hpoints = []
                for s in series.values():
                    bounds = sorted(s["buckets"])
                    counts, below = [], 0.0
                    for _, cumulated in bounds:
                        counts.append(int(cumulated - below))
                        below = cumulated
                    hpoints.append(
                        HistogramDataPoint(
                            s["labels"],
                            s.get("start", start),
                            now,
                            count=int(s.get("_count", below)),
                            sum=s.get("_sum", 0.0),
                            bucket_counts=counts,
                            explicit_bounds=[le for le, _ in bounds if le != float("inf")],
                            min=None,  # type: ignore[arg-type]  # not kept by Prometheus: left out of the export
                            max=None,  # type: ignore[arg-type]
                        )
                    )
                data = Histogram(hpoints, cumulative)
            else:  # info, summary, …: not among ours
                continue
            if data.data_points:
                out.append(Metric(family.name, family.documentation, family.unit or None, data))
        scope = ScopeMetrics(InstrumentationScope("a2amesh"), out, "")
        return MetricsData([ResourceMetrics(self.resource, [scope], "")])


# --- hooks (call only when ``enabled``) ----------------------------------------------------------


def task_received(agent: str, attempt: int, published_ns: int | None, pending: int | None, now: float) -> None:
    """An agent replica got a delivery: its queue wait (first deliveries), a redelivery, the consumer's backlog."""
    assert _m is not None
    if attempt > 1:
        _bound(_m.redeliveries, agent).inc()
    elif published_ns:
        _bound(_m.queue_wait, agent).observe(max(now - published_ns / 1e9, 0.0))
    if pending is not None:
        _bound(_m.pending, agent).set(pending)


def task_finished(agent: str, state: str, seconds: float) -> None:
    """An agent replica stored a task's final (``state``: the A2A state, written short: ``completed``)."""
    assert _m is not None
    _bound(_m.calls, agent, state.removeprefix("TASK_STATE_").lower()).inc()
    _bound(_m.call_seconds, agent).observe(seconds)


def node_finished(workflow: str, agent: str, status: str, seconds: float) -> None:
    """A node attempt was answered (``status``: completed, failed, paused, canceled)."""
    assert _m is not None
    _bound(_m.nodes, workflow, agent, status).inc()
    _bound(_m.node_seconds, workflow, agent).observe(seconds)


def execution_finished(workflow: str, status: str, seconds: float) -> None:
    assert _m is not None
    _bound(_m.executions, workflow, status).inc()
    _bound(_m.execution_seconds, workflow).observe(seconds)


def takeover(workflow: str) -> None:
    assert _m is not None
    _bound(_m.takeovers, workflow).inc()


def fenced(kind: str) -> None:
    assert _m is not None
    _bound(_m.fenced, kind).inc()


def track_runners(count: Callable[[], int]) -> None:
    """The executor's in-flight gauge reads ``count()`` at each scrape."""
    assert _m is not None
    _m.runners.set_function(count)


def set_executions(counts: dict[str, int]) -> None:
    """The namespace's executions per status, as the gateway read them for this scrape."""
    assert _m is not None
    for status, n in counts.items():
        _bound(_m.by_status, status).set(n)


def store_error() -> None:
    assert _m is not None
    _m.store_errors.inc()


def model_tokens(model: str, input_tokens: int, output_tokens: int) -> None:
    assert _m is not None
    _bound(_m.tokens, model, "input").inc(input_tokens)
    _bound(_m.tokens, model, "output").inc(output_tokens)


def http_request(agent: str, status: int, seconds: float) -> None:
    assert _m is not None
    _bound(_m.http, agent, str(status)).inc()
    _bound(_m.http_seconds, agent).observe(seconds)
