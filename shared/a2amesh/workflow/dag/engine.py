"""The workflow engine: a pure, deterministic state machine over :mod:`a2amesh.workflow.dag.state` data.

``Engine(definition).start(...)`` builds the first state of an execution, and
``Engine(definition).step(state, event, now)`` applies one event; both return the new state and the
commands the executor must carry out (dispatch a node, cancel a callee, arm a timer, emit an event,
answer the caller). The engine does no I/O, never reads the clock (``now`` is given) and never
mutates the state it is handed, so the executor can checkpoint the result and any replica can replay
from a checkpoint. The semantics are those of SPEC §5.4 and ``docs/workflows.md``; decisions the
SPEC leaves open are listed in ``docs/executor.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel

from a2amesh.diagnostics import schema_errors
from a2amesh.errors import InvalidTransition
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag import calls, checkpoint, flow, review
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.kinds import KINDS
from a2amesh.workflow.dag.nodes import JoinNode, WorkflowNode
from a2amesh.workflow.dag.state import Command, DispatchNode, Event, ExecutionState, NodePaused, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import CALL_TYPES, EXECUTION_TIMEOUT, Nodes, StepContext
from a2amesh.workflow.engine_protocol import Advance, OpenCall, StateWrite
from a2amesh.workflow.events import (
    CancelRequested,
    NodeFailed,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    TimerFired,
)

__all__ = ["EXECUTION_TIMEOUT", "Engine", "StepResult", "start", "step"]

_HANDLERS: dict[type[BaseModel], Callable[[StepContext, Any], None]] = {
    NodeSucceeded: calls.on_succeeded,
    NodeFailed: calls.on_failed,
    NodePaused: review.on_paused,
    ReviewAnswered: review.on_review,
    TimerFired: lambda ctx, event: flow.on_timer(ctx, event.timer_id),
    CancelRequested: lambda ctx, event: flow.on_cancel(ctx, event.reason),
}
"""What each event does to a step (an event of no other type changes nothing but the advance)."""


class StepResult(NamedTuple):
    """What :meth:`Engine.apply` returns: the new state, its commands, and the node paths it may have changed."""

    state: ExecutionState
    commands: list[Command]
    touched: frozenset[str]


class Engine:
    """The engine for one workflow definition (stateless; one instance serves every execution of it).

    Args:
        definition: a validated definition (its ``name`` set).
    """

    def __init__(self, definition: WorkflowDefinition) -> None:
        self.definition = definition
        self.name = definition.name or "workflow"
        self.order = tuple(definition.topological_order())
        self.dag = frozenset(self.order)
        self.exit_handlers = definition.exit_handler_ids()
        self.waits: dict[str, tuple[str, ...]] = {}
        """What each DAG node waits for before it is decided (a join's ``wait_for`` is settled by the join)."""
        self.watches: dict[str, frozenset[str]] = {}
        """Every node whose change can decide a pending DAG node (its ``depends_on`` and ``wait_for``)."""
        for node_id in self.order:
            node = definition.node(node_id)
            joined = node.wait_for if isinstance(node, JoinNode) else ()
            self.waits[node_id] = tuple(d for d in node.dependencies if d not in joined)
            self.watches[node_id] = frozenset(node.dependencies)
        self.fresh_runs: dict[str, NodeRun] = {
            node_id: NodeRun(path=node_id, node_id=node_id, type=definition.node(node_id).type)
            for node_id in self.order
        }
        """Each DAG node's instance before it starts, shared by every new execution's first state: a step copies an
        instance before changing it (:class:`Nodes`), so these are never changed."""

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
        reuse: Mapping[str, JsonValue] | None = None,
        reused_from: str | None = None,
        reused_files: Collection[str] = (),
    ) -> tuple[ExecutionState, list[Command]]:
        """Begin an execution: validate the input, then start every ready node.

        Args:
            execution_id: the execution's id (derived from its task id).
            input: the workflow input.
            now: the current time (epoch seconds).
            digest: the definition's content hash (defaults to ``definition.digest()``).
            task_id: the workflow task this execution answers.
            context_id: the task's contextId, propagated to every callee.
            call_depth: the request's ``A2A-Call-Depth``.
            call_chain: workflows above this one (outermost first), to refuse recursion.
            deadline: the caller's deadline (epoch seconds), if any.
            reuse: outputs of DAG nodes to take as completed instead of running them (``a2amesh retry``).
            reused_from: the execution ``reuse`` comes from.
            reused_files: the nodes of ``reuse`` whose output is a file result (``NodeRun.file``).

        Returns:
            The first state and the commands to carry out.
        """
        state = ExecutionState(
            execution_id=execution_id,
            workflow=self.name,
            digest=digest or self.definition.digest(),
            input=input,
            task_id=task_id,
            context_id=context_id,
            call_depth=call_depth,
            call_chain=list(call_chain),
            deadline=deadline,
            started_at=now,
            reused_from=reused_from,
        )
        state.nodes.update(self.fresh_runs)
        ctx = StepContext(self, state, now, KINDS)
        ctx.emit("execution.started", data={"workflow": self.name, "digest": state.digest})
        problems = schema_errors(self.definition.input_schema, input)
        if problems:
            state.error = "the input does not match the workflow's input_schema: " + "; ".join(problems)
            state.outcome = "failure"
            flow.finish(ctx)
            ctx.nodes.seal()
            return state, ctx.commands
        if self.name in state.call_chain:
            chain = " → ".join([*state.call_chain, self.name])
            state.error = f"recursive workflow call: {chain}"
            state.outcome = "failure"
            flow.finish(ctx)
            ctx.nodes.seal()
            return state, ctx.commands
        due = [t for t in (now + self.definition.timeout if self.definition.timeout else None, deadline) if t]
        if due:
            ctx.set_timer(EXECUTION_TIMEOUT, min(due))
        if reuse:
            flow.reuse(ctx, reuse, reused_files)
        flow.advance(ctx)
        review.settle_pause(ctx, announce=False)  # a first step that only waits for a human (a review first) pauses
        ctx.nodes.seal()
        return state, ctx.commands

    def step(self, state: ExecutionState, event: Event, now: float) -> tuple[ExecutionState, list[Command]]:
        """Apply one event to a copy of ``state``.

        Events that no longer apply (a result for an attempt that is not running, a timer that was
        disarmed, anything after the execution finished) change nothing.

        Returns:
            The new state and the commands to carry out.

        Raises:
            InvalidTransition: a :class:`ReviewAnswered` that fits no waiting review (or an edit that
                does not match the node's ``edit_schema``); the state is unchanged.
        """
        result = self.apply(state, event, now)
        return result.state, result.commands

    def apply(self, state: ExecutionState, event: Event, now: float) -> StepResult:
        """:meth:`step`, also telling which node paths the step may have changed (``touched``).

        The new state shares with ``state`` every node instance the step did not touch (copy on
        write): treat both as read-only, or copy one before mutating it.
        """
        if state.finished:
            if isinstance(event, ReviewAnswered):
                raise InvalidTransition(f"cannot resume: the execution is {state.status.value}")
            return StepResult(state, [], frozenset())
        ctx = StepContext(self, _working_copy(state), now, KINDS)
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(ctx, event)
        flow.advance(ctx, incremental=isinstance(event, NodeSucceeded | NodeFailed))
        # a pause is announced again after an answer or a timer that changed the waiting reviews
        armed = isinstance(event, TimerFired) and event.timer_id in state.timers
        review.settle_pause(ctx, announce=isinstance(event, ReviewAnswered) or armed)
        return StepResult(ctx.state, ctx.commands, ctx.nodes.seal())

    def dispatch_command(
        self, state: ExecutionState, run: NodeRun, deadline: float | None, resume: dict[str, Any] | None = None
    ) -> DispatchNode:
        """The command that sends the current attempt of a call instance (or a resume to its paused callee)."""
        node = self.definition.node(run.node_id)
        assert run.agent is not None, run.path
        assert run.message_id is not None, run.path
        assert run.task_id is not None, run.path
        return DispatchNode(
            path=run.path,
            node_id=run.node_id,
            agent=run.agent,
            target_type="workflow" if isinstance(node, WorkflowNode) else "agent",
            attempt=run.attempt,
            iteration=run.iteration,
            message_id=run.message_id,
            task_id=run.task_id,
            input=run.input,
            instruction=run.instruction,
            input_schema=getattr(node, "input_schema_override", None),
            output_schema=getattr(node, "output_schema_override", None),
            deadline=deadline,
            call_depth=state.call_depth + 1,
            call_chain=[*state.call_chain, self.name],
            resume=resume,
        )

    def redispatch(self, state: ExecutionState, path: str) -> DispatchNode | None:
        """The command that re-sends a call in flight with the same messageId (after a takeover).

        Returns None when the instance has no call in flight.
        """
        run = state.nodes.get(path)
        if run is None or run.type not in CALL_TYPES or run.status is not NodeStatus.RUNNING or not run.task_id:
            return None
        deadline = state.deadline
        timeout = getattr(self.definition.node(run.node_id), "timeout", None)
        if isinstance(timeout, int | float) and timeout and run.attempt_started_at is not None:
            due = run.attempt_started_at + timeout
            deadline = due if deadline is None else min(deadline, due)
        return self.dispatch_command(state, run, deadline)

    # --- what the executor needs (ExecutableEngine) --------------------------------------------

    format = "dag"
    """The format's name (:data:`a2amesh.workflow.formats.DAG`)."""

    io_commands: tuple[type[BaseModel], ...] = ()
    """A DAG's commands are all carried out by the executor's runner itself."""

    def parse_state(self, raw: str) -> ExecutionState:
        """A checkpointed state."""
        return ExecutionState.model_validate_json(raw)

    def for_state(self, state: ExecutionState) -> Engine:
        """This engine (one per definition)."""
        return self

    def state_json(self, state: ExecutionState) -> str:
        """The whole state as JSON (:func:`~a2amesh.workflow.dag.checkpoint.state_json`)."""
        return checkpoint.state_json(state)

    def advance(
        self, state: ExecutionState, events: Sequence[BaseModel], clock: Callable[[], float]
    ) -> Advance[ExecutionState]:
        """Apply a batch of events: :meth:`apply` for each, a result only while its attempt is running."""
        commands: list[BaseModel] = []
        applied: list[str] = []
        touched: set[str] = set()
        for event in events:
            if isinstance(event, NodeSucceeded | NodeFailed):
                run = dict.get(state.nodes, event.path)  # read only: not copied (the nodes copy on write)
                if run is None or run.attempt != event.attempt or run.status is not NodeStatus.RUNNING:
                    continue
                applied.append(f"{event.path}#{run.iteration}@{event.attempt}")
            elif not isinstance(event, NodePaused | ReviewAnswered | TimerFired | CancelRequested):
                continue  # not a DAG event
            state, step_commands, step_touched = self.apply(state, event, clock())
            commands.extend(step_commands)
            touched |= step_touched
        return Advance(state, commands, applied, frozenset(touched))

    def resume(self, state: ExecutionState, answer: ReviewAnswered, now: float) -> tuple[ExecutionState, list[Command]]:
        """Apply a human's answer (:meth:`step`)."""
        return self.step(state, answer, now)

    def set_reply_to(self, state: ExecutionState, path: str, subject: str) -> None:
        """Record the reply subject of the call at ``path`` in its node instance (the step's own copy of it: a call
        is dispatched by the step that touched its instance, whose copy no other state holds)."""
        nodes = state.nodes
        run = nodes.own(path) if isinstance(nodes, Nodes) else nodes[path]
        run.reply_to = subject

    def state_write(
        self,
        old: ExecutionState,
        new: ExecutionState,
        touched: Iterable[str] | None,
        positions: dict[str, int] | None,
        records: Mapping[str, str] | None = None,
    ) -> StateWrite:
        """The split write of ``new`` (:func:`~a2amesh.workflow.dag.checkpoint.state_write`; an instance is
        serialised again rather than built from its record in ``records``: as fast, and simpler)."""
        return checkpoint.state_write(old, new, touched, positions)

    def node_records(
        self, old: ExecutionState, new: ExecutionState, touched: Iterable[str] | None, now: float
    ) -> dict[str, str]:
        """The node records a step changed (:func:`~a2amesh.workflow.dag.checkpoint.node_records`)."""
        return checkpoint.node_records(old, new, touched)

    def initial_records(self, state: ExecutionState) -> dict[str, str]:
        """Every node instance's record."""
        return checkpoint.initial_records(state)

    def pending_review(self, state: ExecutionState) -> RequestReview | None:
        """The first review a node instance waits for."""
        for run in state.nodes.values():
            if run.status is NodeStatus.WAITING_INPUT and run.review:
                path = str(run.review.get("path") or run.path)
                return RequestReview(path=path, node_id=run.node_id, review=run.review)
        return None

    def takeover(self, state: ExecutionState) -> tuple[list[OpenCall], list[BaseModel]]:
        """Every call in flight, each with the command that re-sends it."""
        calls = [
            OpenCall(run.path, run.attempt, run.agent, run.reply_to, self.redispatch(state, run.path))
            for run in state.running_calls()
        ]
        return calls, []


def _working_copy(state: ExecutionState) -> ExecutionState:
    """A copy of ``state`` a step can mutate: its containers copied, its node instances copied on write."""
    copied = state.model_copy()  # not updated(...): six keyword arguments merged cost more than six item writes
    fields = copied.__dict__
    fields["nodes"] = Nodes(state.nodes)
    fields["outputs"] = dict(state.outputs)
    fields["timers"] = dict(state.timers)
    fields["exit_queue"] = list(state.exit_queue)
    fields["usage"] = dict(state.usage)
    fields["call_chain"] = list(state.call_chain)
    return copied


def start(definition: WorkflowDefinition, **kwargs: Any) -> tuple[ExecutionState, list[Command]]:
    """``Engine(definition).start(**kwargs)``."""
    return Engine(definition).start(**kwargs)


def step(
    state: ExecutionState, event: Event, now: float, *, definition: WorkflowDefinition
) -> tuple[ExecutionState, list[Command]]:
    """``Engine(definition).step(state, event, now)``."""
    return Engine(definition).step(state, event, now)
