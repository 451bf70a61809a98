"""Prometheus metrics: what an operator watches, in the text format at the gateway's ``/metrics`` and on an opt-in
port of the other processes (``A2AMESH_METRICS_PORT`` / ``--metrics-port``).

Nothing is recorded until a process exposes them (:func:`enable`, or :func:`serve`): every hook is one test of
the module flag :data:`enabled`, and ``prometheus_client`` is imported only then. Every metric is listed in
docs/observability.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "enable",
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


# --- hooks (call only when ``enabled``) ----------------------------------------------------------


def task_received(agent: str, attempt: int, published_ns: int | None, pending: int | None, now: float) -> None:
    """An agent replica got a delivery: its queue wait (first deliveries), a redelivery, the consumer's backlog."""
    assert _m is not None
    if attempt > 1:
        _m.redeliveries.labels(agent).inc()
    elif published_ns:
        _m.queue_wait.labels(agent).observe(max(now - published_ns / 1e9, 0.0))
    if pending is not None:
        _m.pending.labels(agent).set(pending)


def task_finished(agent: str, state: str, seconds: float) -> None:
    """An agent replica stored a task's final (``state``: the A2A state, written short: ``completed``)."""
    assert _m is not None
    _m.calls.labels(agent, state.removeprefix("TASK_STATE_").lower()).inc()
    _m.call_seconds.labels(agent).observe(seconds)


def node_finished(workflow: str, agent: str, status: str, seconds: float) -> None:
    """A node attempt was answered (``status``: completed, failed, paused, canceled)."""
    assert _m is not None
    _m.nodes.labels(workflow, agent, status).inc()
    _m.node_seconds.labels(workflow, agent).observe(seconds)


def execution_finished(workflow: str, status: str, seconds: float) -> None:
    assert _m is not None
    _m.executions.labels(workflow, status).inc()
    _m.execution_seconds.labels(workflow).observe(seconds)


def takeover(workflow: str) -> None:
    assert _m is not None
    _m.takeovers.labels(workflow).inc()


def track_runners(count: Callable[[], int]) -> None:
    """The executor's in-flight gauge reads ``count()`` at each scrape."""
    assert _m is not None
    _m.runners.set_function(count)


def set_executions(counts: dict[str, int]) -> None:
    """The namespace's executions per status, as the gateway read them for this scrape."""
    assert _m is not None
    for status, n in counts.items():
        _m.by_status.labels(status).set(n)


def store_error() -> None:
    assert _m is not None
    _m.store_errors.inc()


def model_tokens(model: str, input_tokens: int, output_tokens: int) -> None:
    assert _m is not None
    _m.tokens.labels(model, "input").inc(input_tokens)
    _m.tokens.labels(model, "output").inc(output_tokens)


def http_request(agent: str, status: int, seconds: float) -> None:
    assert _m is not None
    _m.http.labels(agent, str(status)).inc()
    _m.http_seconds.labels(agent).observe(seconds)
