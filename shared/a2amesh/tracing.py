"""OpenTelemetry traces: one trace per top-level call, across every process, through the ``traceparent`` header.

Off unless the standard ``OTEL_*`` variables ask for it (:func:`configure`, called by entry points): then
nothing here imports the SDK, every hook is one test of the module flag :data:`enabled`, and the a2a-sdk's
own decorators are switched off too. On, each process exports its spans over OTLP/HTTP (or to the console).

The rule that links the processes: a call goes out with the **current** span as its parent
(:func:`inject`, applied by the mesh client to every request's headers), and a worker opens its span under
the request's ``traceparent``. Span and attribute names are listed in docs/observability.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from a2amesh.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "configure",
    "current_ids",
    "enabled",
    "end",
    "event",
    "execution_done",
    "execution_span",
    "handler_span",
    "inject",
    "model_result",
    "model_span",
    "node_span",
    "request_span",
    "set_attributes",
    "task_done",
    "task_span",
    "tool_span",
    "trace_id_of",
    "use",
    "wanted",
]

enabled = False
"""Whether this process records spans (set once by :func:`configure`)."""

_tracer: Tracer | None = None
_NOOP: AbstractContextManager[None] = contextlib.nullcontext(None)
_EXPORTERS = ("otlp", "console")
TRACEPARENT = "traceparent"  # the same header name as bus/headers.py (the foundation layer cannot import bus/)


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces: an OTLP endpoint, or ``OTEL_TRACES_EXPORTER`` other than
    ``none``; never with ``OTEL_SDK_DISABLED=true``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(service: str, environ: MutableMapping[str, str] | None = None) -> bool:
    """Set up tracing for this process (``service``: its ``service.name`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` names one); returns whether spans are recorded.

    Called by entry points before the gateway's modules are imported: when traces are off, it also turns the
    a2a-sdk's span decorators off (``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``, read at their import), so
    they cost nothing; when on, they join the same trace.

    Raises:
        ConfigError: ``OTEL_TRACES_EXPORTER`` names an exporter this build does not ship.
    """
    global enabled, _tracer
    env = os.environ if environ is None else environ
    if not wanted(env):
        env.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
        return False
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ConfigError("OTEL_TRACES_EXPORTER", "", f"unknown exporter {unknown[0]!r}; use otlp, console or none")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if "otlp" in names and protocol and protocol != "http/protobuf":
        raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL", "", f"{protocol!r} is not shipped; use http/protobuf")
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service}))
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout may be a protocol (`a2amesh mcp`)
        provider.add_span_processor(BatchSpanProcessor(exporter))  # exported off the event loop, in its thread
    trace.set_tracer_provider(provider)  # the SDK flushes it at interpreter exit
    _bind_api()
    _tracer = provider.get_tracer("a2amesh")
    enabled = True
    return True


class _Api:
    """What the hooks call of the OpenTelemetry API, bound once (an import statement per call costs)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.kinds = {kind.name.lower(): kind for kind in trace.SpanKind}
        self.attach, self.detach = context.attach, context.detach
        self.set_span_in_context, self.get_current_span = trace.set_span_in_context, trace.get_current_span
        self.NonRecordingSpan, self.SpanContext, self.TraceFlags = (
            trace.NonRecordingSpan,
            trace.SpanContext,
            trace.TraceFlags,
        )
        self.Status, self.ERROR = trace.Status, trace.StatusCode.ERROR


_api: _Api | None = None


def _bind_api() -> None:
    global _api
    _api = _Api()


# --- the general hooks --------------------------------------------------------------------------


def _parent(traceparent: str | None, parent_span: Span | None) -> Context | None:
    """The context a new span starts in: ``parent_span``, else the remote ``traceparent`` (read here: the SDK's
    propagator costs several times more), else the current one (None)."""
    assert _api is not None
    if parent_span is not None:
        return _api.set_span_in_context(parent_span)
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[0]) != 2 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
        return None
    try:
        remote = _api.SpanContext(
            int(parts[1], 16), int(parts[2], 16), is_remote=True, trace_flags=_api.TraceFlags(int(parts[3][:2], 16) & 1)
        )
    except ValueError:
        return None
    return _api.set_span_in_context(_api.NonRecordingSpan(remote)) if remote.is_valid else None


