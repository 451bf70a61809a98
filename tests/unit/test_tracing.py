"""tracing.py without a tracer: when the standard variables turn traces on, and what a traceparent carries."""

from __future__ import annotations

import pytest

from a2amesh import otlp_spans, tracing
from a2amesh.errors import ConfigError


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ],
)
def test_traces_are_wanted_only_when_the_standard_variables_ask(environ: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(environ) is wanted


def test_off_it_records_nothing_and_turns_the_sdk_decorators_off() -> None:
    """Without OTEL_* set, configure() records nothing and asks the a2a-sdk not to trace (read at its import)."""
    environ: dict[str, str] = {}
    assert tracing.configure("a2amesh-test", environ) is False
    assert environ == {"OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false"}
    assert tracing.enabled is False
    with tracing.task_span("a", "t", 1, None) as span:
        assert span is None
    headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    tracing.inject(headers)
    assert headers["traceparent"].endswith("00f067aa0ba902b7-01"), "a call made with tracing off passes it on as is"


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "PROTOCOL"),
    ],
)
def test_an_exporter_not_shipped_is_a_precise_error(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        tracing.configure("a2amesh-test", environ)
    assert tracing.enabled is False


@pytest.mark.parametrize(
    ("traceparent", "trace_id"),
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-00", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01", None),
        ("garbage", None),
        ("", None),
        (None, None),
    ],
)
def test_trace_id_of_a_traceparent(traceparent: str | None, trace_id: str | None) -> None:
    assert tracing.trace_id_of(traceparent) == trace_id


def test_spans_are_encoded_as_the_sdks_encoder_encodes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorder's spans, written as OTLP protobuf by tracing.py itself, decode to the same message as the
    SDK's own encoder makes of them: ids, parents (remote and local), kinds, times, every attribute type,
    events, statuses, flags, the resource and the scope."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    api = tracing._Api()
    monkeypatch.setattr(tracing, "_api", api)
    resource = Resource.create({"service.name": "a2amesh-test", "replica": 3})
    recorder = tracing._Recorder(ALWAYS_ON, resource, [])
    remote = tracing._parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)
    root = recorder.start("task é", "consumer", {"a2amesh.agent": "echo", "a2amesh.attempt": 2}, remote)
    child = recorder.start(
        "node n",
        "producer",
        {"ratio": 0.25, "flag": True, "negative": -7, "big": 2**40, "reasons": ["stop", "length"]},
        root.get_span_context(),
    )
    child.add_event("a2amesh.retry", {"a2amesh.node.attempt": 2})
    child.set_status(api.Status(api.ERROR, "it failed"))
    child.end()
    lone = recorder.start("execution w", "internal", None, None)
    lone.add_event("bare")
    lone.end()
    root.set_attributes({"a2amesh.task.state": "TASK_STATE_COMPLETED"})
    root.end()
    many = []  # a key of many values (a task id): past the values kept per key, then the last one again
    for i in range(70):
        task_id = f"task-{i}" + ("-" * 130 if i == 69 else "")  # the last one too long for one-byte lengths
        for name in ("handler", "task"):
            span = recorder.start(name, "internal", {"a2amesh.task.id": task_id, "a2amesh.attempt": 1}, None)
            span.end()
            many.append(span)
    for same in (True, 1.0):  # equal to the int 1 kept above for that key (1 == 1.0 == True), written as its type
        span = recorder.start("task", "internal", {"a2amesh.attempt": same}, None)
        span.end()
        many.append(span)
    spans = [child, lone, root, *many]
    mine = ExportTraceServiceRequest.FromString(
        otlp_spans.encode_spans(otlp_spans.encode_resource(resource.attributes), spans)
    )
    assert mine == encode_spans(spans)  # type: ignore[arg-type]  # read as ReadableSpans, as the exporter does
    again = otlp_spans.encode_spans(otlp_spans.encode_resource(resource.attributes), spans)
    assert ExportTraceServiceRequest.FromString(again) == mine  # the attribute fields kept by the first, reused
    assert mine.resource_spans[0].scope_spans[0].spans[2].parent_span_id.hex() == "00f067aa0ba902b7"


