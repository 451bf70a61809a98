"""The data of the graph engine (SPEC §6): execution state, the events it consumes, the commands it emits.

Plain, JSON-serialisable pydantic data, so the executor checkpoints the state in Redis after every
step (and, for a conversational workflow, keeps the last state per ``contextId`` as the next turn's
``previous``). The shared parts of the vocabulary — ``NodeSucceeded``, ``NodeFailed``,
``TimerFired``, ``CancelRequested``, ``ReviewAnswered``, ``RequestReview``, ``CancelCall``, ``SetTimer``,
``ClearTimer``, ``EmitEvent`` and ``Finish`` — are in :mod:`a2amesh.workflow.events`; the logic and the full
description of every command and event are in :mod:`a2amesh.workflow.graph.engine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from a2amesh.jsontext import JsonValue
from a2amesh.protocol import Message, Part, Role
from a2amesh.protocol.vocabulary import CALL_CHAIN_KEY, NODE_PATH_KEY
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    Finish,
    NodeCall,
    NodeFailed,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    SetTimer,
    TimerFired,
)
from a2amesh.workflow.graph.definition import Guard

__all__ = [
    "DispatchGraphNode",
    "FailureReason",
    "GraphCommand",
    "GraphEvent",
    "GraphFailure",
    "GraphMessage",
    "GraphState",
    "GraphStatus",
    "Pending",
    "RunTools",
    "ToolCall",
    "ToolResult",
    "ToolsCompleted",
    "parse_event",
]

GraphStatus: TypeAlias = Literal["running", "paused", "completed", "failed", "canceled"]
"""Status of one graph execution (``paused``: waiting for a human at a HUMAN_HANDOFF node)."""
FailureReason: TypeAlias = Literal[
    "INVALID_INPUT",
    "BAD_OUTPUT",
    "UNKNOWN_NEXT",
    "MISSING_NEXT",
    "NO_TOOL_ROUTE",
    "NO_TOOL_CALLS",
    "UNDEFINED_TARGET",
    "AGENT_FAILED",
    "GUARD",
    "DEADLINE",
    "REJECTED",
    "CANCELED",
]
"""Why a graph execution failed (:attr:`GraphFailure.reason`)."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- state -----------------------------------------------------------------------------------


class ToolCall(_Data):
    """One tool call an agent asked for."""

    id: str = Field(description="The call's id (tool results refer to it).")
    name: str = Field(min_length=1, description="The tool's name.")
    arguments: dict[str, JsonValue] = Field(default_factory=dict, description="The tool's arguments.")


class ToolResult(_Data):
    """The outcome of one tool call."""

    id: str = Field(description="The id of the call it answers.")
    name: str = Field(description="The tool's name.")
    output: JsonValue = Field(None, description="The tool's output (when it succeeded).")
    error: str | None = Field(None, description="Why the tool failed, if it did.")


class GraphMessage(_Data):
    """One message of the conversation (OpenAI chat roles)."""

    role: Literal["user", "assistant", "tool", "system"]
    content: JsonValue = None
    name: str | None = Field(None, description="The speaking node's name, the tool's name, or 'human'.")
    node_id: str | None = Field(None, description="The node that produced it.")
    tool_calls: list[ToolCall] | None = Field(None, description="Assistant: the tools it asked for.")
    tool_call_id: str | None = Field(None, description="Tool: the call it answers.")


class Pending(_Data):
    """What the execution waits for."""

    kind: Literal["agent", "tools", "review"]
    node_id: str
    path: str = Field(description="The node instance: '{node_id}#{n}'.")
    attempt: int = 1
    agent: str | None = None
    task_id: str | None = None
    started_at: float
    reply_to: str | None = Field(None, description="Reply subject of the agent call (set by the executor).")


class GraphFailure(_Data):
    """Why an execution failed, in parts (the message is also the Finish error)."""

    reason: FailureReason
    message: str
    node_id: str | None = None
    edge_id: str | None = None
    guard: Guard | None = None
    value: JsonValue = None


