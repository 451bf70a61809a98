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
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from a2amesh.diagnostics import schema_errors
from a2amesh.errors import InvalidTransition
from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag import checkpoint
from a2amesh.workflow.dag.branches import BranchSteps
from a2amesh.workflow.dag.containers import ContainerSteps
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.nodes import (
    AgentNode,
    BuiltinNode,
    ConditionalNode,
    ForkNode,
    HumanReviewNode,
    JoinNode,
    LoopNode,
    MapNode,
    MemoryConfig,
    MemoryNodeBase,
    PromptNode,
    SwitchNode,
    WorkflowNode,
)
from a2amesh.workflow.dag.review import ReviewSteps
from a2amesh.workflow.dag.state import Command, DispatchNode, Event, ExecutionState, NodePaused, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import CALL_TYPES, EXECUTION_TIMEOUT, Nodes
from a2amesh.workflow.engine_protocol import Advance, OpenCall, StateWrite
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ExecutionStatus,
    Finish,
    NodeFailed,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    TimerFired,
)
from a2amesh.workflow.templates import (
    JsonValue,
    RefKind,
    TemplateError,
    find_templates,
    parse_reference,
    render,
    resolve,
)

__all__ = ["EXECUTION_TIMEOUT", "Engine", "StepResult", "start", "step"]

_FINAL_STATUS = {
    "success": ExecutionStatus.COMPLETED,
    "failure": ExecutionStatus.FAILED,
    "cancel": ExecutionStatus.CANCELED,
}

_DISABLED_MEMORY: dict[str, JsonValue] = {
    "memory_read": {"entries": [], "text": "", "disabled": True},
    "memory_write": {"id": None, "key": None, "agent": None, "user": None, "replaced": False, "disabled": True},
}
"""What memory nodes output when the workflow's memory_config disables memory."""

_EVENT_OF_STATUS = {
    ExecutionStatus.COMPLETED: "execution.completed",
    ExecutionStatus.FAILED: "execution.failed",
    ExecutionStatus.CANCELED: "execution.cancelled",
}


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
        run = _Step(self, state, now)
        run.emit("execution.started", data={"workflow": self.name, "digest": state.digest})
        problems = schema_errors(self.definition.input_schema, input)
        if problems:
            state.error = "the input does not match the workflow's input_schema: " + "; ".join(problems)
            state.outcome = "failure"
            run.finish()
            run.nodes.seal()
            return state, run.commands
        if self.name in state.call_chain:
            chain = " → ".join([*state.call_chain, self.name])
            state.error = f"recursive workflow call: {chain}"
            state.outcome = "failure"
            run.finish()
            run.nodes.seal()
            return state, run.commands
        due = [t for t in (now + self.definition.timeout if self.definition.timeout else None, deadline) if t]
        if due:
            run.set_timer(EXECUTION_TIMEOUT, min(due))
        if reuse:
            run.reuse(reuse, reused_files)
        run.advance()
        run.settle_pause(announce=False)  # a first step that only waits for a human (a review first) pauses
        run.nodes.seal()
        return state, run.commands

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
        run = _Step(self, _working_copy(state), now)
        if isinstance(event, NodeSucceeded):
            run.on_succeeded(event)
        elif isinstance(event, NodeFailed):
            run.on_failed(event)
        elif isinstance(event, NodePaused):
            run.on_paused(event)
        elif isinstance(event, ReviewAnswered):
            run.on_review(event)
        elif isinstance(event, TimerFired):
            run.on_timer(event.timer_id)
        elif isinstance(event, CancelRequested):
            run.on_cancel(event.reason)
        run.advance(incremental=isinstance(event, NodeSucceeded | NodeFailed))
        # a pause is announced again after an answer or a timer that changed the waiting reviews
        armed = isinstance(event, TimerFired) and event.timer_id in state.timers
        run.settle_pause(announce=isinstance(event, ReviewAnswered) or armed)
        return StepResult(run.state, run.commands, run.nodes.seal())

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
    copied = state.model_copy()
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


