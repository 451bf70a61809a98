"""The surface the DAG engine and the graph engine share, as a protocol an executor can drive.

Both engines are pure state machines: ``start`` builds the first state of an execution and
``step`` applies one event, each returning the new state and the commands to carry out. The state,
event and command types differ per format (:mod:`a2amesh.workflow.dag.state`,
:mod:`a2amesh.workflow.graph.state`; the shared ones are in :mod:`a2amesh.workflow.events`), so the
protocol is generic over them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from a2amesh.workflow.templates import JsonValue

if TYPE_CHECKING:
    from a2amesh.workflow.dag.engine import Engine
    from a2amesh.workflow.dag.state import Command, Event, ExecutionState
    from a2amesh.workflow.graph.engine import GraphEngine
    from a2amesh.workflow.graph.state import GraphCommand, GraphEvent, GraphState

__all__ = ["WorkflowEngine"]

StateT = TypeVar("StateT")
EventT = TypeVar("EventT", contravariant=True)
CommandT = TypeVar("CommandT")


class WorkflowEngine(Protocol[StateT, EventT, CommandT]):
    """A pure workflow engine for one definition (stateless; one instance serves every execution of it).

    Attributes:
        name: the workflow's name.
    """

    @property
    def name(self) -> str: ...

    def start(
        self,
        *,
        execution_id: str,
        input: JsonValue,
        now: float,
        digest: str | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        call_depth: int = 0,
        call_chain: list[str] | tuple[str, ...] = (),
        deadline: float | None = None,
    ) -> tuple[StateT, list[CommandT]]:
        """Begin an execution: the first state and the commands to carry out."""
        ...

    def step(self, state: StateT, event: EventT, now: float) -> tuple[StateT, list[CommandT]]:
        """Apply one event to a copy of ``state``: the new state and the commands to carry out."""
        ...


if TYPE_CHECKING:  # mypy checks that both engines implement the protocol

    def _dag(engine: Engine) -> WorkflowEngine[ExecutionState, Event, Command]:
        return engine

    def _graph(engine: GraphEngine) -> WorkflowEngine[GraphState, GraphEvent, GraphCommand]:
        return engine
