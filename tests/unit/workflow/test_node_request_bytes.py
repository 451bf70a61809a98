"""A DAG dispatch's request written straight to bytes is the request the Message model path writes, byte for byte."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from a2amesh.protocol import SendMessageConfiguration, SendMessageRequest, codes
from a2amesh.rpc import encode_request, encode_send_request
from a2amesh.workflow.dag.state import DispatchNode

INPUTS: list[Any] = [
    None,
    {},
    {"n": 3, "text": "hello"},
    {"w": 1, "nested": {"list": [1, 2.5, None, True, "x"]}},
    [1e16, 1.5e-7, -0.0, 0.1, 1.0, 123456789.125, 5e-324, 1.7976931348623157e308],
    'é\u2028\x01\x1f\x7f"\\/</script>',
    {"🙂": "\ud7ff\ue000", "": ""},
    2**63 - 1,
    -(2**63),
    "x" * 5000,
]


def _command(value: Any, **extra: Any) -> DispatchNode:
    fields: dict[str, Any] = {
        "path": "loop[2].n3",
        "node_id": "n3",
        "agent": "echo",
        "attempt": 2,
        "iteration": 0,
        "message_id": "wf:abc:n3:0:2",
        "task_id": "tid-123",
        "input": value,
        "deadline": time.time() + 300,
        "call_depth": 1,
        "call_chain": ["outer", "chain10"],
        "target_type": "agent",
    }
    return DispatchNode(**{**fields, **extra})


def _model_request(command: DispatchNode, context_id: str | None, history_length: int | None) -> bytes:
    message = command.message(execution_id="exec-1", workflow="chain10", context_id=context_id)
    config = None if history_length is None else SendMessageConfiguration(history_length=history_length)
    return encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=message, configuration=config), "req-1")


@pytest.mark.parametrize("value", INPUTS)
@pytest.mark.parametrize("context_id", ["ctx-1", None])
def test_message_json_is_the_models_bytes(value: Any, context_id: str | None) -> None:
    command = _command(
        value,
        instruction="Say it \u00e9",
        input_schema={"type": "object", "properties": {"n": {"type": "integer", "maximum": 1.5}}},
        output_schema=None,
    )
    encoded = command.message_json(execution_id="exec-1", workflow="chain10", context_id=context_id, inline_limit=10**6)
    assert encoded is not None
    message = command.message(execution_id="exec-1", workflow="chain10", context_id=context_id)
    assert encoded == message.to_json_bytes()
    for history_length in (0, 3, None):
        body = encode_send_request(codes.SEND_MESSAGE, encoded, history_length, "req-1")
        assert body == _model_request(command, context_id, history_length)


def test_message_json_leaves_to_the_model_what_orjson_writes_otherwise() -> None:
    kwargs: dict[str, Any] = {"execution_id": "e", "workflow": "w", "context_id": "c", "inline_limit": 10**6}
    assert _command({"big": 2**70}).message_json(**kwargs) is None
    assert _command({"n": 1}, resume={"answer": "yes"}).message_json(**kwargs) is None
    assert _command({"n": 1}, input_schema={"default": dt.date(2026, 1, 1)}).message_json(**kwargs) is None
    assert _command({"s": "\ud800"}).message_json(**kwargs) is None


def test_message_json_leaves_an_input_to_spill_to_the_model_path() -> None:
    value = {"text": "x" * 100}
    size = len(b'{"text":"' + b"x" * 100 + b'"}')
    kwargs: dict[str, Any] = {"execution_id": "e", "workflow": "w", "context_id": "c"}
    assert _command(value).message_json(**kwargs, inline_limit=size) is not None
    assert _command(value).message_json(**kwargs, inline_limit=size - 1) is None
