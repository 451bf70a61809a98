"""Our A2A 1.0 models against the official a2a-sdk protobuf types (SPEC §3.1).

Every payload is encoded by our model, parsed by ``google.protobuf.json_format.ParseDict`` into the
a2a-sdk message (unknown fields refused), printed back with ``MessageToDict`` and validated by our
model again. The dicts must match once the values proto3 does not print (defaults of fields without
presence) are dropped.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from a2a.types import a2a_pb2
from a2a.utils import error_handlers as sdk_error_handlers
from a2a.utils import errors as sdk_errors
from google.api import field_behavior_pb2
from google.protobuf import any_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2

from a2amesh import errors
from a2amesh.protocol import (
    AgentCapabilities,
    AgentCard,
    AgentCardSignature,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    JsonRpcErrorObject,
    JsonRpcRequest,
    JsonRpcResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    codes,
)
from a2amesh.protocol.base import A2AModel, utc_timestamp
from a2amesh.protocol.jsonrpc import PARAMS_BY_METHOD

# Well-known types are printed as plain JSON (object, value, string): compare them as they are.
_OPAQUE = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Timestamp"}


def _default_of(field: FieldDescriptor) -> Any:
    if field.enum_type is not None:
        return field.enum_type.values_by_number[0].name
    return field.default_value


def _canonical(value: Any, descriptor: Descriptor) -> Any:
    """Drop what proto3 does not print: empty repeated/map fields and defaults of fields without presence."""
    out: dict[str, Any] = {}
    fields = {f.json_name: f for f in descriptor.fields}
    for key, item in value.items():
        field = fields[key]
        nested = field.message_type
        if nested is not None and nested.GetOptions().map_entry:
            value_type = nested.fields_by_name["value"].message_type
            if not item:
                continue
            if value_type is not None and value_type.full_name not in _OPAQUE:
                item = {k: _canonical(v, value_type) for k, v in item.items()}
        elif field.is_repeated:
            if not item:
                continue
            if nested is not None and nested.full_name not in _OPAQUE:
                item = [_canonical(v, nested) for v in item]
        elif nested is not None:
            if nested.full_name not in _OPAQUE:
                item = _canonical(item, nested)
        elif not field.has_presence:
            default = _default_of(field)
            if item == default and type(item) is type(default):
                continue
        out[key] = item
    return out


def round_trip(model: A2AModel, proto_type: type[ProtoMessage]) -> dict[str, Any]:
    """Our JSON → a2a-sdk proto → JSON → our model; assert nothing was lost or changed on the way."""
    wire = model.to_json_dict()
    proto = ParseDict(wire, proto_type(), ignore_unknown_fields=False)
    back = MessageToDict(proto)
    descriptor = cast(Descriptor, proto_type.DESCRIPTOR)  # the stubs' class attribute is a union
    assert _canonical(back, descriptor) == _canonical(wire, descriptor)
    again = type(model).from_json_dict(back)
    assert _canonical(again.to_json_dict(), descriptor) == _canonical(wire, descriptor)
    return back


# --- fixtures -----------------------------------------------------------------------------------

TS = "2025-03-01T12:30:45.123Z"


def every_part() -> list[Part]:
    return [
        Part(text="hello", metadata={"lang": "en"}),
        Part(text=""),
        Part.of_data({"type": "workflow_node_request", "node_id": "n1", "nested": {"list": [1, "two", None, True]}}),
        Part(data=[1, 2.5, "x"], media_type="application/json"),
        Part(data="a bare string"),
        Part(
            url="artifact://a2amesh/ctx-1/task-1/result?version=2",
            media_type="application/json",
            filename="result.json",
            metadata={"size": 1234, "sha256": "ab" * 32},
        ),
        Part(raw="aGVsbG8gd29ybGQ=", media_type="application/octet-stream", filename="hello.bin", metadata={"k": "v"}),
    ]


def full_message(role: Role = Role.AGENT) -> Message:
    return Message(
        message_id="msg-1",
        role=role,
        parts=every_part(),
        context_id="ctx-1",
        task_id="task-1",
        metadata={"a2amesh": {"attempt": 1}},
        extensions=[codes.EXT_SCHEMAS],
        reference_task_ids=["task-0"],
    )


def full_status(state: TaskState = TaskState.COMPLETED) -> TaskStatus:
    return TaskStatus(state=state, message=full_message(), timestamp=TS)


def result_artifact() -> Artifact:
    return Artifact(
        artifact_id="art-1",
        name="result",
        description="the output",
        parts=[Part.of_data({"answer": 42})],
        metadata={"size": 13},
        extensions=["urn:x:ext"],
    )


def full_task(state: TaskState = TaskState.COMPLETED) -> Task:
    return Task(
        id="task-1",
        context_id="ctx-1",
        status=full_status(state),
        artifacts=[result_artifact()],
        history=[full_message(Role.USER), full_message(Role.AGENT)],
        metadata={"execution_id": "exec-1"},
    )


def full_card() -> AgentCard:
    return AgentCard(
        name="summarizer",
        description="Summarises documents",
        supported_interfaces=[
            AgentInterface(url="nats://a2amesh/summarizer", protocol_binding=codes.PROTOCOL_BINDING, tenant="t1"),
            AgentInterface(url="https://gw.example/a2a", protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        provider=AgentProvider(url="https://example.org", organization="Example"),
        version="1.2.3",
        documentation_url="https://example.org/docs",
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extended_agent_card=False,
            extensions=[
                AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "workflow"}, required=False),
                AgentExtension(
                    uri=codes.EXT_SCHEMAS,
                    description="input and output JSON Schemas",
                    params={
                        "input_schema": {"type": "object", "properties": {"doc": {"type": "string"}}},
                        "output_schema": {"type": "object", "required": ["summary"]},
                    },
                ),
                AgentExtension(uri=codes.EXT_WORKFLOW, params={"nodes": [{"id": "a", "depends_on": []}]}),
            ],
        ),
        default_input_modes=["application/json"],
        default_output_modes=["application/json", "text/plain"],
        skills=[
            AgentSkill(
                id="summarize",
                name="Summarize",
                description="Summarise a document",
                tags=["text", "nlp"],
                examples=["Summarise this"],
                input_modes=["text/plain"],
                output_modes=["application/json"],
                security_requirements=[{"schemes": {"bearer": {"list": ["read"]}}}],
            ),
            AgentSkill(id="noop", name="No-op"),
        ],
        icon_url="https://example.org/icon.png",
        security_schemes={"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}},
        security_requirements=[{"schemes": {"bearer": {"list": []}}}],
        signatures=[AgentCardSignature(protected="eyJhbGciOiJFUzI1NiJ9", signature="c2ln", header={"kid": "k1"})],
    )


# --- payloads -----------------------------------------------------------------------------------


def test_card_round_trips() -> None:
    """A card with interfaces, extension params and skills survives the official proto unchanged."""
    back = round_trip(full_card(), a2a_pb2.AgentCard)
    card = AgentCard.from_json_dict(back)
    assert card.agent_type == "workflow"
    assert card.input_schema == {"type": "object", "properties": {"doc": {"type": "string"}}}
    assert card.supported_interfaces[0].protocol_version == codes.A2A_VERSION


def test_minimal_card_round_trips() -> None:
    """The defaults of a card we build from a name alone are valid A2A."""
    round_trip(AgentCard(name="x"), a2a_pb2.AgentCard)


def test_message_with_every_part_kind_round_trips() -> None:
    """Text, data (object, array, scalar), url and raw parts with mediaType/filename/metadata are all A2A parts."""
    back = round_trip(full_message(), a2a_pb2.Message)
    assert [sorted(p) for p in back["parts"]] == [
        ["metadata", "text"],
        ["text"],
        ["data", "mediaType"],
        ["data", "mediaType"],
        ["data"],
        ["filename", "mediaType", "metadata", "url"],
        ["filename", "mediaType", "metadata", "raw"],
    ]


@pytest.mark.parametrize("role", [Role.USER, Role.AGENT])
def test_roles_are_proto_enum_names(role: Role) -> None:
    """Every Role we can write is a name of the proto enum (ProtoJSON enum strings)."""
    round_trip(Message(message_id="m", role=role, parts=[Part.of_text("x")]), a2a_pb2.Message)


@pytest.mark.parametrize("state", [s for s in TaskState if s is not TaskState.UNSPECIFIED])
def test_task_round_trips_in_every_state(state: TaskState) -> None:
    """A task with status message and timestamp, artifacts, history and metadata round-trips in each state."""
    round_trip(full_task(state), a2a_pb2.Task)


def test_unspecified_enums_vanish_on_the_wire() -> None:
    """proto3 does not print a zero enum, so UNSPECIFIED comes back as a missing required field: never send it."""
    message = Message(message_id="m", role=Role.UNSPECIFIED, parts=[Part.of_text("x")])
    back = MessageToDict(ParseDict(message.to_json_dict(), a2a_pb2.Message()))
    assert "role" not in back
    with pytest.raises(ValueError, match="role"):
        Message.from_json_dict(back)


def test_enum_members_match_proto() -> None:
    """Our enums list exactly the proto's values, so no state or role can be missing or invented."""
    assert {s.value for s in TaskState} == set(a2a_pb2.TaskState.keys())
    assert {r.value for r in Role} == set(a2a_pb2.Role.keys())


