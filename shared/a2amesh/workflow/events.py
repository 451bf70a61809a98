"""The events and commands both workflow engines speak (the DAG's and the graph's), and the execution status.

An engine consumes events (a call's result, a timer, a cancellation, a human's answer) and returns
commands for the executor to carry out (cancel a callee, arm or disarm a timer, emit a lifecycle
event, ask for a review, answer the caller). Each format adds its own on top:
:mod:`a2amesh.workflow.dag.state` (``NodePaused``, ``DispatchNode``) and
:mod:`a2amesh.workflow.graph.state` (``ToolsCompleted``, ``DispatchGraphNode``, ``RunTools``).
Plain, JSON-serialisable pydantic data, so the executor can checkpoint and replay.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.enums import ValueEnum
from a2amesh.jsontext import JsonValue
from a2amesh.protocol import Message

__all__ = [
    "CancelCall",
    "CancelRequested",
    "ClearTimer",
    "FINAL_EXECUTION_STATUSES",
    "EmitEvent",
    "ErrorKind",
    "ExecutionStatus",
    "Finish",
    "NodeCall",
    "NodeFailed",
    "NodePaused",
    "NodeSucceeded",
    "RequestReview",
    "ReviewAnswered",
    "SetTimer",
    "TimerFired",
]


class ExecutionStatus(ValueEnum):
    """Status of a whole execution."""

    RUNNING = "running"
    PAUSED = "paused"
    """Waiting for a human (a review node, or a callee that asked for input); no call in flight."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def final(self) -> bool:
        """The execution has finished."""
        return self in FINAL_EXECUTION_STATUSES


FINAL_EXECUTION_STATUSES = (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELED)
"""Read by :attr:`ExecutionStatus.final` and ``ExecutionState.finished``: built once, not per call (read in loops)."""


ErrorKind: TypeAlias = Literal["failure", "error"]
"""``failure``: the callee reported failure; ``error``: the call itself failed (SPEC §5.4 retry policies)."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- events ----------------------------------------------------------------------------------


class NodeSucceeded(_Data):
    """A node call completed (callee state ``TASK_STATE_COMPLETED``)."""

    kind: Literal["node_succeeded"] = "node_succeeded"
    path: str
    attempt: int
    output: JsonValue = None
    file: bool = Field(
        False, description="The output is a file result's JSON form: the callee answered with a file part."
    )
    task_id: str | None = None
    usage: dict[str, Any] | None = None


class NodeFailed(_Data):
    """A node call failed: the callee reported failure, or the call itself failed."""

    kind: Literal["node_failed"] = "node_failed"
    path: str
    attempt: int
    error: str
    error_kind: ErrorKind = "failure"
    retryable: bool = True
    task_id: str | None = None
    usage: dict[str, Any] | None = None


class NodePaused(_Data):
    """A callee asked for input (its task is ``TASK_STATE_INPUT_REQUIRED``): the calling node waits for a human."""

    kind: Literal["node_paused"] = "node_paused"
    path: str
    attempt: int
    review: dict[str, Any] = Field(description="The callee's review_request (its own path).")
    task_id: str | None = None
    usage: dict[str, Any] | None = None


class ReviewAnswered(_Data):
    """A human answered a review (the SPEC's resume body ``{"decision", "data"}`` validates as one)."""

    kind: Literal["review_answered"] = "review_answered"
    decision: Literal["approve", "edit", "reject"]
    data: JsonValue = None
    reason: str | None = None
    path: str | None = Field(None, description="The review addressed (default: the one the execution waits for).")


class TimerFired(_Data):
    """A timer armed by :class:`SetTimer` is due."""

    kind: Literal["timer_fired"] = "timer_fired"
    timer_id: str


class CancelRequested(_Data):
    """Someone cancelled the execution (CancelTask, ``a2amesh cancel``)."""

    kind: Literal["cancel_requested"] = "cancel_requested"
    reason: str = "canceled by request"


# --- commands --------------------------------------------------------------------------------


class NodeCall(_Data):
    """Send one attempt of a node to its agent or workflow (messageId checkpointed before publishing).

    What the executor needs of every format's call; each format's command adds its own fields and
    says how it goes on the wire (:meth:`message`). Answer with :class:`NodeSucceeded`,
    :class:`NodeFailed` or :class:`NodePaused` for ``(path, attempt)``.
    """

    path: str
    node_id: str
    agent: str
    attempt: int
    iteration: int
    message_id: str
    task_id: str
    input: JsonValue
    deadline: float | None = Field(None, description="Epoch seconds: the call's deadline, if any.")
    call_depth: int
    call_chain: list[str]

    @abstractmethod
    def message(self, *, execution_id: str, workflow: str, context_id: str | None) -> Message:
        """The A2A message that carries this call (pure: same command, same message)."""

    def message_json(
        self, *, execution_id: str, workflow: str, context_id: str | None, inline_limit: int
    ) -> bytes | None:
        """``message(...).to_json_bytes()`` written without the model, when the format can and every input part's
        JSON is at most ``inline_limit`` bytes (none to spill to an artifact); None: take :meth:`message`."""
        return None


class RequestReview(_Data):
    """Pause for a human: the task goes to TASK_STATE_INPUT_REQUIRED with ``review`` as a DataPart."""

    kind: Literal["request_review"] = "request_review"
    path: str
    node_id: str
    review: dict[str, JsonValue] = Field(description='{"type": "review_request", path, prompt, data, edit_schema}.')
    guard: Literal["stepLimit", "timeout", "maxRounds"] | None = Field(
        None, description="The guard that tripped, when a guard caused the handoff (graph workflows)."
    )


class CancelCall(_Data):
    """Cancel a callee's task (node timeout, fail-fast, a join that no longer needs it, cancellation)."""

    kind: Literal["cancel_call"] = "cancel_call"
    path: str
    agent: str
    task_id: str


class SetTimer(_Data):
    """Arm a timer; the executor feeds :class:`TimerFired` back when it is due."""

    kind: Literal["set_timer"] = "set_timer"
    timer_id: str
    due: float


class ClearTimer(_Data):
    """Disarm a timer that is no longer needed."""

    kind: Literal["clear_timer"] = "clear_timer"
    timer_id: str


class EmitEvent(_Data):
    """A lifecycle event: logged, published on the events subjects, and sent to the caller as progress."""

    kind: Literal["emit"] = "emit"
    event: str = Field(description="execution.started, node.started, node.completed, node.failed, node.skipped, ...")
    seq: int
    path: str | None = None
    node_id: str | None = None
    status: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    at: float


class Finish(_Data):
    """The execution finished: answer the caller once."""

    kind: Literal["finish"] = "finish"
    status: ExecutionStatus
    output: JsonValue = None
    error: str | None = None
