"""Bad A2A payloads are refused with a pydantic error that names the field (SPEC §3.1, §10)."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import a2a_pb2
from google.protobuf.json_format import ParseDict, ParseError
from pydantic import ValidationError

from a2amesh.protocol import (
    AgentCard,
    GetTaskRequest,
    JsonRpcRequest,
    JsonRpcResponse,
    ListTasksRequest,
    Message,
    Part,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskStatus,
)
from a2amesh.protocol.base import A2AModel

MESSAGE: dict[str, Any] = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
TASK: dict[str, Any] = {
    "id": "t1",
    "contextId": "c1",
    "status": {"state": "TASK_STATE_WORKING", "message": {**MESSAGE, "role": "ROLE_AGENT"}},
    "artifacts": [{"artifactId": "a1", "name": "result", "parts": [{"data": {"x": 1}}]}],
}


def errors_of(model: type[A2AModel] | type[JsonRpcRequest] | type[JsonRpcResponse], data: Any) -> list[Any]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return info.value.errors()


def located(errors: list[Any], *loc: str | int) -> dict[str, Any]:
    """The one error at ``loc``; fails listing every error when there is none."""
    matches = [e for e in errors if tuple(e["loc"]) == loc]
    assert matches, f"no error at {loc}: {[(e['loc'], e['msg']) for e in errors]}"
    return dict(matches[0])


# --- unknown fields -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "data", "loc"),
    [
        (Message, {**MESSAGE, "kind": "message"}, ("kind",)),
        (Message, {**MESSAGE, "parts": [{"text": "hi", "kind": "text"}]}, ("parts", 0, "kind")),
        (Task, {**TASK, "status": {**TASK["status"], "final": True}}, ("status", "final")),
        (
            Task,
            {**TASK, "artifacts": [{**TASK["artifacts"][0], "index": 0}]},
            ("artifacts", 0, "index"),
        ),
        (AgentCard, {"name": "a", "url": "http://x"}, ("url",)),
        (SendMessageRequest, {"message": MESSAGE, "configuration": {"blocking": True}}, ("configuration", "blocking")),
        (GetTaskRequest, {"id": "t1", "historyLen": 3}, ("historyLen",)),
    ],
)
def test_unknown_fields_are_named(model: type[A2AModel], data: dict[str, Any], loc: tuple[str | int, ...]) -> None:
    """A misspelt or pre-1.0 field (``kind``, ``final``, card ``url``) is refused, naming its path."""
    error = located(errors_of(model, data), *loc)
    assert error["type"] == "extra_forbidden"
    assert error["msg"] == "Extra inputs are not permitted"


def test_unknown_field_message_is_readable() -> None:
    """The exception text a user sees names the offending field on its own line."""
    with pytest.raises(ValidationError) as info:
        Message.model_validate({**MESSAGE, "contextID": "c1"})
    assert "contextID\n  Extra inputs are not permitted" in str(info.value)


# --- enums --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["COMPLETED", "completed", "TASK_STATE_DONE", "task_state_completed", 3])
def test_wrong_task_state_is_refused(state: Any) -> None:
    """Short, lower-case, invented or numeric states are refused and the error lists the valid names."""
    error = located(errors_of(TaskStatus, {"state": state}), "state")
    assert error["type"] == "enum"
    assert "TASK_STATE_COMPLETED" in error["msg"]


@pytest.mark.parametrize("role", ["user", "USER", "agent", "ROLE_ASSISTANT"])
def test_wrong_role_is_refused(role: str) -> None:
    """The A2A 0.x spellings (``user``/``agent``) are refused with the 1.0 names in the message."""
    error = located(errors_of(Message, {**MESSAGE, "role": role}), "role")
    assert error["type"] == "enum"
    assert "ROLE_USER" in error["msg"]
    with pytest.raises(ParseError, match="role"):
        ParseDict({**MESSAGE, "role": role}, a2a_pb2.Message())


def test_wrong_list_filter_state_is_refused() -> None:
    """A ListTasks status filter in the wrong spelling is refused rather than matching nothing."""
    located(errors_of(ListTasksRequest, {"status": "working"}), "status")


def test_nested_wrong_enum_has_full_path() -> None:
    """A wrong enum deep inside a task is reported with the path to it."""
    data = {**TASK, "status": {**TASK["status"], "message": {**MESSAGE, "role": "agent"}}}
    located(errors_of(Task, data), "status", "message", "role")


# --- parts --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "holds"),
    [
        ({"text": "a", "data": {"x": 1}}, "text, data"),
        ({"url": "artifact://x", "raw": "aGk="}, "url, raw"),
        ({"text": "a", "data": 1, "url": "u", "raw": ""}, "text, data, url, raw"),
    ],
)
def test_part_with_two_contents_is_refused(part: dict[str, Any], holds: str) -> None:
    """A part is a oneof: two contents are refused (as the proto does), saying which were given."""
    with pytest.raises(ValidationError, match=f"exactly one of text, data, url, raw \\(it holds {holds}\\)"):
        Part.model_validate(part)
    with pytest.raises(ParseError, match="oneof"):
        ParseDict(part, a2a_pb2.Part())


@pytest.mark.parametrize("part", [{}, {"mediaType": "text/plain"}, {"filename": "a.txt", "metadata": {}}])
def test_part_without_content_is_refused(part: dict[str, Any]) -> None:
    """A part with only mediaType/filename/metadata carries nothing and is refused."""
    with pytest.raises(ValidationError, match="it holds none"):
        Part.model_validate(part)


def test_bad_part_inside_message_has_path() -> None:
    """A bad part in a message is reported at its index."""
    errors = errors_of(Message, {**MESSAGE, "parts": [{"text": "ok"}, {"text": "a", "url": "b"}]})
    assert located(errors, "parts", 1)["type"] == "value_error"


@pytest.mark.parametrize("raw", ["!!!", "a", "aGk=x", "aG=k", "aGVsbG8 gd29ybGQ="])
def test_invalid_base64_raw_is_refused(raw: str) -> None:
    """Raw bytes that are not base64 are refused instead of being silently decoded to garbage by peers."""
    error = located(errors_of(Part, {"raw": raw}), "raw")
    assert "base64" in error["msg"]


@pytest.mark.parametrize("timestamp", ["yesterday", "2025-01-01", "2025-01-01T00:00:00", "2025-13-01T00:00:00Z"])
def test_invalid_timestamp_is_refused(timestamp: str) -> None:
    """A status timestamp that is not RFC 3339 with a zone is refused, naming the field."""
    error = located(errors_of(TaskStatus, {"state": "TASK_STATE_WORKING", "timestamp": timestamp}), "timestamp")
    assert "RFC 3339" in error["msg"] or "valid date" in error["msg"]


# --- requests and responses ---------------------------------------------------------------------


def test_send_message_with_empty_parts_is_refused() -> None:
    """A SendMessage whose message has no parts carries no input and is refused up front."""
    with pytest.raises(ValidationError, match="message.parts is empty"):
        SendMessageRequest.model_validate({"message": {**MESSAGE, "parts": []}})


def test_send_message_without_message_is_refused() -> None:
    """SendMessage params without a message name the missing field."""
    assert located(errors_of(SendMessageRequest, {"metadata": {}}), "message")["type"] == "missing"


def test_message_without_id_is_refused() -> None:
    """The requester must mint a messageId (SPEC §3.3); its absence is named in the camelCase wire spelling."""
    assert located(errors_of(Message, {"role": "ROLE_USER", "parts": [{"text": "x"}]}), "messageId")["type"] == (
        "missing"
    )


@pytest.mark.parametrize(
    ("data", "loc"),
    [({"pageSize": 0}, "pageSize"), ({"pageSize": 101}, "pageSize"), ({"historyLength": -1}, "historyLength")],
)
def test_list_tasks_bounds(data: dict[str, Any], loc: str) -> None:
    """ListTasks page size outside 1..100 and a negative history length are refused, as A2A says."""
    located(errors_of(ListTasksRequest, data), loc)


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (StreamResponse, {}),
        (StreamResponse, {"task": TASK, "message": MESSAGE}),
        (SendMessageResponse, {}),
        (SendMessageResponse, {"task": TASK, "message": MESSAGE}),
    ],
)
def test_response_payload_is_exactly_one(model: type[A2AModel], data: dict[str, Any]) -> None:
    """A StreamResponse / SendMessageResponse carries exactly one payload, like the proto oneof."""
    with pytest.raises(ValidationError, match="exactly one of"):
        model.model_validate(data)


# --- JSON-RPC envelopes -------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "2", 2.0, None])
def test_jsonrpc_request_version_must_be_2_0(version: Any) -> None:
    """A request whose ``jsonrpc`` is not exactly "2.0" is refused, naming the member."""
    errors = errors_of(JsonRpcRequest, {"jsonrpc": version, "id": 1, "method": "SendMessage", "params": {}})
    assert "'2.0'" in located(errors, "jsonrpc")["msg"]


def test_jsonrpc_request_without_version_is_refused() -> None:
    """The ``jsonrpc`` member is required on requests."""
    assert located(errors_of(JsonRpcRequest, {"id": 1, "method": "GetTask"}), "jsonrpc")["type"] == "missing"


def test_jsonrpc_response_version_must_be_2_0() -> None:
    """A response claiming JSON-RPC 1.0 is refused."""
    located(errors_of(JsonRpcResponse, {"jsonrpc": "1.0", "id": 1, "result": {}}), "jsonrpc")


@pytest.mark.parametrize("bad_id", [True, [1], {"a": 1}])
def test_jsonrpc_id_must_be_string_number_or_null(bad_id: Any) -> None:
    """An id JSON-RPC does not allow is refused, instead of being coerced (``true`` → 1) and echoed wrong."""
    errors_of(JsonRpcRequest, {"jsonrpc": "2.0", "id": bad_id, "method": "GetTask"})


@pytest.mark.parametrize("good_id", ["abc", 7, 7.5, None])
def test_jsonrpc_id_is_kept_exactly(good_id: Any) -> None:
    """A valid id comes back with its JSON type unchanged, so the response echoes it exactly."""
    request = JsonRpcRequest.model_validate({"jsonrpc": "2.0", "id": good_id, "method": "GetTask"})
    assert request.id == good_id
    assert type(request.id) is type(good_id)


def test_jsonrpc_request_extra_member_is_refused() -> None:
    """Unknown envelope members are refused (a typo like ``param`` would otherwise drop the params)."""
    errors = errors_of(JsonRpcRequest, {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "param": {"id": "t"}})
    located(errors, "param")


@pytest.mark.parametrize(
    "data",
    [
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": -32603, "message": "x"}},
    ],
)
def test_jsonrpc_response_needs_result_xor_error(data: dict[str, Any]) -> None:
    """A response with neither or both of result and error is refused."""
    with pytest.raises(ValidationError, match="exactly one of result and error"):
        JsonRpcResponse.model_validate(data)


def test_jsonrpc_error_object_needs_code_and_message() -> None:
    """An error object without its code or message is refused, naming what is missing."""
    errors = errors_of(JsonRpcResponse, {"jsonrpc": "2.0", "id": 1, "error": {"data": []}})
    located(errors, "error", "code")
    located(errors, "error", "message")