def test_status_update_event_round_trips() -> None:
    """A statusUpdate event (with the final status message of a node call) is an A2A TaskStatusUpdateEvent."""
    event = TaskStatusUpdateEvent(
        task_id="task-1", context_id="ctx-1", status=full_status(TaskState.WORKING), metadata={"seq": 3}
    )
    round_trip(event, a2a_pb2.TaskStatusUpdateEvent)


@pytest.mark.parametrize(("append", "last_chunk"), [(None, None), (True, False), (False, True)])
def test_artifact_update_event_round_trips(append: bool | None, last_chunk: bool | None) -> None:
    """An artifactUpdate event with append/lastChunk flags is an A2A TaskArtifactUpdateEvent."""
    event = TaskArtifactUpdateEvent(
        task_id="task-1",
        context_id="ctx-1",
        artifact=result_artifact(),
        append=append,
        last_chunk=last_chunk,
        metadata={"chunk": 0},
    )
    round_trip(event, a2a_pb2.TaskArtifactUpdateEvent)


@pytest.mark.parametrize(
    "response",
    [
        StreamResponse(task=full_task(TaskState.SUBMITTED)),
        StreamResponse(message=full_message()),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t", context_id="c", status=full_status())),
        StreamResponse(
            artifact_update=TaskArtifactUpdateEvent(
                task_id="t", context_id="c", artifact=result_artifact(), last_chunk=True
            )
        ),
    ],
    ids=["task", "message", "statusUpdate", "artifactUpdate"],
)
def test_stream_response_round_trips(response: StreamResponse) -> None:
    """Each payload kind of a SendStreamingMessage reply is an A2A StreamResponse."""
    round_trip(response, a2a_pb2.StreamResponse)


