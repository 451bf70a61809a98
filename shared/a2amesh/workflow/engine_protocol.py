"""The surface the DAG engine and the graph engine share, as protocols an executor can drive.

Both engines are pure state machines: ``start`` builds the first state of an execution and
``step`` applies one event, each returning the new state and the commands to carry out. The state,
event and command types differ per format (:mod:`a2amesh.workflow.dag.state`,
:mod:`a2amesh.workflow.graph.state`; the shared ones are in :mod:`a2amesh.workflow.events`), so
:class:`WorkflowEngine` is generic over them.

:class:`ExecutableEngine` is what one executor runner needs to drive an execution of either
format without knowing which: read and write its checkpoint, apply a batch of events, the node
records of ``a2amesh show``, the review a paused execution waits for and the calls to pick up after
a takeover. All of it is pure (no I/O, no clock but the one handed in). The commands a format
carries out with I/O of its own (a graph's tool runs) are named in
:attr:`ExecutableEngine.io_commands`; the executor runs them with a handler per type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from pydantic import BaseModel

from a2amesh.jsontext import JsonValue
from a2amesh.workflow.events import RequestReview, ReviewAnswered

if TYPE_CHECKING:
    from a2amesh.workflow.dag.engine import Engine
    from a2amesh.workflow.dag.state import Command, Event, ExecutionState
    from a2amesh.workflow.graph.engine import GraphEngine
    from a2amesh.workflow.graph.state import GraphCommand, GraphEvent, GraphState

__all__ = ["Advance", "ExecutableEngine", "OpenCall", "RunState", "StateWrite", "WorkflowEngine"]

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


class RunState(Protocol):
    """What an executor reads of every format's execution state (both are pydantic models)."""

    @property
    def execution_id(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def task_id(self) -> str | None: ...
    @property
    def context_id(self) -> str | None: ...
    @property
    def call_depth(self) -> int: ...
    @property
    def call_chain(self) -> list[str]: ...
    @property
    def status(self) -> str: ...
    @property
    def finished(self) -> bool: ...
    @property
    def input(self) -> JsonValue: ...
    @property
    def output(self) -> JsonValue: ...
    @property
    def output_file(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def started_at(self) -> float: ...
    @property
    def finished_at(self) -> float | None: ...
    @property
    def seq(self) -> int: ...
    @property
    def timers(self) -> dict[str, float]: ...
    @property
    def usage(self) -> dict[str, int]: ...
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (``deep``: sharing nothing with this one)."""
        ...


RunStateT = TypeVar("RunStateT", bound=RunState)


@dataclass(frozen=True, slots=True)
class Advance(Generic[RunStateT]):
    """A batch of events applied (:meth:`ExecutableEngine.advance`).

    Attributes:
        state: the new state (the one handed in when nothing applied).
        commands: the commands to carry out, in order.
        applied: the keys of the node results applied (refused as duplicates if written before).
        touched: the node paths the batch may have changed (None: compare every node).
    """

    state: RunStateT
    commands: list[BaseModel]
    applied: list[str]
    touched: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class StateWrite:
    """What to write of a state (:meth:`ExecutableEngine.state_write`).

    Attributes:
        state_json: the state (without its node instances when ``nodes`` is set, without its outputs when
            ``outputs`` is set).
        nodes: a split checkpoint's changed node instances (path → ``"ordinal JSON"``), or None.
        positions: the ordinal of every node instance once written (None: not split).
        reset: ``nodes`` holds every instance.
        outputs: a split checkpoint's changed outputs (node id → ``"ordinal JSON"``), or None.
        outputs_reset: ``outputs`` holds every output.
    """

    state_json: str
    nodes: dict[str, str] | None = None
    positions: dict[str, int] | None = None
    reset: bool = False
    outputs: dict[str, str] | None = None
    outputs_reset: bool = False


@dataclass(frozen=True, slots=True)
class OpenCall:
    """A call in flight in a checkpointed state, to pick up after a takeover.

    Attributes:
        path: the calling node instance.
        attempt: its attempt.
        agent: the callee (None: not sent yet).
        reply_to: the reply subject its final answer may already be on.
        resend: the command that sends it again with the same messageId, if there is no final answer.
    """

    path: str
    attempt: int
    agent: str | None
    reply_to: str | None
    resend: BaseModel | None


class ExecutableEngine(Protocol[RunStateT]):
    """What the executor needs of an engine to drive its executions (pure: see the module docstring).

    Commands and events cross this surface as pydantic models: the shared ones of
    :mod:`a2amesh.workflow.events` (a :class:`~a2amesh.workflow.events.NodeCall` for every call),
    plus the format's own, which only the format and its :attr:`io_commands` handlers know.
    """

    @property
    def name(self) -> str: ...

    @property
    def format(self) -> str:
        """The name of the engine's format (:mod:`a2amesh.workflow.formats`)."""
        ...

    @property
    def io_commands(self) -> tuple[type[BaseModel], ...]:
        """Command types the executor carries out with a handler of its own (I/O outside the runner)."""
        ...

    def parse_state(self, raw: str) -> RunStateT:
        """A checkpointed state (as :meth:`state_write` and the execution store wrote it)."""
        ...

    def for_state(self, state: RunStateT) -> ExecutableEngine[RunStateT]:
        """The engine that runs ``state`` (a scheduled branch run of a graph has an engine of its own)."""
        ...

    def state_json(self, state: RunStateT) -> str:
        """The whole state as JSON (the first write of an execution)."""
        ...

    def advance(self, state: RunStateT, events: Sequence[BaseModel], clock: Callable[[], float]) -> Advance[RunStateT]:
        """Apply a batch of events in order (results for calls no longer running skipped), reading ``clock``
        once per event applied."""
        ...

    def resume(self, state: RunStateT, answer: ReviewAnswered, now: float) -> tuple[RunStateT, Sequence[BaseModel]]:
        """Apply a human's answer to a paused execution.

        Raises:
            InvalidTransition: the answer fits no waiting review.
        """
        ...

    def set_reply_to(self, state: RunStateT, path: str, subject: str) -> None:
        """Record in ``state`` (before it is written) where the answer of the call at ``path`` arrives."""
        ...

    def state_write(
        self,
        old: RunStateT,
        new: RunStateT,
        touched: Iterable[str] | None,
        positions: dict[str, int] | None,
        records: Mapping[str, str] | None = None,
    ) -> StateWrite:
        """What to write of ``new`` after ``old`` (the last write); ``positions``: the ordinals that write left
        (None: write everything). The dict handed in may be updated in place. ``records``: the step's
        :meth:`node_records`, which an engine may reuse instead of serialising those instances again."""
        ...

    def node_records(self, old: RunStateT, new: RunStateT, touched: Iterable[str] | None, now: float) -> dict[str, str]:
        """The node records (path → JSON) a step changed at ``now``; ``touched`` narrows the paths compared."""
        ...

    def initial_records(self, state: RunStateT) -> dict[str, str]:
        """The node records of a new execution."""
        ...

    def pending_review(self, state: RunStateT) -> RequestReview | None:
        """The review a paused execution waits for (answered again after a takeover)."""
        ...

    def takeover(self, state: RunStateT) -> tuple[list[OpenCall], list[BaseModel]]:
        """What a replica taking over ``state`` picks up: the calls in flight, and commands to carry out again."""
        ...


if TYPE_CHECKING:  # mypy checks that both engines implement the protocols

    def _dag(engine: Engine) -> WorkflowEngine[ExecutionState, Event, Command]:
        return engine

    def _graph(engine: GraphEngine) -> WorkflowEngine[GraphState, GraphEvent, GraphCommand]:
        return engine

    def _dag_run(engine: Engine) -> ExecutableEngine[ExecutionState]:
        return engine

    def _graph_run(engine: GraphEngine) -> ExecutableEngine[GraphState]:
        return engine
