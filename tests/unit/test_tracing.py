"""tracing.py without a tracer: when the standard variables turn traces on, and what a traceparent carries."""

from __future__ import annotations

import pytest

from a2amesh import tracing
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
