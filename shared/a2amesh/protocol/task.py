"""A2A tasks, their status and artifacts."""

from __future__ import annotations

from typing import Any

from a2amesh.enums import ValueEnum
from a2amesh.protocol.base import A2AModel, Timestamp
from a2amesh.protocol.parts import Message, Part


class TaskState(ValueEnum):
    """The lifecycle state of a task."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

    @property
    def terminal(self) -> bool:
        """No further transitions happen from this state."""
        return self in TERMINAL_STATES

    @property
    def interrupted(self) -> bool:
        """The task waits for input from its caller (the call's final message is sent)."""
        return self in INTERRUPTED_STATES

    @property
    def final(self) -> bool:
        """A call's last message carries this state (terminal or interrupted)."""
        return self.terminal or self.interrupted


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class TaskStatus(A2AModel):
    """A task's state, with an optional message and the time it was set (RFC 3339)."""

    state: TaskState
    message: Message | None = None
    timestamp: Timestamp | None = None


class Artifact(A2AModel):
    """An output of a task."""

    artifact_id: str
    parts: list[Part]
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task(A2AModel):
    """A unit of work of an agent."""

    id: str
    context_id: str | None = None
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None

    def keeps_history(self, history_length: int | None) -> bool:
        """Whether :meth:`with_history` is this task itself (it has at most ``history_length`` messages)."""
        return history_length is None or len(self.history or ()) <= history_length

    def with_history(self, history_length: int | None) -> Task:
        """This task with at most its ``history_length`` latest messages (A2A ``historyLength``; None: all)."""
        if self.keeps_history(history_length):
            return self
        kept = self.history[-history_length:] if history_length and self.history else None
        return self.model_copy(update={"history": kept})

    def json_with_history(self, history_length: int | None) -> bytes:
        """The ProtoJSON of :meth:`with_history` (``to_json_bytes``), without copying the task to drop its history."""
        if history_length == 0 and self.history:
            return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=True, exclude={"history"})
        return self.with_history(history_length).to_json_bytes()

    def result_part(self) -> Part | None:
        """The first part of ``artifacts[0]`` (the result contract of docs/protocol.md), if any."""
        if self.artifacts and self.artifacts[0].parts:
            return self.artifacts[0].parts[0]
        return None

    def output(self) -> Any:
        """The task's output value: the result DataPart's data, the text, or the URL of an artifact reference."""
        part = self.result_part()
        if part is None:
            return None
        if part.data is not None:
            return part.data
        if part.text is not None:
            return part.text
        return part.url if part.url is not None else part.raw
