"""OpenTelemetry traces: one trace per top-level call, across every process, through the ``traceparent`` header.

Off unless the standard ``OTEL_*`` variables ask for it (:func:`configure`, called by entry points): then
nothing here imports the SDK, every hook is one test of the module flag :data:`enabled`, and the a2a-sdk's
own decorators are switched off too. On, each process exports its spans over OTLP/HTTP (or to the console).

The rule that links the processes: a call goes out with the **current** span as its parent
(:func:`inject`, applied by the mesh client to every request's headers), and a worker opens its span under
the request's ``traceparent``. Span and attribute names are listed in docs/observability.md.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from a2amesh.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import Sampler
    from opentelemetry.trace import Span, SpanContext

__all__ = [
    "configure",
    "context_with",
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

_tracer: _Recorder | None = None
_NOOP: AbstractContextManager[None] = contextlib.nullcontext(None)
_EXPORTERS = ("otlp", "console")
TRACEPARENT = "traceparent"  # the same header name as bus/headers.py (the foundation layer cannot import bus/)


def signal_wanted(environ: Mapping[str, str], signal: Literal["traces", "metrics"]) -> bool:
    """Whether the standard variables ask for a signal to be exported: an OTLP endpoint (general or the signal's
    own), or ``OTEL_{SIGNAL}_EXPORTER`` other than ``none``; never with ``OTEL_SDK_DISABLED=true``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces (:func:`signal_wanted`)."""
    return signal_wanted(environ, "traces")


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
    resource = Resource.create({} if named else {"service.name": service})
    provider = TracerProvider(resource=resource)
    processors: list[tuple[BatchSpanProcessor, bool]] = []
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            from a2amesh.otlp_spans import otlp_exporter

            exporter = otlp_exporter(OTLPSpanExporter(), resource)
        else:
            exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout may be a protocol (`a2amesh mcp`)
        queue, batch = _batch_sizes(env)
        processor = BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=batch)  # in its thread
        provider.add_span_processor(processor)  # the a2a-sdk's spans, and the flush at interpreter exit
        processors.append((processor, name != "otlp"))
    trace.set_tracer_provider(provider)  # the SDK flushes it at interpreter exit
    _bind_api()
    _tracer = _Recorder(provider.sampler, resource, processors)
    enabled = True
    return True


_BATCH = 2048
"""Spans per export unless ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` says (the SDK's default is 512): an HTTP post
through the SDK's client costs about a millisecond of CPU, as much as encoding 300 spans."""


def _batch_sizes(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The batch processor's queue and batch sizes where the standard variables leave them (None: the SDK reads
    them): :data:`_BATCH` spans per export, a queue of four batches (the SDK's default ratio: 512 of 2048)."""
    if env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") or env.get("OTEL_BSP_MAX_QUEUE_SIZE"):
        return None, None
    return 4 * _BATCH, _BATCH


class _Api:
    """What the hooks call of the OpenTelemetry API, bound once (an import statement per call costs)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.kinds = {kind.name.lower(): kind for kind in trace.SpanKind}
        self.set_span_in_context, self.get_current_span = trace.set_span_in_context, trace.get_current_span
        self.detach: Callable[[Any], None] = context.detach
        self.current_context: Callable[[], SpanContext] = lambda: trace.get_current_span().get_span_context()
        self.current_span: Callable[[], object] = trace.get_current_span
        self.attach_span: Callable[[Span], object] = lambda span: context.attach(trace.set_span_in_context(span))
        self.invalid = trace.INVALID_SPAN_CONTEXT
        self.flags = (trace.TraceFlags(0), trace.TraceFlags(1))
        self.trace_state = trace.DEFAULT_TRACE_STATE
        self.var: contextvars.ContextVar[Any] | None = None  # the runtime context's variable, when it is one
        self.current_parent: Callable[[], SpanContext | None] = self._current_parent
        self._bind_context_var(context, trace)

    def _current_parent(self) -> SpanContext | None:
        """The current span's context when it is valid (the parent of a span started without one), else None."""
        ctx = self.current_context()
        return ctx if ctx.is_valid else None

    def _bind_context_var(self, context: Any, trace: Any) -> None:
        """With the API's default runtime context (a ``ContextVar``), make a span current and read the current one
        on that variable directly: the public functions are three to four calls deep each, and a span is made
        current twice and read at least twice per task."""
        from opentelemetry.trace.propagation import _SPAN_KEY

        var = getattr(getattr(context, "_RUNTIME_CONTEXT", None), "_current_context", None)
        if not isinstance(var, contextvars.ContextVar):
            return  # another runtime context: the public functions
        get, make, invalid, invalid_span = var.get, context.Context, self.invalid, trace.INVALID_SPAN

        def current_context() -> SpanContext:
            span = get().get(_SPAN_KEY)
            return invalid if span is None else span.get_span_context()

        self.attach_span = lambda span: var.set(make({**get(), _SPAN_KEY: span}))
        self.detach = var.reset
        self.var, self.make, self.key = var, make, _SPAN_KEY

        def current_parent() -> SpanContext | None:
            span = get().get(_SPAN_KEY)
            if type(span) is _Span:  # one of ours: valid (the common case, read without the API's properties)
                return span._ctx
            ctx = invalid if span is None else span.get_span_context()
            return ctx if ctx.is_valid else None

        def current_span() -> object:
            span: object = get().get(_SPAN_KEY)
            return invalid_span if span is None else span

        self.current_context = current_context
        self.current_span = current_span
        self.current_parent = current_parent
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


def _parent(traceparent: str | None, parent_span: Span | None) -> SpanContext | None:
    """The parent of a new span: ``parent_span``, else the remote ``traceparent`` (read here: the SDK's
    propagator costs several times more), else the current span (None: a root)."""
    assert _api is not None
    if parent_span is not None:
        if isinstance(parent_span, _Span):  # one of ours: valid (its context read without the API's properties)
            return parent_span._ctx
        ctx = parent_span.get_span_context()
        return ctx if ctx.is_valid else None
    if not traceparent:
        return _api.current_parent()
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[0]) != 2 or len(parts[1]) != 32 or len(parts[2]) != 16 or parts[0] == "ff":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None  # all zeros: invalid
    # a SpanContext of ids known valid, without its constructor's checks (a tuple of its six fields)
    remote: SpanContext = tuple.__new__(
        _api.SpanContext, (trace_id, span_id, True, _api.flags[flags & 1], _api.trace_state, True)
    )
    return remote


class _Recorder:
    """Starts this library's spans without the SDK's span machinery, which costs several times more per span
    (locks, attribute validation and copies, a sampling result per span, processor fan-out): a span here is a
    small object of the API's ``Span`` type (so the a2a-sdk's spans and the log lines see it as current), read
    by the SDK's batch processors and exporters as the SDK's ``ReadableSpan`` is, in their thread. The
    sampler is the SDK's, from the standard variables; a ``parentbased_*`` one follows the parent without a
    call."""

    def __init__(self, sampler: Sampler, resource: Resource, processors: list[tuple[BatchSpanProcessor, bool]]) -> None:
        import random

        from opentelemetry.sdk.trace import sampling

        self.sampler = sampler
        self.follows_parent = isinstance(sampler, sampling.ParentBased)
        self.always = sampler is sampling.ALWAYS_ON
        self.sampling = (sampling.Decision.RECORD_AND_SAMPLE,)
        self.span_class = _span_class(resource, processors)
        self.bits = random.getrandbits  # as the SDK's id generator (reseeded after a fork)
        assert _api is not None
        self.sampled, self.unsampled = _api.TraceFlags(1), _api.TraceFlags(0)
        self.state = _api.trace_state

    def start(self, name: str, kind: str, attributes: dict[str, Any] | None, parent: SpanContext | None) -> Span:
        assert _api is not None
        if parent is not None:
            trace_id = parent[0]  # a SpanContext is a tuple: (trace_id, span_id, is_remote, trace_flags, …)
            if self.follows_parent:
                sampled = bool(parent[3] & 1)
            else:
                sampled = self.always or self._sample(name, kind, attributes, parent, trace_id)
        else:
            trace_id = self.bits(128) or 1
            sampled = self.always or self._sample(name, kind, attributes, None, trace_id)
        # the SpanContext of ids known valid, without its constructor's checks (a tuple of its six fields)
        fields = (trace_id, self.bits(64) or 1, False, self.sampled if sampled else self.unsampled, self.state, True)
        ctx: SpanContext = tuple.__new__(_api.SpanContext, fields)
        if not sampled:
            unsampled: Span = _api.NonRecordingSpan(ctx)
            return unsampled
        span: Span = self.span_class(name, ctx, parent, _api.kinds[kind], attributes)  # type: ignore[assignment]
        return span

    def _sample(
        self, name: str, kind: str, attributes: dict[str, Any] | None, parent: SpanContext | None, trace_id: int
    ) -> bool:
        assert _api is not None
        context = None if parent is None else _api.set_span_in_context(_api.NonRecordingSpan(parent))
        result = self.sampler.should_sample(context, trace_id, name, _api.kinds[kind], attributes)
        return result.decision in self.sampling


def _span_class(resource: Resource, processors: list[tuple[BatchSpanProcessor, bool]]) -> type[_Span]:
    """Ready :class:`_Span` for this process (at :func:`configure`: the API is imported only when tracing is on)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    trace.Span.register(_Span)  # a span of the API's for its context functions (get_current_span checks)
    _Span.resource = resource
    _Span.instrumentation_scope = InstrumentationScope("a2amesh")
    _Span.unset = trace.Status(trace.StatusCode.UNSET)
    _Span.status_type = trace.Status
    _Span.event_type = Event
    _Span.readable_type = ReadableSpan
    queues = [(p, _queue_of(p)) for p, readable in processors if not readable]
    _Span.queues = [queue for _, queue in queues if queue is not None]
    _Span.cheap = [p.on_end for p, queue in queues if queue is None]
    _Span.converted = [p for p, readable in processors if readable]  # the console exporter formats an SDK span
    return _Span


def _queue_of(processor: BatchSpanProcessor) -> tuple[collections.deque[Any], int, Any] | None:
    """Where an ended span of ours is queued on ``processor`` (:meth:`_Span.end`): the SDK's batch processor's own
    queue (a bounded deque, the oldest dropped when full), its batch size and its batch processor, whose export
    thread is woken when a batch is ready, as its ``on_end`` does without the checks a span of ours needs not
    (sampled, a fork: the SDK's at-fork hook clears the same queue and replaces the event, read at each wake-up).
    None for another SDK's layout: its ``on_end``."""
    batch = getattr(processor, "_batch_processor", None)
    queue = getattr(batch, "_queue", None)
    size = getattr(batch, "_max_export_batch_size", None)
    if not isinstance(queue, collections.deque) or not isinstance(size, int) or not hasattr(batch, "_worker_awaken"):
        return None
    return queue, size, batch


class _Span:
    """A span of this library's: a virtual subclass of the API's ``Span`` (see :class:`_Recorder`), read by the
    SDK's exporters as a ``ReadableSpan`` (the slots and the class attributes below)."""

    __slots__ = (
        "_ctx",
        "attributes",
        "end_time",
        "events",
        "hex_ids",
        "kind",
        "name",
        "parent",
        "start_time",
        "status",
    )
    resource: Any = None
    instrumentation_scope: Any = None
    links = ()
    dropped_attributes = dropped_events = dropped_links = 0
    a2amesh = True  # encoded by a2amesh.otlp_spans.encode_spans (see otlp_exporter)
    unset: Any = None
    status_type: Any = None
    event_type: Any = None
    readable_type: Any = None
    queues: list[tuple[collections.deque[Any], int, Any]] = []  # set once by _span_class (see _queue_of)
    cheap: list[Callable[[Any], None]] = []
    converted: list[Any] = []

    def __init__(
        self, name: str, ctx: SpanContext, parent: SpanContext | None, kind: Any, attributes: dict[str, Any] | None
    ) -> None:
        self.name = name
        self._ctx = ctx
        self.parent = parent
        self.kind = kind
        self.attributes = attributes if attributes is not None else {}
        self.events: Sequence[Any] = ()  # a list once an event is added (most spans have none: one object less)
        self.status = self.unset
        self.start_time = time.time_ns()
        self.end_time: int | None = None
        self.hex_ids: tuple[str, str] | None = None  # (see current_ids)

    @property
    def context(self) -> SpanContext:
        return self._ctx

    def get_span_context(self) -> SpanContext:
        return self._ctx

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self.end_time is None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self.end_time is None:
            self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if self.end_time is None:
            event = self.event_type(name, dict(attributes) if attributes else None, timestamp or time.time_ns())
            self.events = [*self.events, event]

    def update_name(self, name: str) -> None:
        self.name = name

    def set_status(self, status: Any, description: str | None = None) -> None:
        if self.end_time is None:
            self.status = status if isinstance(status, self.status_type) else self.status_type(status, description)

    def record_exception(
        self, exception: BaseException, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        import traceback

        attrs = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        self.add_event("exception", {**attrs, **(attributes or {})}, timestamp)

    def __enter__(self) -> _Span:
        return self

    def __exit__(self, *_: object) -> None:
        self.end()

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time or time.time_ns()
        for queue, size, batch in self.queues:
            queue.appendleft(self)  # the SDK's worker pops the oldest from the right
            if len(queue) >= size:
                awaken = batch._worker_awaken
                if not awaken.is_set():
                    awaken.set()
        for emit in self.cheap:
            emit(self)  # read as a ReadableSpan (see _Recorder)
        if self.converted:
            readable = self.readable_type(
                name=self.name,
                context=self._ctx,
                parent=self.parent,
                resource=self.resource,
                attributes=self.attributes,
                events=self.events,
                kind=self.kind,
                status=self.status,
                start_time=self.start_time,
                end_time=self.end_time,
                instrumentation_scope=self.instrumentation_scope,
            )
            for processor in self.converted:
                processor.on_end(readable)


class _Current(AbstractContextManager["Span | None"]):
    """A started span made current for a block and ended after it; an exception leaving the block is recorded."""

    __slots__ = ("_end", "_span", "_token")

    def __init__(self, span: Span, *, end: bool = True) -> None:
        self._span = span
        self._end = end
        self._token: object = None

    def __enter__(self) -> Span:
        api = _api
        assert api is not None
        var = api.var
        if var is not None:  # attach_span, without its call
            self._token = var.set(api.make({**var.get(), api.key: self._span}))
        else:
            self._token = api.attach_span(self._span)
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert _api is not None
        try:
            if self._end and isinstance(exc, Exception):
                self._span.record_exception(exc)
                self._span.set_status(_api.Status(_api.ERROR, f"{type(exc).__name__}: {exc}"[:1000]))
        finally:
            _api.detach(self._token)
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
    return _tracer.start(name, kind, _clean(attributes), _parent(traceparent, parent_span))


def _current(
    name: str, kind: str, attributes: Mapping[str, Any] | None, traceparent: str | None, *, known: bool = False
) -> _Current:
    """A span made current for a block (``known``: ``attributes`` are a new dict of str, bool, int and float values,
    taken as they are)."""
    assert _tracer is not None
    assert _api is not None
    attrs = attributes if known and isinstance(attributes, dict) else _clean(attributes)
    return _Current(_tracer.start(name, kind, attrs, _parent(traceparent, None)))


def _start_known(name: str, kind: str, attributes: dict[str, Any], parent_span: Span | None = None) -> Span | None:
    """:func:`start` of a span whose attributes are a new dict of str, bool, int and float values (no copy)."""
    if _tracer is None:
        return None
    return _tracer.start(name, kind, attributes, _parent(None, parent_span))


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


def context_with(span: Span | None) -> contextvars.Context | None:
    """A copy of the current context with ``span`` current, for ``asyncio.create_task(…, context=…)`` (None for
    None: the task copies the current context as usual); one copy instead of a :func:`use` block around the
    task's creation, which sets and resets the context variable and leaves the task its own copy to make."""
    if span is None:
        return None
    assert _api is not None
    context = contextvars.copy_context()
    context.run(_api.attach_span, span)
    return context


def end(span: Span | None, *, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
    """Set ``attributes``, mark the span failed with ``error`` if given, and end it (no-op for None)."""
    if span is None:
        return
    if error is None and isinstance(span, _Span):  # one of ours (a node's end): its attributes set without the calls
        if attributes is not None and span.end_time is None:
            cleaned = _clean(attributes)
            if cleaned:
                span.attributes.update(cleaned)
        span.end()
        return
    if attributes is not None or error is not None:
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
    span = _api.current_span()
    if type(span) is _Span:  # one of ours (sampled): its ids formatted once, as for the log lines
        trace_hex, span_hex = span.hex_ids or _hex_ids(span)
        headers[TRACEPARENT] = f"00-{trace_hex}-{span_hex}-01"
        return
    ctx = cast("Span", span).get_span_context()
    if ctx.is_valid:
        headers[TRACEPARENT] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_ids() -> tuple[str, str] | None:
    """The current span's trace id and span id in hex (None when off or when no span is current)."""
    if _api is None:
        return None
    span = _api.current_span()
    if type(span) is _Span:  # one of ours: its ids formatted once (a task's log lines each carry them)
        return span.hex_ids or _hex_ids(span)
    ctx = cast("Span", span).get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _hex_ids(span: _Span) -> tuple[str, str]:
    """A span of ours' trace id and span id in hex, formatted once (:func:`current_ids`, :func:`inject`)."""
    ctx = span._ctx
    ids = span.hex_ids = (f"{ctx[0]:032x}", f"{ctx[1]:016x}")
    return ids


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
    block = _Current(_tracer.start(f"task {agent}", "consumer", attrs, _parent(traceparent, None)))
    if attempt > 1:
        event(block._span, "a2amesh.redelivery", {"a2amesh.attempt": attempt})
    return block


_FAILED_STATES = ("TASK_STATE_FAILED", "TASK_STATE_REJECTED")


def task_done(span: Span | None, state: str) -> None:
    """The state a task ended this delivery in (a failed or rejected task marks the span failed)."""
    if isinstance(span, _Span) and state not in _FAILED_STATES:  # one of ours, not failed: the attribute alone
        if span.end_time is None:
            span.attributes["a2amesh.task.state"] = state
        return
    set_attributes(span, {"a2amesh.task.state": state}, error=state if state in _FAILED_STATES else None)


def handler_span(agent: str, task_id: str) -> Span | None:
    """The span of an agent's handler run (started, not current: the handler's task makes it current)."""
    if _tracer is None:
        return None
    assert _api is not None
    attrs = {"a2amesh.agent": agent, "a2amesh.task.id": task_id}
    return _tracer.start(f"handler {agent}", "internal", attrs, _api.current_parent())


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
    span = _start_known(f"node {node_id}", "producer", attrs, parent)
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
