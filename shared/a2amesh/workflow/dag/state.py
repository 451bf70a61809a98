"""The data of the DAG engine: execution state, and the events and commands only it has.

Everything here is plain, JSON-serialisable pydantic data, so the executor can checkpoint the state
in Redis after every step and any replica can carry on from it. The events and commands both engines
share are in :mod:`a2amesh.workflow.events`; the logic lives in :mod:`a2amesh.workflow.dag.engine`.

Node paths name one *instance* of a node within an execution:

- ``validate``: a DAG node (or an exit handler) — its id;
- ``process[3]``: item 3 of map ``process`` (an instance of the map's target node);
- ``poll#2``: iteration 2 of loop ``poll`` (an instance of the loop's target node);
- ``gather/customer``: branch ``customer`` of fork ``gather``.

Containers nest, so ``outer[1]#0`` is iteration 0 of the loop run by item 1 of map ``outer``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import orjson
from pydantic import ConfigDict, Field

from a2amesh.enums import ValueEnum
from a2amesh.jsontext import JsonValue
from a2amesh.protocol import Message, Part, Role
from a2amesh.protocol.vocabulary import CALL_CHAIN_KEY, NODE_PATH_KEY, NODE_REQUEST
from a2amesh.trusted import TrustedModel
from a2amesh.workflow.events import (
    FINAL_EXECUTION_STATUSES,
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    ErrorKind,
    ExecutionStatus,
    Finish,
    NodeCall,
    NodeFailed,
    NodePaused,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    SetTimer,
    TimerFired,
)

__all__ = [
    "Command",
    "DispatchNode",
    "Event",
    "ExecutionState",
    "NodePaused",
    "NodeRun",
    "NodeStatus",
    "Phase",
]


class NodeStatus(ValueEnum):
    """Status of one node instance."""

    PENDING = "pending"
    """Not started yet (dependencies not done)."""
    WAITING = "waiting"
    """Started, and waiting for a timer (retry backoff, loop delay)."""
    RUNNING = "running"
    """A call is in flight, or a container has instances running."""
    WAITING_INPUT = "waiting_input"
    """A human_review node waiting for its reviewer, or a call whose callee asked for input."""
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Not run: ``when`` false, a branch not taken, all dependencies skipped, a dependency failed."""
    CANCELED = "canceled"
    """Stopped while running: the execution was cancelled or failed fast, or a join no longer needed it."""

    @property
    def final(self) -> bool:
        """Nothing more happens to this instance."""
        return self in _FINAL_NODE_STATUSES


_FINAL_NODE_STATUSES = (NodeStatus.COMPLETED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELED)
"""Read by :attr:`NodeStatus.final`: the tuple built once, not from four class lookups per call (read in loops)."""


Phase: TypeAlias = Literal["dag", "exit", "done"]
"""Where an execution is: running its DAG, running exit handlers, or finished."""


class _Data(TrustedModel):
    model_config = ConfigDict(extra="forbid")


class NodeRun(_Data):
    """One instance of a node in one execution: its status, input, output, attempts and bookkeeping."""

    path: str = Field(description="The instance's path (see the module docstring).")
    node_id: str = Field(description="The definition node this is an instance of ('' for a fork branch's id).")
    type: str = Field(description="Node type, or 'branch' for a fork branch call.")
    parent: str | None = Field(None, description="Path of the container instance (map, loop, fork), if any.")
    status: NodeStatus = NodeStatus.PENDING
    reason: str | None = Field(None, description="Why it was skipped or cancelled.")
    attempt: int = Field(0, description="The current (or last) attempt, from 1.")
    iteration: int = Field(0, description="Loop iteration this instance belongs to (0 outside loops).")
    index: int | None = Field(None, description="Map item index of this instance.")
    input: JsonValue = None
    instruction: str | None = Field(None, description="The resolved instruction sent to the callee.")
    output: JsonValue = None
    file: bool = Field(False, description="The output is a file result's JSON form (NodeSucceeded.file).")
    error: str | None = None
    error_kind: ErrorKind | None = None
    agent: str | None = Field(None, description="The agent or workflow called.")
    message_id: str | None = Field(None, description="messageId of the current attempt's request.")
    task_id: str | None = Field(None, description="The callee's task id of the current attempt.")
    reply_to: str | None = Field(None, description="Reply subject of the current attempt (set by the executor).")
    started_at: float | None = None
    attempt_started_at: float | None = None
    finished_at: float | None = None
    usage: dict[str, Any] | None = Field(None, description="Token usage the callee reported.")
    absorbed: bool = Field(False, description="A failure a join tolerated (it does not fail the execution).")
    selected: str | None = Field(None, description="Router: the target it picked.")
    items: list[JsonValue] | None = Field(None, description="Map: the items.")
    launched: int = Field(0, description="Map: items started so far; loop: iterations started so far.")
    children: list[str] = Field(default_factory=list, description="Container: instance paths, in order.")
    open_children: int | None = Field(
        None, description="Container: children not final yet (kept as they change; None: count them)."
    )
    completed_children: int | None = Field(None, description="Container: children completed.")
    failed_children: int | None = Field(None, description="Container: children failed.")
    timer: str | None = Field(None, description="The timer this instance waits for, if any.")
    last_output: JsonValue = Field(None, description="Loop: the target's latest output (its scope).")
    review: dict[str, Any] | None = Field(
        None, description="Waiting for input: the review_request (path relative to this execution)."
    )
    resumes: int = Field(0, description="Resumes forwarded to this instance's callee.")

    @property
    def final(self) -> bool:
        """Nothing more happens to this instance."""
        return self.status in _FINAL_NODE_STATUSES  # NodeStatus.final, inlined (read in every loop)


