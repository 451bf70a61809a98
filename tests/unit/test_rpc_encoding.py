"""The JSON-RPC encoders write a model's ProtoJSON straight to bytes: the same bytes as through its dict."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from a2amesh.jsontext import dumps_bytes
from a2amesh.protocol import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
)
from a2amesh.rpc import encode_request, encode_result, encode_task_result

VALUES: list[Any] = [
    {"w": 1, "i": 2, "nested": {"list": [1, 2.5, None, True, "x"]}},
    1e16,
    1.5e-7,
    -0.0,
    2**70,
    float("nan"),
    float("inf"),
    'é\u2028\x01"\\/',
    {"1": [None, True]},
    dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
]


def _task(value: Any) -> Task:
    return Task(
        id="t",
        context_id="c",
        status=TaskStatus(
            state=TaskState.COMPLETED,
            timestamp="2026-11-27T17:00:00.000Z",
            message=Message(message_id="x", role=Role.AGENT, parts=[Part.of_data({"output": value})]),
        ),
        artifacts=[Artifact(artifact_id="a", parts=[Part.of_data({"v": value}), Part.of_text("done")])],
        metadata={"k": value},
    )


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_request_bytes_as_through_the_dict(value: Any) -> None:
    message = Message(
        message_id="m", role=Role.USER, parts=[Part.of_data({"v": value})], context_id="c", metadata={"a": value}
    )
    params = SendMessageRequest(message=message, configuration=SendMessageConfiguration(history_length=0))
    for request_id in ("m", 7, None):
        expected = dumps_bytes(
            {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": params.to_json_dict()}
        )
        assert encode_request("SendMessage", params, request_id) == expected


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_result_bytes_as_through_the_dict(value: Any) -> None:
    task = _task(value)
    expected = dumps_bytes({"jsonrpc": "2.0", "id": "r", "result": {"task": task.to_json_dict()}})
    assert encode_task_result("r", task) == expected
    assert encode_result("r", StreamResponse(task=task)) == expected
    assert encode_result("r", {"task": task.to_json_dict()}) == expected