@pytest.mark.parametrize(
    "response",
    [SendMessageResponse(task=full_task()), SendMessageResponse(message=full_message())],
    ids=["task", "message"],
)
def test_send_message_response_round_trips(response: SendMessageResponse) -> None:
    """The result of SendMessage is an A2A SendMessageResponse."""
    round_trip(response, a2a_pb2.SendMessageResponse)


# --- request params -----------------------------------------------------------------------------


def test_send_message_request_round_trips() -> None:
    """SendMessage params with configuration (historyLength 0 kept), metadata and tenant are A2A."""
    request = SendMessageRequest(
        message=full_message(Role.USER),
        configuration=SendMessageConfiguration(
            accepted_output_modes=["application/json"],
            history_length=0,
            return_immediately=True,
            task_push_notification_config={
                "url": "https://hooks.example/a2a",
                "token": "tok",
                "authentication": {"scheme": "Bearer"},
            },
        ),
        metadata={"caller": "cli"},
        tenant="t1",
    )
    back = round_trip(request, a2a_pb2.SendMessageRequest)
    assert back["configuration"]["historyLength"] == 0


@pytest.mark.parametrize(
    ("model", "proto_type"),
    [
        (GetTaskRequest(id="task-1", history_length=5, tenant="t1"), a2a_pb2.GetTaskRequest),
        (GetTaskRequest(id="task-1"), a2a_pb2.GetTaskRequest),
        (CancelTaskRequest(id="task-1", metadata={"reason": "user"}, tenant="t1"), a2a_pb2.CancelTaskRequest),
        (SubscribeToTaskRequest(id="task-1", tenant="t1"), a2a_pb2.SubscribeToTaskRequest),
        (
            ListTasksRequest(
                context_id="ctx-1",
                status=TaskState.WORKING,
                page_size=100,
                page_token="abc",
                history_length=0,
                status_timestamp_after=TS,
                include_artifacts=False,
                tenant="t1",
            ),
            a2a_pb2.ListTasksRequest,
        ),
        (ListTasksRequest(), a2a_pb2.ListTasksRequest),
        (
            ListTasksResponse(
                tasks=[full_task(), full_task(TaskState.FAILED)], next_page_token="n", page_size=2, total_size=7
            ),
            a2a_pb2.ListTasksResponse,
        ),
        (ListTasksResponse(tasks=[]), a2a_pb2.ListTasksResponse),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, A2AModel) else "",
)
def test_control_params_round_trip(model: A2AModel, proto_type: type[ProtoMessage]) -> None:
    """GetTask, CancelTask, SubscribeToTask and ListTasks params and results are A2A messages."""
    round_trip(model, proto_type)