class ExecutionState(_Data):
    """Everything the engine knows about one execution (checkpointed after every step)."""

    execution_id: str
    workflow: str
    digest: str = Field(description="Content hash of the definition this execution runs (pinned).")
    input: JsonValue = None
    task_id: str | None = None
    context_id: str | None = None
    call_depth: int = 0
    call_chain: list[str] = Field(default_factory=list, description="Workflows above this one, outermost first.")
    deadline: float | None = Field(None, description="The caller's deadline (epoch seconds), if any.")
    status: ExecutionStatus = ExecutionStatus.RUNNING
    phase: Phase = "dag"
    outcome: Literal["success", "failure", "cancel"] | None = None
    error: str | None = None
    output: JsonValue = None
    output_file: bool = Field(
        False, description="The output is a node's file result passed through: the answer is a file part."
    )
    nodes: dict[str, NodeRun] = Field(default_factory=dict)
    outputs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Outputs of completed DAG nodes (and a top-level loop's target), by id."
    )
    timers: dict[str, float] = Field(default_factory=dict, description="Armed timers: id → due (epoch seconds).")
    exit_queue: list[str] = Field(default_factory=list, description="Exit handlers still to run, in order.")
    cancel_requested: bool = False
    started_at: float = 0.0
    finished_at: float | None = None
    seq: int = Field(0, description="Events emitted so far (the A2A-Seq of progress replies).")
    usage: dict[str, int] = Field(default_factory=dict, description="Token usage summed over every node.")
    reused_from: str | None = Field(None, description="The execution whose outputs a retry reused.")
    paused_at: float | None = Field(None, description="When the execution paused for a human (None: not paused).")
    paused_seconds: float = Field(0.0, description="Time spent paused so far (excluded from the timeout).")

    @property
    def finished(self) -> bool:
        """The execution has finished."""
        return self.status in FINAL_EXECUTION_STATUSES  # ExecutionStatus.final, inlined (read in every loop)

    def running_calls(self) -> list[NodeRun]:
        """Instances with a call in flight."""
        return [run for run in self.nodes.values() if run.status is NodeStatus.RUNNING and run.task_id]


# --- events ----------------------------------------------------------------------------------


Event: TypeAlias = Annotated[
    NodeSucceeded | NodeFailed | NodePaused | TimerFired | CancelRequested | ReviewAnswered,
    Field(discriminator="kind"),
]


# --- commands --------------------------------------------------------------------------------


class DispatchNode(NodeCall):
    """Send one attempt of a node to its agent or workflow (messageId checkpointed before publishing)."""

    kind: Literal["dispatch"] = "dispatch"
    target_type: Literal["agent", "workflow"]
    instruction: str | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    resume: dict[str, Any] | None = Field(
        None, description="Continue the callee's paused task (task_id) with this resume body instead of a new call."
    )

    def message(self, *, execution_id: str, workflow: str, context_id: str | None) -> Message:
        """A ``workflow_node_request`` and the input as DataParts, or the resume body for the callee's paused task."""
        metadata: dict[str, Any] = {CALL_CHAIN_KEY: self.call_chain, NODE_PATH_KEY: self.path}
        if self.resume is not None:
            # continue the callee's paused task with the human's answer
            return Message(
                message_id=self.message_id,
                role=Role.USER,
                parts=[Part.of_data(self.resume)],
                task_id=self.task_id,
                context_id=context_id,
                metadata=metadata,
            )
        control = self._control(execution_id, workflow)
        return Message(
            message_id=self.message_id,
            role=Role.USER,
            parts=[Part.of_data(control), Part.of_data({} if self.input is None else self.input)],
            context_id=context_id,
            metadata=metadata,
        )

    def _control(self, execution_id: str, workflow: str) -> dict[str, Any]:
        """The request's first part: what the callee's node handler reads (docs/protocol.md)."""
        return {
            "type": NODE_REQUEST,
            "execution_id": execution_id,
            "node_id": self.node_id,
            "workflow_name": workflow,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "instruction": self.instruction,
            "max_retries": None,
            "suggested_output_name": f"{self.node_id}_output.json",
        }

    def message_json(
        self, *, execution_id: str, workflow: str, context_id: str | None, inline_limit: int
    ) -> bytes | None:
        """:meth:`message`'s ProtoJSON written by orjson (a new call only; None for what orjson would not write as
        pydantic does: integers beyond 64 bits, values that are not JSON, such as dates from YAML)."""
        if self.resume is not None:
            return None
        try:
            data = orjson.dumps({} if self.input is None else self.input, option=_STRICT)
            if len(data) > inline_limit:
                return None  # spilled to an artifact by the model path
            message: dict[str, Any] = {
                "messageId": self.message_id,
                "role": Role.USER.value,
                "parts": [
                    {"data": self._control(execution_id, workflow), "mediaType": _JSON_MEDIA_TYPE},
                    {"data": orjson.Fragment(data), "mediaType": _JSON_MEDIA_TYPE},
                ],
            }
            if context_id is not None:
                message["contextId"] = context_id
            message["metadata"] = {CALL_CHAIN_KEY: self.call_chain, NODE_PATH_KEY: self.path}
            return orjson.dumps(message, option=_STRICT)
        except orjson.JSONEncodeError:
            return None


_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson writes only what it and pydantic write alike (JSON values); the rest raises, for the model path."""
_JSON_MEDIA_TYPE = "application/json"


Command: TypeAlias = Annotated[
    DispatchNode | RequestReview | CancelCall | SetTimer | ClearTimer | EmitEvent | Finish, Field(discriminator="kind")
]