class _Current(AbstractContextManager["Span | None"]):
    """A started span made current for a block and ended after it; an exception leaving the block is recorded."""

    __slots__ = ("_end", "_span", "_token")

    def __init__(self, span: Span, *, end: bool = True) -> None:
        self._span = span
        self._end = end
        self._token: object = None

    def __enter__(self) -> Span:
        assert _api is not None
        self._token = _api.attach(_api.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert _api is not None
        try:
            if self._end and isinstance(exc, Exception):
                self._span.record_exception(exc)
                self._span.set_status(_api.Status(_api.ERROR, f"{type(exc).__name__}: {exc}"[:1000]))
        finally:
            _api.detach(self._token)  # type: ignore[arg-type]
            if self._end:
                self._span.end()


def start(
    name: str,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
    traceparent: str | None = None,
    parent_span: Span | None = None,
) -> Span | None:
    """Start a span that is not made current (None when tracing is off); end it with :func:`end`."""
    if _tracer is None:
        return None
    assert _api is not None
    return _tracer.start_span(
        name, context=_parent(traceparent, parent_span), kind=_api.kinds[kind], attributes=_clean(attributes)
    )


def _current(name: str, kind: str, attributes: Mapping[str, Any] | None, traceparent: str | None) -> _Current:
    assert _tracer is not None
    assert _api is not None
    span = _tracer.start_span(
        name, context=_parent(traceparent, None), kind=_api.kinds[kind], attributes=_clean(attributes)
    )
    return _Current(span)


def span(
    name: str, *, kind: str = "internal", attributes: Mapping[str, Any] | None = None, traceparent: str | None = None
) -> AbstractContextManager[Span | None]:
    """A span current for the block (under ``traceparent`` when given, else the current span); an exception
    leaving the block is recorded on it. Yields None when tracing is off."""
    if _tracer is None:
        return _NOOP
    return _current(name, kind, attributes, traceparent)


def use(span: Span | None) -> AbstractContextManager[Any]:
    """Make a started span current for the block (a no-op for None), without ending it."""
    if span is None:
        return _NOOP
    return _Current(span, end=False)


def end(span: Span | None, *, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    """Set ``attributes``, mark the span failed with ``error`` if given, and end it (no-op for None)."""
    if span is None:
        return
    set_attributes(span, attributes, error=error)
    span.end()


def set_attributes(span: Span | None, attributes: Mapping[str, Any] | None, *, error: str | None = None) -> None:
    """Add attributes to a span (None values left out); ``error`` sets its status to ERROR with that text."""
    if span is None:
        return
    cleaned = _clean(attributes)
    if cleaned:
        span.set_attributes(cleaned)
    if error is not None and _api is not None:
        span.set_status(_api.Status(_api.ERROR, error[:1000]))


def event(span: Span | None, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Add an event (a retry, a takeover, a redelivery) to a span (no-op for None)."""
    if span is not None:
        span.add_event(name, _clean(attributes))


def inject(headers: MutableMapping[str, str]) -> None:
    """Set ``traceparent`` to the current span, the parent of the call these headers go out with (no-op when off
    or when no span is current)."""
    if _api is None:
        return
    ctx = _api.get_current_span().get_span_context()
    if ctx.is_valid:
        headers[TRACEPARENT] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_ids() -> tuple[str, str] | None:
    """The current span's trace id and span id in hex (None when off or when no span is current)."""
    if _api is None:
        return None
    ctx = _api.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a W3C ``traceparent`` carries (None when absent or malformed); works with tracing off."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1].lower()


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """OpenTelemetry takes str, bool, int, float and sequences of them; None values are left out."""
    if not attributes:
        return None
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, Sequence):
            out[key] = [str(v) for v in value]
        else:
            out[key] = str(value)
    return out


# --- the spans of each process (names and attributes: docs/observability.md) ---------------------


def request_span(method: str, agent: str, traceparent: str | None) -> AbstractContextManager[Span | None]:
    """The gateway's span of one HTTP request to an agent or workflow (current for the request)."""
    if _tracer is None:
        return _NOOP
    attrs = {"http.request.method": method, "http.route": "/agents/{agent}", "a2amesh.agent": agent}
    return _current(f"{method} /agents/{{agent}}", "server", attrs, traceparent)


def task_span(agent: str, task_id: str, attempt: int, traceparent: str | None) -> AbstractContextManager[Span | None]:
    """An agent's span of one delivery of a task: claim, handler, final (current for all of it)."""
    if _tracer is None:
        return _NOOP
    attrs = {"a2amesh.agent": agent, "a2amesh.task.id": task_id, "a2amesh.attempt": attempt}
    block = _current(f"task {agent}", "consumer", attrs, traceparent)
    if attempt > 1:
        event(block._span, "a2amesh.redelivery", {"a2amesh.attempt": attempt})
    return block


_FAILED_STATES = ("TASK_STATE_FAILED", "TASK_STATE_REJECTED")


def task_done(span: Span | None, state: str) -> None:
    """The state a task ended this delivery in (a failed or rejected task marks the span failed)."""
    set_attributes(span, {"a2amesh.task.state": state}, error=state if state in _FAILED_STATES else None)


def handler_span(agent: str, task_id: str) -> Span | None:
    """The span of an agent's handler run (started, not current: the handler's task makes it current)."""
    if _tracer is None:
        return None
    return start(f"handler {agent}", attributes={"a2amesh.agent": agent, "a2amesh.task.id": task_id})


def execution_span(workflow: str, execution_id: str, epoch: int, traceparent: str | None) -> Span | None:
    """The executor's span of one runner of an execution (a create, a takeover, a resume): started, not current."""
    if _tracer is None:
        return None
    attrs = {"a2amesh.workflow": workflow, "a2amesh.execution.id": execution_id, "a2amesh.epoch": epoch}
    return start(f"execution {workflow}", kind="consumer", attributes=attrs, traceparent=traceparent)


def execution_done(span: Span | None, status: str, *, lost: bool) -> None:
    """End a runner's span with the execution's status (``lost``: its lease went to another replica)."""
    end(
        span,
        error="execution failed" if status == "failed" else None,
        attributes={"a2amesh.execution.status": status, "a2amesh.execution.lost": lost},
    )


def node_span(parent: Span | None, *, node_id: str, path: str, node_type: str, agent: str, attempt: int) -> Span | None:
    """The span of one node attempt, from its dispatch to its answer, under the execution's span."""
    if _tracer is None:
        return None
    attrs = {
        "a2amesh.node.id": node_id,
        "a2amesh.node.path": path,
        "a2amesh.node.type": node_type,
        "a2amesh.node.agent": agent,
        "a2amesh.node.attempt": attempt,
    }
    span = start(f"node {node_id}", kind="producer", attributes=attrs, parent_span=parent)
    if attempt > 1:
        event(span, "a2amesh.retry", {"a2amesh.node.attempt": attempt})
    return span


def model_span(model: str, operation: str = "chat") -> AbstractContextManager[Span | None]:
    """A model call's span, after the OpenTelemetry GenAI conventions (current while it runs)."""
    if _tracer is None:
        return _NOOP
    attrs = {"gen_ai.operation.name": operation, "gen_ai.provider.name": "openai", "gen_ai.request.model": model}
    return _current(f"{operation} {model}", "client", attrs, None)


def model_result(
    span: Span | None, *, model: str, input_tokens: int, output_tokens: int, finish_reasons: Sequence[str]
) -> None:
    """What the model answered: the response model, token counts and finish reasons."""
    set_attributes(
        span,
        {
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": list(finish_reasons),
        },
    )


def tool_span(name: str, call_id: str | None) -> AbstractContextManager[Span | None]:
    """A tool call's span (GenAI ``execute_tool``), current while the tool runs (a peer call goes out under it)."""
    if _tracer is None:
        return _NOOP
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
    return _current(f"execute_tool {name}", "internal", attrs, None)