def test_jsonrpc_request_params_are_proto_messages() -> None:
    """The params of each A2A method, inside a JSON-RPC envelope, parse as that method's proto request."""
    proto_for = {
        "SendMessage": a2a_pb2.SendMessageRequest,
        "SendStreamingMessage": a2a_pb2.SendMessageRequest,
        "GetTask": a2a_pb2.GetTaskRequest,
        "CancelTask": a2a_pb2.CancelTaskRequest,
        "SubscribeToTask": a2a_pb2.SubscribeToTaskRequest,
        "ListTasks": a2a_pb2.ListTasksRequest,
    }
    samples: dict[str, A2AModel] = {
        "SendMessage": SendMessageRequest(message=full_message(Role.USER)),
        "SendStreamingMessage": SendMessageRequest(message=full_message(Role.USER)),
        "GetTask": GetTaskRequest(id="t"),
        "CancelTask": CancelTaskRequest(id="t"),
        "SubscribeToTask": SubscribeToTaskRequest(id="t"),
        "ListTasks": ListTasksRequest(context_id="c"),
    }
    assert set(PARAMS_BY_METHOD) == set(proto_for)
    for method, params in samples.items():
        envelope = JsonRpcRequest(jsonrpc="2.0", id=7, method=method, params=params.to_json_dict())
        decoded = JsonRpcRequest.model_validate_json(envelope.model_dump_json())
        typed = PARAMS_BY_METHOD[method].from_json_dict(decoded.params)
        round_trip(typed, proto_for[method])


# --- the models cover the proto exactly ---------------------------------------------------------

MODEL_TO_PROTO: list[tuple[type[A2AModel], type[ProtoMessage]]] = [
    (Part, a2a_pb2.Part),
    (Message, a2a_pb2.Message),
    (TaskStatus, a2a_pb2.TaskStatus),
    (Artifact, a2a_pb2.Artifact),
    (Task, a2a_pb2.Task),
    (TaskStatusUpdateEvent, a2a_pb2.TaskStatusUpdateEvent),
    (TaskArtifactUpdateEvent, a2a_pb2.TaskArtifactUpdateEvent),
    (StreamResponse, a2a_pb2.StreamResponse),
    (SendMessageResponse, a2a_pb2.SendMessageResponse),
    (AgentInterface, a2a_pb2.AgentInterface),
    (AgentExtension, a2a_pb2.AgentExtension),
    (AgentCapabilities, a2a_pb2.AgentCapabilities),
    (AgentSkill, a2a_pb2.AgentSkill),
    (AgentProvider, a2a_pb2.AgentProvider),
    (AgentCardSignature, a2a_pb2.AgentCardSignature),
    (AgentCard, a2a_pb2.AgentCard),
    (SendMessageConfiguration, a2a_pb2.SendMessageConfiguration),
    (SendMessageRequest, a2a_pb2.SendMessageRequest),
    (GetTaskRequest, a2a_pb2.GetTaskRequest),
    (CancelTaskRequest, a2a_pb2.CancelTaskRequest),
    (SubscribeToTaskRequest, a2a_pb2.SubscribeToTaskRequest),
    (ListTasksRequest, a2a_pb2.ListTasksRequest),
    (ListTasksResponse, a2a_pb2.ListTasksResponse),
]


