"""JSON-RPC 2.0 envelopes and the params of the A2A methods."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator

from a2amesh.protocol.base import A2AModel, Timestamp
from a2amesh.protocol.events import StreamResponse
from a2amesh.protocol.parts import Message
from a2amesh.protocol.task import Task, TaskState

JsonRpcId = StrictStr | StrictInt | StrictFloat | None
"""A JSON-RPC id: string, number or null, kept exactly as sent so it is echoed unchanged (``true`` is refused)."""


class SendMessageConfiguration(A2AModel):
    """Options of a SendMessage call."""

    accepted_output_modes: list[str] | None = None
    history_length: int | None = Field(default=None, ge=0)
    return_immediately: bool | None = None
    task_push_notification_config: dict[str, Any] | None = None


class SendMessageRequest(A2AModel):
    """Params of SendMessage and SendStreamingMessage."""

    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None

    @model_validator(mode="after")
    def _has_parts(self) -> SendMessageRequest:
        if not self.message.parts:
            raise ValueError("message.parts is empty: a message needs at least one part")
        return self


class GetTaskRequest(A2AModel):
    """Params of GetTask."""

    id: str
    history_length: int | None = Field(default=None, ge=0)
    tenant: str | None = None


class CancelTaskRequest(A2AModel):
    """Params of CancelTask."""

    id: str
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class SubscribeToTaskRequest(A2AModel):
    """Params of SubscribeToTask."""

    id: str
    tenant: str | None = None


class ListTasksRequest(A2AModel):
    """Params of ListTasks."""

    context_id: str | None = None
    status: TaskState | None = None
    page_size: int | None = Field(default=None, ge=1, le=100)
    page_token: str | None = None
    history_length: int | None = Field(default=None, ge=0)
    status_timestamp_after: Timestamp | None = None
    include_artifacts: bool | None = None
    tenant: str | None = None


class ListTasksResponse(A2AModel):
    """Result of ListTasks."""

    tasks: list[Task] = Field(default_factory=list)
    next_page_token: str = ""
    page_size: int = 0
    total_size: int = 0


PARAMS_BY_METHOD: dict[str, type[A2AModel]] = {
    "SendMessage": SendMessageRequest,
    "SendStreamingMessage": SendMessageRequest,
    "GetTask": GetTaskRequest,
    "CancelTask": CancelTaskRequest,
    "SubscribeToTask": SubscribeToTaskRequest,
    "ListTasks": ListTasksRequest,
}


class JsonRpcRequest(BaseModel):
    """A JSON-RPC 2.0 request envelope (params validated separately, per method)."""

    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"]
    id: JsonRpcId = None
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class JsonRpcErrorObject(BaseModel):
    """The ``error`` member of a JSON-RPC response."""

    model_config = ConfigDict(extra="forbid")

    code: int
    message: str
    data: list[dict[str, Any]] | None = None


class _ResponseEnvelope(BaseModel):
    """What every JSON-RPC 2.0 response holds besides its ``result``: exactly one of ``result`` and ``error``."""

    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId = None
    error: JsonRpcErrorObject | None = None

    @model_validator(mode="after")
    def _result_or_error(self) -> Self:
        if (getattr(self, "result", None) is None) == (self.error is None):
            raise ValueError("a JSON-RPC response holds exactly one of result and error")
        return self


class JsonRpcResponse(_ResponseEnvelope):
    """A JSON-RPC 2.0 response envelope, its ``result`` left as JSON."""

    result: dict[str, Any] | None = None


class StreamReply(_ResponseEnvelope):
    """A response on a caller's reply subject: the envelope and its ``StreamResponse`` validated in one pass.

    A ``SendMessageResponse`` (``{task}`` or ``{message}``) is also a valid ``StreamResponse``.
    """

    result: StreamResponse | None = None