class _Step(ContainerSteps, ReviewSteps, BranchSteps):
    """One step of one execution: the DAG advance and finish, node start by type, failures, cancellation, timers."""

    def advance(self, *, incremental: bool = False) -> None:
        """Start, skip or finish whatever became possible, until nothing changes.

        ``incremental``: the state came from a finished step, so every pending DAG node was blocked by a
        node it watches; only those whose watched nodes (or themselves) this step touched are decided
        again, which keeps a step on a long chain from costing a pass over every node.
        """
        progressed = True
        touched = self.nodes.touched
        watches = self.engine.watches
        while progressed and not self.state.finished:
            progressed = False
            if self.state.phase == "dag":
                for node_id in self.engine.order:
                    if (incremental and node_id not in touched and touched.isdisjoint(watches[node_id])) or (
                        dict.__getitem__(self.nodes, node_id).status is not NodeStatus.PENDING
                    ):
                        continue
                    # only a node that became final can unblock others: a started one needs no second pass
                    if self._try_start(node_id) and self.nodes.peek(node_id).final:
                        progressed = True
                    if self.state.phase != "dag":
                        break
                # the last nodes in order are the likeliest to be open: look at them first
                if self.state.phase == "dag" and all(self.nodes.peek(i).final for i in reversed(self.engine.order)):
                    self._end_dag()
                    progressed = True
            elif self.state.phase == "exit":
                progressed = self._advance_exit()

    def _try_start(self, node_id: str) -> bool:
        """Decide a pending DAG node: wait (False), or skip / start / settle it (True)."""
        node = self.definition.node(node_id)
        deps = [self.nodes.peek(d) for d in self.engine.waits[node_id] if d in self.nodes]
        if any(not dep.final for dep in deps):
            return False  # still waiting: read only, so the node is neither copied nor written by this step
        run = self.nodes[node_id]
        for dep in deps:
            router = self.definition.node(dep.node_id)
            targets = {target for _, target in router.branch_targets()}
            if dep.status is NodeStatus.COMPLETED and run.node_id in targets and dep.selected != run.node_id:
                self.skip(run, f"not taken: {dep.node_id} chose {dep.selected or 'no branch'}")
                return True
            if isinstance(router, HumanReviewNode) and dep.selected and dep.selected != run.node_id:
                self.skip(run, f"not taken: {dep.node_id} was rejected")
                return True
        failed = [dep for dep in deps if dep.status is NodeStatus.FAILED and not dep.absorbed]
        if failed:
            self.skip(run, f"dependency {failed[0].node_id} failed")
            return True
        if isinstance(node, JoinNode):
            return self._settle_join(run, node, has_other_deps=bool(deps))
        if deps and not any(dep.status is NodeStatus.COMPLETED for dep in deps):
            self.skip(run, "all dependencies were skipped")
            return True
        self.start_node(run)
        return True

    def _end_dag(self) -> None:
        failed = [
            self.nodes.peek(i)
            for i in self.engine.order
            if self.nodes.peek(i).status is NodeStatus.FAILED and not self.nodes.peek(i).absorbed
        ]
        if failed:
            first = failed[0]
            self.state.error = f"node {first.node_id!r} failed: {first.error}"
            self.enter_exit("failure")
            return
        output, error = self._build_output()
        if error is not None:
            self.state.error = error
            self.enter_exit("failure")
            return
        self.state.output = output
        self.state.output_file = self._passes_a_file(output)
        self.enter_exit("success")

    def _passes_a_file(self, output: JsonValue) -> bool:
        """Whether the output is a node's file result as it came: ``output_mapping`` is the one reference
        ``{{node.output…}}`` and the value is a file result of that node's instances. Then the workflow answers
        with the file part. What the callee answered with decides (``NodeRun.file``), never the shape of a value,
        so data that looks like a file reference, or data built around one, stays data."""
        mapping = self.definition.output_mapping
        if not isinstance(output, dict) or not isinstance(mapping, str):
            return False
        spans = find_templates(mapping)
        if len(spans) != 1 or spans[0][:2] != (0, len(mapping)):
            return False
        ref = parse_reference(spans[0][2], self.definition.node_ids)
        if ref.kind is not RefKind.NODE or ref.node_id is None:
            return False
        node_id = ref.node_id
        return any(
            run.file
            and run.status is NodeStatus.COMPLETED
            and (run.node_id == node_id or _within(run.path, node_id))
            and run.output == output
            for run in self.nodes.values()
        )

    def _build_output(self) -> tuple[JsonValue, str | None]:
        scope = self.scope_for(None).with_status("completed")
        if self.definition.output_mapping is None:
            leaves = [
                i for i in self.engine.order if not any(d in self.engine.dag for d in self.definition.dependents_of(i))
            ]
            output: JsonValue = {i: self.state.outputs[i] for i in leaves if i in self.state.outputs}
        else:
            try:
                output = resolve(self.definition.output_mapping, scope, path="output_mapping")
            except TemplateError as exc:
                return None, f"cannot build the output: {exc}"
        problems = schema_errors(self.definition.output_schema, output)
        if problems:
            return None, "the output does not match the workflow's output_schema: " + "; ".join(problems)
        return output, None

    def enter_exit(self, outcome: Literal["success", "failure", "cancel"]) -> None:
        """Leave the DAG: run the outcome's exit handlers, then finish."""
        if self.state.phase != "dag":
            return
        self.state.phase = "exit"
        self.state.outcome = outcome
        self.clear_timer(EXECUTION_TIMEOUT)
        self.state.exit_queue = self.definition.exit_handlers.handlers_for(outcome)

    def _advance_exit(self) -> bool:
        handlers = [r for r in self.state.nodes.values() if r.node_id in self.engine.exit_handlers and r.parent is None]
        if any(not r.final for r in handlers):
            return False
        if self.state.exit_queue:
            node_id = self.state.exit_queue.pop(0)
            node = self.definition.node(node_id)
            run = NodeRun(path=node_id, node_id=node_id, type=node.type)
            self.nodes[node_id] = run
            self.start_node(run)
            return True
        self.finish()
        return True

    def finish(self) -> None:
        """Finish the execution with its outcome (exactly once)."""
        if self.state.finished:
            return
        outcome = self.state.outcome or "failure"
        status = _FINAL_STATUS[outcome]
        self.state.status = status
        self.state.phase = "done"
        self.state.finished_at = self.now
        for timer_id in list(self.state.timers):
            self.clear_timer(timer_id)
        output = self.state.output if status is ExecutionStatus.COMPLETED else None
        self.emit(
            _EVENT_OF_STATUS[status],
            status=status.value,
            error=self.state.error,
            duration_ms=int((self.now - self.state.started_at) * 1000),
        )
        self.commands.append(Finish(status=status, output=output, error=self.state.error))

    def start_node(self, run: NodeRun) -> None:
        """Start one instance: evaluate ``when``, then run it by type."""
        node = self.definition.node(run.node_id)
        run.started_at = self.now
        if node.when is not None and run.type != "branch":
            try:
                if not evaluate(node.when, self.scope_for(run)):
                    self.skip(run, "when is false")
                    return
            except ConditionError as exc:
                self.fail(run, f"when: {exc}", "error")
                return
        if isinstance(node, MemoryNodeBase) and not (self.definition.memory_config or MemoryConfig()).enabled:
            run.status = NodeStatus.RUNNING
            self.emit("node.started", run)
            self.complete(run, _DISABLED_MEMORY[node.type])
        elif isinstance(node, AgentNode | WorkflowNode | BuiltinNode):
            self._start_call(run)
        elif isinstance(node, PromptNode):
            self._run_prompt(run, node)
        elif isinstance(node, SwitchNode):
            self._start_switch(run, node)
        elif isinstance(node, ConditionalNode):
            self._start_conditional(run, node)
        elif isinstance(node, MapNode):
            self._start_map(run, node)
        elif isinstance(node, LoopNode):
            self._start_loop(run, node)
        elif isinstance(node, ForkNode):
            self._start_fork(run, node)
        elif isinstance(node, JoinNode):
            # a join used as an exit handler or container target has nothing to wait for
            self.complete(run, {"results": {}, "completed": []})
        elif isinstance(node, HumanReviewNode):
            self._start_review(run, node)

    def _run_prompt(self, run: NodeRun, node: PromptNode) -> None:
        """A prompt node: its template rendered here, no agent call."""
        try:
            text = render(node.template, self.scope_for(run), path="template")
        except TemplateError as exc:
            self.fail(run, str(exc), "error")
            return
        run.status = NodeStatus.RUNNING
        self.emit("node.started", run)
        self.complete(run, {"text": text})

    def _dag_failure(self, run: NodeRun) -> None:
        if not self.definition.fail_fast or self._absorbable(run):
            return
        for dependent in self.definition.dependents_of(run.node_id):
            node = self.definition.node(dependent)
            join = self.state.nodes.get(dependent)
            if isinstance(node, JoinNode) and run.node_id in node.wait_for and join and not join.final:
                tally = self._join_tally(node)
                if tally.completed + tally.open < tally.quorum:
                    self._fail_join(join, node, tally)  # fails the execution with the join's reason
                    return
        self.fail_execution(f"node {run.node_id!r} failed: {run.error}")

    def _absorbable(self, run: NodeRun) -> bool:
        """Whether every dependent is a join that can still reach its quorum without this node."""
        dependents = [d for d in self.definition.dependents_of(run.node_id) if d in self.engine.dag]
        if not dependents:
            return False
        for dependent in dependents:
            node = self.definition.node(dependent)
            if not isinstance(node, JoinNode) or run.node_id not in node.wait_for:
                return False
            tally = self._join_tally(node)
            if tally.completed + tally.open < tally.quorum:
                return False
        return True

    def fail_execution(self, error: str) -> None:
        """Fail fast: cancel whatever runs, then run the failure exit handlers."""
        if self.state.phase != "dag":
            return
        self.state.error = error
        self._cancel_all("the execution failed")
        self.enter_exit("failure")

    def on_cancel(self, reason: str) -> None:
        self.state.cancel_requested = True
        if self.state.phase == "dag":
            self.state.error = reason
            self._cancel_all(reason)
            self.enter_exit("cancel")
        elif self.state.phase == "exit":
            self.state.exit_queue = []
            self._cancel_all(reason)
            if self.state.outcome != "cancel":
                self.state.outcome = "cancel"
                self.state.error = reason

    def on_timer(self, timer_id: str) -> None:
        if self.state.timers.pop(timer_id, None) is None:
            return  # disarmed, or already handled
        if timer_id == EXECUTION_TIMEOUT:
            timeout = self.definition.timeout
            if timeout and self.state.started_at + self.state.paused_seconds + timeout <= self.now + 1e-6:
                self.fail_execution(f"the workflow timed out after {timeout:g}s")
            else:
                self.fail_execution("the caller's deadline passed before the workflow finished")
            return
        kind, _, rest = timer_id.partition(":")
        if kind in ("timeout", "retry"):
            path, _, attempt_text = rest.rpartition("@")
            run = self.state.nodes.get(path)
            if run is None or not attempt_text.isdigit():
                return
            attempt = int(attempt_text)
            if kind == "timeout" and run.status is NodeStatus.RUNNING and run.attempt == attempt:
                if run.task_id and run.agent:
                    self.commands.append(CancelCall(path=run.path, agent=run.agent, task_id=run.task_id))
                timeout = self._call_timeout(run) or 0
                self._attempt_failed(run, f"timed out after {timeout:g}s (attempt {attempt})", "error", True)
            elif kind == "retry" and run.status is NodeStatus.WAITING and run.timer == timer_id:
                run.timer = None
                self._dispatch(run)
        elif kind == "review":
            run = self.state.nodes.get(rest)
            if run is not None and run.status is NodeStatus.WAITING_INPUT and run.timer == timer_id:
                run.timer = None
                self._review_timed_out(run)
        elif kind == "delay":
            path, _, iteration = rest.rpartition("#")
            run = self.state.nodes.get(path)
            if run is not None and run.status is NodeStatus.RUNNING and run.timer == timer_id:
                run.timer = None
                self._launch_iteration(run, int(iteration))

    def reuse(self, outputs: Mapping[str, JsonValue], files: Collection[str] = ()) -> None:
        """Take DAG nodes as completed with outputs of an earlier execution (``files``: those that are file results)."""
        for node_id in self.engine.order:
            if node_id not in outputs:
                continue
            run = self.nodes[node_id]
            output = outputs[node_id]
            run.status = NodeStatus.COMPLETED
            run.output = output
            run.file = node_id in files
            run.reason = f"reused from {self.state.reused_from or 'an earlier execution'}"
            run.started_at = run.finished_at = self.now
            if isinstance(output, dict) and "selected" in output:
                selected = output.get("selected")
                run.selected = selected if isinstance(selected, str) else None
            self.state.outputs[node_id] = output
            node = self.definition.node(node_id)
            if isinstance(node, LoopNode) and node.node in outputs:
                self.state.outputs[node.node] = outputs[node.node]
            self.emit("node.completed", run, reused=True)


def _within(path: str, node_id: str) -> bool:
    """Whether the instance ``path`` is node ``node_id`` or inside it (a map item, loop iteration, fork branch)."""
    return path == node_id or (path.startswith(node_id) and path[len(node_id)] in "[#/")