@pytest.mark.parametrize(("model", "proto_type"), MODEL_TO_PROTO, ids=lambda v: getattr(v, "__name__", ""))
def test_model_fields_are_the_proto_fields(model: type[A2AModel], proto_type: type[ProtoMessage]) -> None:
    """Each model has exactly the proto's fields: none missing (a peer's valid payload refused), none invented."""
    ours = {field.alias or name for name, field in model.model_fields.items()}
    theirs = {f.json_name for f in proto_type.DESCRIPTOR.fields}
    assert ours == theirs


@pytest.mark.parametrize(("model", "proto_type"), MODEL_TO_PROTO, ids=lambda v: getattr(v, "__name__", ""))
def test_proto_required_fields_are_required(model: type[A2AModel], proto_type: type[ProtoMessage]) -> None:
    """A field the A2A proto marks REQUIRED is required by our model, or has a default so we always send it."""
    optional_in_ours = {"contextId"}  # events: we always set it; kept optional so partial events still parse
    by_alias = {field.alias or name: field for name, field in model.model_fields.items()}
    for f in proto_type.DESCRIPTOR.fields:
        behaviors = f.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        if field_behavior_pb2.REQUIRED in behaviors and f.json_name not in optional_in_ours:
            ours = by_alias[f.json_name]
            assert ours.is_required() or ours.get_default(call_default_factory=True) is not None, f.json_name


# Required by us although the proto does not mark them REQUIRED, with the reason.
REQUIRED_BY_US_ONLY = {(AgentExtension, "uri")}  # an extension without its URI means nothing


@pytest.mark.parametrize(("model", "proto_type"), MODEL_TO_PROTO, ids=lambda v: getattr(v, "__name__", ""))
def test_fields_we_require_are_proto_required(model: type[A2AModel], proto_type: type[ProtoMessage]) -> None:
    """We refuse a payload for a missing field only when A2A requires it: an SDK peer omits empty defaults."""
    required = {
        f.json_name
        for f in proto_type.DESCRIPTOR.fields
        if field_behavior_pb2.REQUIRED in f.GetOptions().Extensions[field_behavior_pb2.field_behavior]
    }
    for name, field in model.model_fields.items():
        if field.is_required() and (model, name) not in REQUIRED_BY_US_ONLY:
            assert field.alias in required, field.alias


def test_empty_list_tasks_response_from_sdk_peer_validates() -> None:
    """An SDK peer prints an empty ListTasksResponse without ``tasks``; we still accept it."""
    back = MessageToDict(a2a_pb2.ListTasksResponse(page_size=50))
    assert ListTasksResponse.from_json_dict(back).tasks == []


# --- the other direction: what a proto-based peer sends -----------------------------------------


def test_proto_built_task_validates_and_reencodes_identically() -> None:
    """A Task built with the official SDK types is accepted by our model and re-encoded to the same proto."""
    proto = a2a_pb2.Task(
        id="t1",
        context_id="c1",
        status=a2a_pb2.TaskStatus(
            state=a2a_pb2.TASK_STATE_INPUT_REQUIRED,
            message=a2a_pb2.Message(message_id="m1", role=a2a_pb2.ROLE_AGENT, parts=[a2a_pb2.Part(text="which file?")]),
        ),
        artifacts=[
            a2a_pb2.Artifact(
                artifact_id="a1",
                name="result",
                parts=[a2a_pb2.Part(raw=b"\x00\xffbytes", media_type="application/octet-stream")],
            )
        ],
    )
    proto.status.timestamp.FromJsonString("2025-01-01T00:00:00.5+02:00")
    proto.metadata.update({"k": "v", "n": 1})
    ours = Task.from_json_dict(MessageToDict(proto))
    assert ours.status.state is TaskState.INPUT_REQUIRED
    assert ParseDict(ours.to_json_dict(), a2a_pb2.Task()) == proto


