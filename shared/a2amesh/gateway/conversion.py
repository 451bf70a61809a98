"""The one place that converts between the a2a-sdk's protobuf types and our pydantic models.

Both sides speak ProtoJSON, so each conversion is a JSON round trip: ``MessageToDict`` / ``ParseDict`` on the
SDK side, ``model_dump(by_alias=True)`` / ``model_validate`` on ours. A value our models refuse (an empty
message, a wrong enum) becomes :class:`a2a.utils.errors.InvalidParamsError` naming the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message as ProtoMessage
from pydantic import BaseModel, ValidationError

from a2amesh.protocol import (
    AgentCard,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    StreamResponse,
    Task,
)

P = TypeVar("P", bound=ProtoMessage)
M = TypeVar("M", bound=BaseModel)

Event = pb.Task | pb.Message | pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent
"""What the SDK's request handler yields from a stream (its ``a2a.server.events.Event``)."""


class ConversionError(ValueError):
    """A protobuf value our models refuse.

    Attributes:
        fields: ``field: problem`` per error, fields as ProtoJSON paths (``message.parts``).
    """

    def __init__(self, what: str, fields: list[str]) -> None:
        self.fields = fields
        super().__init__(f"invalid {what}: {'; '.join(fields)}")


def _to_model(message: ProtoMessage, model: type[M], prefix: str = "") -> M:
    data = MessageToDict(message, preserving_proto_field_name=False)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        fields = []
        for err in e.errors():
            path = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
            fields.append(f"{path or '(root)'}: {err['msg']}")
        raise ConversionError(type(message).__name__, fields) from e


def _to_proto(model: BaseModel, proto: type[P]) -> P:
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    out = proto()
    ParseDict(data, out, ignore_unknown_fields=True)
    return out


def send_request_from_proto(params: pb.SendMessageRequest) -> SendMessageRequest:
    """SDK ``SendMessageRequest`` → ours (the message validated as our agents will)."""
    request = _to_model(params, SendMessageRequest)
    if request.tenant == "":
        request = request.model_copy(update={"tenant": None})
    return request


def list_request_from_proto(params: pb.ListTasksRequest) -> ListTasksRequest:
    """SDK ``ListTasksRequest`` → ours; proto3 defaults (0, "", UNSPECIFIED) mean "not given"."""
    data: dict[str, Any] = {}
    if params.context_id:
        data["contextId"] = params.context_id
    if params.status:
        data["status"] = pb.TaskState.Name(params.status)
    if params.page_size:
        data["pageSize"] = params.page_size
    if params.page_token:
        data["pageToken"] = params.page_token
    if params.HasField("history_length"):
        data["historyLength"] = params.history_length
    if params.HasField("status_timestamp_after"):
        data["statusTimestampAfter"] = MessageToDict(params)["statusTimestampAfter"]
    if params.include_artifacts:
        data["includeArtifacts"] = True
    try:
        return ListTasksRequest.model_validate(data)
    except ValidationError as e:
        raise ConversionError(
            "ListTasksRequest", [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
        ) from e


def task_to_proto(task: Task) -> pb.Task:
    """Our ``Task`` → SDK ``Task``."""
    return _to_proto(task, pb.Task)


def list_response_to_proto(response: ListTasksResponse) -> pb.ListTasksResponse:
    """Our ``ListTasksResponse`` → SDK ``ListTasksResponse``."""
    return _to_proto(response, pb.ListTasksResponse)


def event_to_proto(response: StreamResponse) -> Event:
    """One of our ``StreamResponse`` events → the SDK event it holds (task, message, status or artifact update)."""
    proto = _to_proto(response, pb.StreamResponse)
    which = proto.WhichOneof("payload")
    if which == "task":
        return proto.task
    if which == "message":
        return proto.message
    if which == "status_update":
        return proto.status_update
    if which == "artifact_update":
        return proto.artifact_update
    raise ConversionError("StreamResponse", ["(root): holds no event"])


def card_to_proto(card: AgentCard) -> pb.AgentCard:
    """Our ``AgentCard`` → SDK ``AgentCard`` (what the card route serves)."""
    return _to_proto(card, pb.AgentCard)


def card_from_proto(card: pb.AgentCard) -> AgentCard:
    """SDK ``AgentCard`` → ours."""
    return _to_model(card, AgentCard)
