"""How an execution of each format starts: what a start reads before the engine's pure ``start``.

The engines' ``start`` differ in one argument each: a DAG's takes the outputs an ``a2amesh retry``
reuses from an earlier execution (``reuse``), a conversational graph's the state its previous turn on
the contextId left (``previous``, read after taking the turn). A :class:`Starter` per format does that
reading and calls its engine's ``start``; the intake picks one by the engine's ``format`` from
:func:`starters` (a table, as the command handlers are), so no caller tests the format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from a2amesh.errors import RpcError, TransportError
from a2amesh.jsontext import JsonValue
from a2amesh.protocol import Message, codes
from a2amesh.protocol.vocabulary import RETRY_REQUEST
from a2amesh.store.executions import ExecutionStore
from a2amesh.worker.decode import control_part
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.dag.nodes import LoopNode
from a2amesh.workflow.dag.state import ExecutionState, NodeStatus
from a2amesh.workflow.engine_protocol import ExecutableEngine, RunState
from a2amesh.workflow.formats import DAG, GRAPH
from a2amesh.workflow.graph.engine import GraphEngine
from a2amesh.workflow.graph.state import GraphState

__all__ = ["TURN_START_GRACE", "DagStarter", "GraphStarter", "StartArgs", "Starter", "starters"]

TURN_START_GRACE = 5.0
"""Seconds a conversation turn that took the turn pointer has to write its execution state; meanwhile the
next turn waits for it (after that the pointer is taken as left by a turn that never started)."""

E_contra = TypeVar("E_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class StartArgs:
    """What every start of an execution is given, whatever its format and whoever asked for it.

    Attributes:
        workflow: the workflow's served name.
        execution_id: the new execution's id (its task id too).
        input: the workflow input.
        now: the start time (epoch seconds).
        digest: the definition version.
        context_id: the task's contextId.
        call_depth: the request's ``A2A-Call-Depth``.
        call_chain: workflows above this one.
        deadline: the caller's deadline, if any.
        message: the request (None: a scheduled run).
    """

    workflow: str
    execution_id: str
    input: JsonValue
    now: float
    digest: str
    context_id: str
    call_depth: int = 0
    call_chain: tuple[str, ...] = ()
    deadline: float | None = None
    message: Message | None = None


class Starter(Protocol[E_contra]):
    """Starts executions of one format (see the module docstring)."""

    @property
    def branches(self) -> bool:
        """Whether the format has branches a schedule may run on their own."""
        ...

    def looks_first(self, engine: E_contra, message: Message) -> bool:
        """Whether a request must be checked against an existing or canceled execution before starting (a
        plain start leaves both checks to the create script: one round trip fewer)."""
        ...

    async def start(self, engine: E_contra, args: StartArgs) -> tuple[RunState, list[BaseModel]]:
        """The first state and commands of a new execution."""
        ...

    def branch(self, engine: E_contra, branch: str) -> ExecutableEngine[Any]:
        """The engine of one branch (a scheduled branch run is its own graph)."""
        ...


class DagStarter:
    """A DAG start: a retry request (``a2amesh retry``) reuses the outputs of an earlier execution."""

    branches = False

    def __init__(self, store: ExecutionStore) -> None:
        self.store = store

    def looks_first(self, engine: Engine, message: Message) -> bool:
        return control_part(message, RETRY_REQUEST) is not None

    async def start(self, engine: Engine, args: StartArgs) -> tuple[RunState, list[BaseModel]]:
        retry = None if args.message is None else control_part(args.message, RETRY_REQUEST)
        reuse, files = (None, set[str]()) if retry is None else await self._reuse(engine, retry)
        state, commands = engine.start(
            execution_id=args.execution_id,
            input=args.input,
            now=args.now,
            digest=args.digest,
            task_id=args.execution_id,
            context_id=args.context_id,
            call_depth=args.call_depth,
            call_chain=args.call_chain,
            deadline=args.deadline,
            reuse=reuse,
            reused_from=str(retry.get("execution_id")) if retry else None,
            reused_files=files,
        )
        return state, list[BaseModel](commands)

    def branch(self, engine: Engine, branch: str) -> ExecutableEngine[Any]:
        raise ValueError(f"workflow {engine.name} has no branches")  # never asked: branches is False

    async def _reuse(self, engine: Engine, retry: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        """Outputs of the earlier execution's completed DAG nodes, minus ``from_node`` and what follows it, and
        which of them are file results."""
        old_id = str(retry.get("execution_id") or "")
        raw = await self.store.state(old_id)
        if raw is None:
            raise RpcError(codes.INVALID_PARAMS, f"retry: execution {old_id!r} not found")
        old = ExecutionState.model_validate_json(raw)
        definition = engine.definition
        excluded: set[str] = set()
        start = retry.get("from_node")
        if start:
            if not definition.has_node(str(start)):
                raise RpcError(codes.INVALID_PARAMS, f"retry: workflow {engine.name} has no node {start!r}")
            pending = [str(start)]
            while pending:
                node_id = pending.pop()
                if node_id not in excluded:
                    excluded.add(node_id)
                    pending.extend(definition.dependents_of(node_id))
        reuse: dict[str, Any] = {}
        files: set[str] = set()
        for node_id in engine.order:
            run = old.nodes.get(node_id)
            if run is None or run.status is not NodeStatus.COMPLETED or node_id in excluded:
                continue
            reuse[node_id] = run.output
            if run.file:
                files.add(node_id)
            node = definition.node(node_id)
            if isinstance(node, LoopNode) and node.node in old.outputs:
                reuse[node.node] = old.outputs[node.node]
        return reuse, files


class GraphStarter:
    """A graph start: a conversational graph's request takes the next turn on its contextId (SPEC §3.8)."""

    branches = True

    def __init__(self, store: ExecutionStore) -> None:
        self.store = store

    def looks_first(self, engine: GraphEngine, message: Message) -> bool:
        return True  # a turn is taken before starting: an execution that exists must not take another

    async def start(self, engine: GraphEngine, args: StartArgs) -> tuple[RunState, list[BaseModel]]:
        previous = None
        if args.message is not None:
            previous = await self.take_turn(
                args.workflow, engine, args.message.context_id, args.execution_id, deadline=args.deadline
            )
        state, commands = engine.start(
            execution_id=args.execution_id,
            input=args.input,
            now=args.now,
            digest=args.digest,
            task_id=args.execution_id,
            context_id=args.context_id,
            call_depth=args.call_depth,
            call_chain=args.call_chain,
            deadline=args.deadline,
            previous=previous,
        )
        return state, list[BaseModel](commands)

    def branch(self, engine: GraphEngine, branch: str) -> ExecutableEngine[Any]:
        return GraphEngine(engine.root, branch=branch)

    async def take_turn(
        self, name: str, engine: GraphEngine, context_id: str | None, task_id: str, *, deadline: float | None
    ) -> GraphState | None:
        """Serialise a conversational graph's turns on one contextId (SPEC §3.8) and return the previous turn.

        Waits (keeping the request alive, without burning deliveries) while the previous turn runs, then
        moves the context's turn pointer ``"{task} {previous task}"`` with a compare-and-set, so two turns
        can never start from the same state. A redelivered turn finds the pointer already its own.
        """
        if not engine.graph.is_conversational or not context_id:
            return None
        while True:
            pointer = await self.store.turn_pointer(name, context_id)
            current, before, taken_ms = _parse_turn_pointer(pointer)
            if current == task_id:
                return await self._turn_state(before)
            previous = await self._turn_state(current)
            # a turn that took the pointer a moment ago may not have written its state yet
            starting = previous is None and current != "" and time.time() * 1000 - taken_ms < TURN_START_GRACE * 1000
            if starting or (previous is not None and previous.status == "running"):
                if deadline is not None and time.time() > deadline:
                    raise TransportError(
                        codes.DEADLINE_EXCEEDED,
                        f"turn {previous.turn if previous else 'of task ' + current} of context {context_id} "
                        "was still running at this request's deadline",
                    )
                await asyncio.sleep(0.2)  # the running turn finishes first; the caller's request stays alive
                continue
            if previous is not None and previous.status == "paused":
                raise RpcError(
                    codes.UNSUPPORTED_OPERATION,
                    f"turn {previous.turn} of context {context_id} (task {previous.task_id}) is paused for a human; "
                    "resume it first",
                )
            if await self.store.take_turn(name, context_id, pointer, f"{task_id} {current} {int(time.time() * 1000)}"):
                return previous

    async def _turn_state(self, task_id: str) -> GraphState | None:
        raw = await self.store.state(task_id) if task_id else None
        return None if raw is None else GraphState.model_validate_json(raw)


def starters(store: ExecutionStore) -> Mapping[str, Starter[Any]]:
    """The starter of each format, by name (an engine's ``format``)."""
    return {DAG.name: DagStarter(store), GRAPH.name: GraphStarter(store)}


def _parse_turn_pointer(pointer: str) -> tuple[str, str, int]:
    """``"{task} {previous task} {taken ms}"`` → (task, previous task, ms); older pointers lack the last two."""
    fields = pointer.split(" ")
    current = fields[0]
    before = fields[1] if len(fields) > 1 else ""
    taken = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
    return current, before, taken