def test_proto_field_names_are_accepted() -> None:
    """ProtoJSON parsers accept the original snake_case names too; so do we."""
    message = Message.from_json_dict({"message_id": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]})
    assert message.to_json_dict() == {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}


@pytest.mark.parametrize(
    "timestamp",
    [
        "2025-01-01T00:00:00Z",
        "2025-01-01T00:00:00.123456789Z",
        "2025-01-01T00:00:00.5+02:00",
        "2025-01-01T00:00:00-07:30",
        "2025-01-01t00:00:00Z",
        "2025-01-01 00:00:00Z",
        "2025-01-01T00:00:00",
        "2025-01-01T00:00:00.1234567891Z",
        "2025-02-30T00:00:00Z",
        "2025-01-01T24:00:00Z",
        "0000-01-01T00:00:00Z",
        "yesterday",
    ],
)
def test_timestamps_accepted_exactly_when_proto_accepts(timestamp: str) -> None:
    """We refuse exactly the timestamps google.protobuf.Timestamp refuses, so no accepted task fails at a gateway."""
    try:
        timestamp_pb2.Timestamp().FromJsonString(timestamp)
        proto_ok = True
    except ValueError:
        proto_ok = False
    try:
        TaskStatus(state=TaskState.WORKING, timestamp=timestamp)
        ours_ok = True
    except ValueError:
        ours_ok = False
    assert ours_ok == proto_ok


def test_now_timestamp_is_canonical() -> None:
    """The timestamps we write are printed back by protobuf unchanged."""
    stamp = utc_timestamp()
    parsed = timestamp_pb2.Timestamp()
    parsed.FromJsonString(stamp)
    assert parsed.ToJsonString() == stamp


@pytest.mark.parametrize("raw", ["", "aGk=", "aGk", "aGVsbG8_-w==", "+/+/"])
def test_raw_base64_decodes_as_proto_does(raw: str) -> None:
    """Every raw value we accept (standard or URL-safe, padding optional) is decoded by protobuf."""
    part = Part(raw=raw)
    proto = ParseDict(part.to_json_dict(), a2a_pb2.Part())
    assert proto.HasField("raw")


# --- JSON-RPC errors ----------------------------------------------------------------------------


def _error_infos(error: JsonRpcErrorObject) -> list[error_details_pb2.ErrorInfo]:
    infos = []
    for item in error.data or []:
        packed = ParseDict(item, any_pb2.Any(), ignore_unknown_fields=False)
        info = error_details_pb2.ErrorInfo()
        assert packed.Unpack(info), item
        assert MessageToDict(packed) == {k: v for k, v in item.items() if v != {}}
        infos.append(info)
    return infos


def test_transport_error_data_is_google_rpc_error_info() -> None:
    """A transport failure's data is a list of google.protobuf.Any holding google.rpc.ErrorInfo."""
    exc = errors.transport_rpc_error(codes.AGENT_NOT_FOUND, "no agent named x", {"agent": "x"})
    response = JsonRpcResponse(id="r1", error=JsonRpcErrorObject(code=exc.code, message=str(exc), data=exc.data))
    decoded = JsonRpcResponse.model_validate_json(response.model_dump_json())
    assert decoded.error is not None
    [info] = _error_infos(decoded.error)
    assert (info.reason, info.domain, dict(info.metadata)) == (codes.AGENT_NOT_FOUND, codes.DOMAIN, {"agent": "x"})
    assert decoded.error.code == codes.TRANSPORT_ERROR