def test_an_ended_span_wakes_the_batch_processor_when_a_batch_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorder queues its spans on the SDK's batch processor directly (tracing._queue_of): a full batch is
    exported at once by the processor's thread, not after its schedule delay (a minute here)."""
    import threading
    from collections.abc import Sequence
    from typing import Any

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    class Exporter(SpanExporter):
        def __init__(self) -> None:
            self.names: list[str] = []
            self.got = threading.Event()

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.names += [s.name for s in spans]
            self.got.set()
            return SpanExportResult.SUCCESS

    monkeypatch.setattr(tracing, "_api", tracing._Api())
    exporter = Exporter()
    processor = BatchSpanProcessor(exporter, max_export_batch_size=2, schedule_delay_millis=60_000)
    try:

        def on_end(span: Any) -> None:
            raise AssertionError("the SDK's queue is used directly, not through on_end")

        monkeypatch.setattr(processor, "on_end", on_end)
        recorder = tracing._Recorder(ALWAYS_ON, Resource.create({}), [(processor, False)])
        recorder.start("first", "internal", None, None).end()
        assert not exporter.got.is_set(), "one span is not a batch of two"
        recorder.start("second", "internal", None, None).end()
        assert exporter.got.wait(5), "a full batch was not exported within 5 s of its last span"
        assert exporter.names == ["first", "second"]
    finally:
        tracing._Recorder(ALWAYS_ON, Resource.create({}), [])  # the span class without this processor
        processor.shutdown()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("environ", "sizes"),
    [
        ({}, (8192, 2048)),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100"}, (None, None)),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "100"}, (None, None)),
    ],
)
def test_export_batches_are_larger_unless_the_standard_variables_say(
    environ: dict[str, str], sizes: tuple[int | None, int | None]
) -> None:
    """An HTTP post costs as much as encoding hundreds of spans: 2048 spans a post unless OTEL_BSP_* sizes are set."""
    assert tracing._batch_sizes(environ) == sizes


async def test_an_agents_task_and_handler_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's two spans: the task's under the request's traceparent, current for the block; the handler's
    under it, current in the handler's task (tracing.context_with) and not around it; the task's end state, a
    failed one marking the span failed."""
    import asyncio

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    api = tracing._Api()
    monkeypatch.setattr(tracing, "_api", api)
    monkeypatch.setattr(tracing, "_tracer", tracing._Recorder(ALWAYS_ON, Resource.create({}), []))
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for state, failed in (("TASK_STATE_COMPLETED", False), ("TASK_STATE_FAILED", True)):
        with tracing.task_span("echo", "t1", 1, traceparent) as task:
            assert task is not None
            handler = tracing.handler_span("echo", "t1")
            assert handler is not None

            async def in_handler() -> tuple[str, str] | None:
                return tracing.current_ids()

            inside = await asyncio.create_task(in_handler(), context=tracing.context_with(handler))
            ids = handler.get_span_context()
            assert inside == (f"{ids.trace_id:032x}", f"{ids.span_id:016x}")
            trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
            assert tracing.current_ids() == (trace_id, f"{task.get_span_context().span_id:016x}")
            tracing.end(handler)
            tracing.task_done(task, state)
        assert task.parent.span_id == 0x00F067AA0BA902B7  # type: ignore[attr-defined]
        assert task.parent.is_remote  # type: ignore[attr-defined]
        assert handler.parent == task.get_span_context()  # type: ignore[attr-defined]
        assert handler.attributes == {"a2amesh.agent": "echo", "a2amesh.task.id": "t1"}  # type: ignore[attr-defined]
        assert task.attributes == {  # type: ignore[attr-defined]
            "a2amesh.agent": "echo",
            "a2amesh.task.id": "t1",
            "a2amesh.attempt": 1,
            "a2amesh.task.state": state,
        }
        assert (task.status.status_code == api.ERROR) is failed  # type: ignore[attr-defined]
        assert not task.is_recording()
        assert not handler.is_recording()
    assert tracing.current_ids() is None
    assert tracing.context_with(None) is None
