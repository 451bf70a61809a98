"""The one place that converts between the a2a-sdk's protobuf types and our pydantic models.

Both sides speak ProtoJSON, so each conversion is a JSON round trip: ``MessageToDict`` on the SDK side and
``model_dump(by_alias=True)`` / ``model_validate`` on ours. A value our models refuse (an empty message, a
wrong enum) becomes :class:`a2a.utils.errors.InvalidParamsError` naming the field.

Our model → protobuf, on every answer, goes through :func:`_build`: a per-message-type plan (ProtoJSON key →
field, value converter) compiled once from the descriptor, then the message's C constructor. protobuf's own
``ParseDict`` walks the descriptor in Python for every field of every value and cost ~190 µs for an echo task
(~12 % of the gateway's CPU per call); the plan does the same in ~25 µs. A type it has no plan for (maps,
``Any``, ``Duration``) and a value it cannot convert go to ``ParseDict``, which stays the reference.

Numbers in ``data`` parts and ``metadata`` travel as ``google.protobuf.Value`` doubles. protobuf's Python JSON
printer writes an integral double as ``2.0`` (the C++, Java and Go printers write ``2``), so an integer a client
sent came to our agents as a float, and an integer an agent answered reached the client as one.
:func:`_integral_numbers` makes the printer write integral doubles up to 2^53 as integers, which serves both
ways: our ``MessageToDict`` of a request, and the SDK's of every answer. Beyond 2^53 a double holds no exact
integer and stays a float; a client that sends ``2.0`` gets ``2`` (JSON does not tell them apart).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass
from pydantic import BaseModel, ValidationError

from a2amesh.client import TokenDelta
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


_EXACT = 2**53


def _integral_numbers() -> None:
    """Make protobuf's JSON printer write an integral ``Value.number_value`` as an integer (see the module doc).

    ``Value.number_value`` is the only double of the A2A protobuf schema, so nothing else changes.
    """
    printer = cast(Any, json_format)._Printer
    if getattr(printer, "_a2amesh_integral", False):
        return
    print_value = printer._ValueMessageToJsonObject

    def value_to_json(self: Any, message: struct_pb2.Value) -> Any:
        if message.WhichOneof("kind") == "number_value":
            number = message.number_value
            if math.isfinite(number) and number.is_integer() and abs(number) <= _EXACT:
                return int(number)
        return print_value(self, message)

    printer._ValueMessageToJsonObject = value_to_json
    printer._a2amesh_integral = True


_integral_numbers()


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
    try:
        built = _build(data, cast(Descriptor, proto.DESCRIPTOR))  # the stubs' class attribute is a union
    except Exception:  # no plan for the type, or a value the plan cannot take: the reference parser decides
        built = None
    if isinstance(built, proto):
        return built
    out = proto()
    ParseDict(data, out, ignore_unknown_fields=True)
    return out


# ProtoJSON dict → message, by a plan compiled once per message type -------------------------------------

Convert = Callable[[Any], Any]
_plans: dict[str, dict[str, tuple[str, Convert]]] = {}


class _NoPlan(Exception):
    """A field type the plan does not handle (``_to_proto`` falls back to ``ParseDict``)."""


def _build(data: dict[str, Any], descriptor: Descriptor) -> ProtoMessage:
    plan = _plans.get(descriptor.full_name)
    if plan is None:
        plan = _plans[descriptor.full_name] = _compile(descriptor)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        entry = plan.get(key)
        if entry is None or value is None:  # unknown fields are ignored, as ParseDict(ignore_unknown_fields=True)
            continue
        name, convert = entry
        kwargs[name] = convert(value)
    return GetMessageClass(descriptor)(**kwargs)


def _compile(descriptor: Descriptor) -> dict[str, tuple[str, Convert]]:
    plan: dict[str, tuple[str, Convert]] = {}
    for f in descriptor.fields:
        convert = _converter(f)
        if f.is_repeated:
            convert = _repeated(convert)
        plan[f.json_name] = plan[f.name] = (f.name, convert)
    return plan


def _repeated(convert: Convert) -> Convert:
    return lambda values: [convert(v) for v in values]


def _converter(f: FieldDescriptor) -> Convert:
    message = f.message_type
    if message is not None:
        known = _WELL_KNOWN.get(message.full_name)
        if known is not None:
            return known
        if message.full_name.startswith("google.protobuf.") or message.GetOptions().map_entry:
            raise _NoPlan(f"{f.full_name}: {message.full_name}")
        return lambda value: _build(value, message)
    if f.enum_type is not None:
        numbers = {v.name: v.number for v in f.enum_type.values}
        return lambda value: numbers[value] if isinstance(value, str) else int(value)
    if f.type == FieldDescriptor.TYPE_BYTES:
        return _bytes
    if f.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return float
    if f.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL):
        return _same
    return _integer


def _same(value: Any) -> Any:
    return value


def _integer(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _bytes(value: str) -> bytes:
    text = value.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _timestamp(value: str) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromJsonString(value)
    return out


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    if not isinstance(value, dict):
        raise ValueError(f"not an object: {value!r}")
    out = struct_pb2.Struct()
    out.update(value)
    return out


def _value(value: Any) -> struct_pb2.Value:
    holder = struct_pb2.Struct()
    holder.update({"v": value})
    return holder.fields["v"]


def _list_value(value: list[Any]) -> struct_pb2.ListValue:
    out = struct_pb2.ListValue()
    out.extend(value)
    return out


_WELL_KNOWN: dict[str, Convert] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Struct": _struct,
    "google.protobuf.Value": _value,
    "google.protobuf.ListValue": _list_value,
}


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


STREAM_ARTIFACT = "stream"
"""The name of the artifact a stream's token deltas build up (``{task id}-stream``)."""


def delta_to_proto(delta: TokenDelta) -> pb.TaskArtifactUpdateEvent:
    """A token delta → the ``TaskArtifactUpdateEvent`` an SSE client hears: the text appended to the task's
    ``stream`` artifact (the first delta opens it). The final task still holds the whole output in
    ``artifacts[0]``; the stream artifact is not part of it (deltas are best effort and never stored)."""
    return pb.TaskArtifactUpdateEvent(
        task_id=delta.task_id,
        context_id=delta.context_id or "",
        artifact=pb.Artifact(
            artifact_id=f"{delta.task_id}-{STREAM_ARTIFACT}", name=STREAM_ARTIFACT, parts=[pb.Part(text=delta.text)]
        ),
        append=delta.index > 0,
        last_chunk=False,
    )


def card_to_proto(card: AgentCard) -> pb.AgentCard:
    """Our ``AgentCard`` → SDK ``AgentCard`` (what the card route serves)."""
    return _to_proto(card, pb.AgentCard)