@pytest.mark.parametrize("reason", codes.TRANSPORT_REASONS)
def test_every_transport_reason_is_an_error_info(reason: str) -> None:
    """Each a2amesh reason is carried as a valid ErrorInfo with code -32000, never an A2A code."""
    exc = errors.transport_rpc_error(reason, "x")
    [info] = _error_infos(JsonRpcErrorObject(code=exc.code, message="x", data=exc.data))
    assert info.reason == reason
    assert exc.code == codes.TRANSPORT_ERROR
    back = errors.from_rpc_error(exc.code, "x", exc.data)
    assert isinstance(back, errors.TransportError)
    assert back.reason == reason


def test_error_codes_and_reasons_match_the_sdk() -> None:
    """Our JSON-RPC codes and ErrorInfo reasons/domain are the ones the official SDK sends and expects.

    The gateway adds its transport reasons (-32000) to the SDK's tables (``a2amesh.gateway.errors.register``);
    those entries are ours, not the SDK's, and are left out here.
    """
    from a2amesh.gateway.errors import MeshTransportError

    sdk_codes = {
        cls: code for cls, code in sdk_errors.JSON_RPC_ERROR_CODE_MAP.items() if not issubclass(cls, MeshTransportError)
    }
    with_reason = {
        code: sdk_errors.A2A_ERROR_REASONS[cls]
        for cls, code in sdk_codes.items()
        if cls in sdk_errors.A2A_ERROR_REASONS
    }
    assert codes.A2A_REASONS == with_reason
    assert set(sdk_codes.values()) == {
        codes.PARSE_ERROR,
        codes.INVALID_REQUEST,
        codes.METHOD_NOT_FOUND,
        codes.INVALID_PARAMS,
        codes.INTERNAL_ERROR,
        *range(codes.VERSION_NOT_SUPPORTED, codes.TASK_NOT_FOUND + 1),
    }
    assert codes.A2A_DOMAIN == sdk_error_handlers.A2A_DOMAIN
    assert codes.ERROR_INFO_TYPE == sdk_error_handlers.ERROR_INFO_TYPE
    assert codes.TRANSPORT_ERROR not in codes.A2A_REASONS


def test_sdk_error_details_validate_as_our_error_object() -> None:
    """The data list the SDK builds for an A2A error fits our error object and parses as google.rpc Any."""
    sdk_error = sdk_errors.TaskNotFoundError("task t1 not found", data={"task_id": "t1"})
    data = sdk_error_handlers.build_error_details(sdk_error)
    error = JsonRpcErrorObject(code=codes.TASK_NOT_FOUND, message="task t1 not found", data=data)
    [info] = _error_infos(error)
    assert (info.reason, info.domain) == ("TASK_NOT_FOUND", codes.A2A_DOMAIN)


def test_error_info_metadata_must_be_strings() -> None:
    """ErrorInfo.metadata is map<string,string>: a non-string value would be refused by proto peers."""
    item = errors.error_info(codes.UNAVAILABLE, {"retry_in_ms": "100"})
    ParseDict(item, any_pb2.Any())
    with pytest.raises(ParseError):
        ParseDict({**item, "metadata": {"retry_in_ms": 100}}, any_pb2.Any())


@pytest.mark.parametrize(
    ("built", "fields"),
    [
        (lambda: Part.of_text("hello"), {"text": "hello"}),
        (lambda: Part.of_data({"a": [1, 2]}), {"data": {"a": [1, 2]}, "media_type": "application/json"}),
    ],
)
def test_built_parts_equal_pydantic_constructed_ones(built: Any, fields: dict[str, Any]) -> None:
    """Part.of_text / of_data skip pydantic's per-field default lookup: the part is the same in every respect."""
    part, reference = built(), Part.model_construct(**fields)
    assert part == reference
    assert part.model_fields_set == reference.model_fields_set == set(fields)
    assert part.model_dump_json() == reference.model_dump_json()
    assert part.to_json_dict() == reference.to_json_dict()
    assert repr(part) == repr(reference)
    assert Part.model_validate_json(part.model_dump_json()) == part
    assert part.model_copy(update={"filename": "f"}).filename == "f"
    assert part.filename is None
