"""A2A stream events and the responses of SendMessage / SendStreamingMessage."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from a2amesh.protocol.base import A2AModel
from a2amesh.protocol.parts import Message
from a2amesh.protocol.task import Artifact, Task, TaskStatus


class TaskStatusUpdateEvent(A2AModel):
    """A task changed state or reports progress."""

    task_id: str
    context_id: str | None = None
    status: TaskStatus
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(A2AModel):
    """A task produced (a chunk of) an artifact."""

    task_id: str
    context_id: str | None = None
    artifact: Artifact
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, Any] | None = None


def _one_of(model: A2AModel, names: tuple[str, ...]) -> None:
    present = [n for n in names if getattr(model, n) is not None]
    if len(present) != 1:
        raise ValueError(f"exactly one of {', '.join(names)} must be set (got {', '.join(present) or 'none'})")


class StreamResponse(A2AModel):
    """One message of a SendStreamingMessage / SubscribeToTask stream."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> StreamResponse:
        _one_of(self, ("task", "message", "status_update", "artifact_update"))
        return self


class SendMessageResponse(A2AModel):
    """The result of SendMessage: the task (or a direct message)."""

    task: Task | None = None
    message: Message | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> SendMessageResponse:
        _one_of(self, ("task", "message"))
        return self