class GraphState(_Data):
    """Everything the engine knows about one execution of a graph (one conversation turn).

    The SPEC §6 state is ``messages``, ``next``, ``tool_calls``, ``tool_results``, ``last_agent``,
    ``steps`` and ``rounds``; the rest is bookkeeping.
    """

    execution_id: str
    workflow: str
    branch: str | None = None
    digest: str
    input: JsonValue = None
    task_id: str | None = None
    context_id: str | None = None
    call_depth: int = 0
    call_chain: list[str] = Field(default_factory=list)
    messages: list[GraphMessage] = Field(default_factory=list)
    next: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)
    last_agent: str | None = Field(None, description="The AGENT node that ran last.")
    steps: int = Field(0, description="Node runs in this execution (stepLimit).")
    rounds: int = Field(0, description="Returns to the entry node in this execution (maxRounds).")
    status: GraphStatus = "running"
    turn: int = Field(1, description="The conversation turn (1 for the first execution on a context).")
    last_output: JsonValue = Field(None, description="The last agent's raw output (simple format: next input).")
    pending: Pending | None = None
    calls: int = Field(0, description="Node instances started, across turns (instance numbers).")
    seq: int = Field(0, description="Lifecycle events emitted in this execution.")
    started_at: float = 0.0
    active_since: float | None = Field(None, description="When the current running stretch began (None: paused).")
    active_seconds: float = Field(0.0, description="Running time before the current stretch (timeout guard).")
    timers: dict[str, float] = Field(default_factory=dict, description="Armed timers: id → due (epoch seconds).")
    deadline: float | None = Field(None, description="The caller's deadline (epoch seconds), if any.")
    limit: Guard | None = Field(None, description="The guard that sent the execution to a handoff.")
    output: JsonValue = None
    error: str | None = None
    failure: GraphFailure | None = None
    finished_at: float | None = None
    usage: dict[str, int] = Field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """The execution has finished."""
        return self.status in ("completed", "failed", "canceled")

    @property
    def output_file(self) -> bool:
        """Never: a graph's output is the content of its last message."""
        return False


# --- events ----------------------------------------------------------------------------------


class ToolsCompleted(_Data):
    """The tools of a :class:`RunTools` ran (each result carries its output or error)."""

    kind: Literal["tools_completed"] = "tools_completed"
    path: str
    results: list[ToolResult] = Field(default_factory=list)


GraphEvent: TypeAlias = Annotated[
    NodeSucceeded | NodeFailed | TimerFired | CancelRequested | ToolsCompleted | ReviewAnswered,
    Field(discriminator="kind"),
]
_EVENTS: TypeAdapter[GraphEvent] = TypeAdapter(GraphEvent)


def parse_event(data: Mapping[str, Any]) -> GraphEvent:
    """An event from plain data (``kind`` picks the type; without one, a resume body ``{"decision", …}``).

    Raises:
        pydantic.ValidationError: the data is not an event.
    """
    if "kind" not in data and "decision" in data:
        return ReviewAnswered.model_validate(data)
    return _EVENTS.validate_python(data)


# --- commands --------------------------------------------------------------------------------


class DispatchGraphNode(NodeCall):
    """Call an AGENT node's agent (``control`` and ``input`` as two DataParts)."""

    kind: Literal["dispatch_graph_node"] = "dispatch_graph_node"
    control: dict[str, JsonValue]

    def message(self, *, execution_id: str, workflow: str, context_id: str | None) -> Message:
        """``control`` (a ``graph_node_request``) and the input as DataParts."""
        return Message(
            message_id=self.message_id,
            role=Role.USER,
            parts=[Part.of_data(self.control), Part.of_data({} if self.input is None else self.input)],
            context_id=context_id,
            metadata={CALL_CHAIN_KEY: self.call_chain, NODE_PATH_KEY: self.path},
        )


class RunTools(_Data):
    """Run the tool calls an agent asked for, then answer with :class:`ToolsCompleted`."""

    kind: Literal["run_tools"] = "run_tools"
    path: str
    node_id: str
    caller: str | None = Field(description="The AGENT node that asked.")
    calls: list[ToolCall]
    tools: dict[str, dict[str, JsonValue]] = Field(
        default_factory=dict, description="The definition's specs of the called tools it knows, by name."
    )
    deadline: float | None = None


GraphCommand: TypeAlias = Annotated[
    DispatchGraphNode | RunTools | RequestReview | CancelCall | SetTimer | ClearTimer | EmitEvent | Finish,
    Field(discriminator="kind"),
]
