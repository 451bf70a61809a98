"""The workflow engine: a pure, deterministic state machine over :mod:`a2amesh.workflow.execution` data.

``Engine(definition).start(...)`` builds the first state of an execution, and
``Engine(definition).step(state, event, now)`` applies one event; both return the new state and the
commands the executor must carry out (dispatch a node, cancel a callee, arm a timer, emit an event,
answer the caller). The engine does no I/O, never reads the clock (``now`` is given) and never
mutates the state it is handed, so the executor can checkpoint the result and any replica can replay
from a checkpoint. The semantics are those of SPEC §5.4 and ``docs/workflows.md``; decisions the
SPEC leaves open are listed in ``docs/executor.md``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from a2amesh.errors import InvalidTransition
from a2amesh.ids import node_message_id, task_id_for
from a2amesh.protocol.vocabulary import REVIEW_REQUEST
from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.definition import (
    AgentNode,
    ConditionalNode,
    ForkNode,
    HumanReviewNode,
    JoinNode,
    LoopNode,
    MapNode,
    Node,
    RetryStrategy,
    SwitchNode,
    WorkflowDefinition,
    WorkflowNode,
)
from a2amesh.workflow.execution import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    Command,
    DispatchNode,
    EmitEvent,
    ErrorKind,
    Event,
    ExecutionState,
    ExecutionStatus,
    Finish,
    NodeFailed,
    NodePaused,
    NodeRun,
    NodeStatus,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    SetTimer,
    TimerFired,
)
from a2amesh.workflow.templates import UNSET, JsonValue, TemplateError, TemplateScope, render, resolve, to_text

__all__ = ["EXECUTION_TIMEOUT", "Engine", "schema_errors", "start", "step"]

EXECUTION_TIMEOUT = "execution_timeout"
"""Timer id of the whole execution's timeout."""

CALL_TYPES = frozenset({"agent", "workflow", "branch"})
"""Node-instance types that call an agent or workflow."""

_STATUS_TEXT = {"success": "completed", "failure": "failed", "cancel": "canceled"}
_FINAL_STATUS = {
    "success": ExecutionStatus.COMPLETED,
    "failure": ExecutionStatus.FAILED,
    "cancel": ExecutionStatus.CANCELED,
}
_EVENT_OF_STATUS = {
    ExecutionStatus.COMPLETED: "execution.completed",
    ExecutionStatus.FAILED: "execution.failed",
    ExecutionStatus.CANCELED: "execution.cancelled",
}


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    """A validator per distinct schema (a definition's schemas are checked on every execution)."""
    return Draft202012Validator(json.loads(schema_json))


def schema_errors(schema: Mapping[str, Any] | None, value: JsonValue, *, limit: int = 5) -> list[str]:
    """Every way ``value`` breaks a JSON Schema, each with its JSON path (``$.items[0].sku: ...``).

    An invalid schema is reported as one error rather than raised.
    """
    if not schema:
        return []
    try:
        validator = _validator(json.dumps(schema, sort_keys=True, default=str))
        found = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    except SchemaError as exc:
        return [f"the schema itself is invalid: {exc.message}"]
    return [f"{error.json_path}: {error.message}" for error in found[:limit]]


def _timeout_timer(path: str, attempt: int) -> str:
    return f"timeout:{path}@{attempt}"


def _add_usage(total: dict[str, int], usage: Mapping[str, Any] | None) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _busy(run: NodeRun) -> bool:
    """Waiting for a timer, or a call in flight (what keeps an execution from pausing)."""
    return run.status is NodeStatus.WAITING or (run.type in CALL_TYPES and run.status is NodeStatus.RUNNING)


def _copy_run(run: NodeRun) -> NodeRun:
    """A copy of a node instance a step may mutate (its only field mutated in place is ``children``)."""
    copied = run.model_copy()
    copied.__dict__["children"] = list(run.children)
    return copied


class _Nodes(dict[str, NodeRun]):
    """The ``nodes`` of a state a step works on: copy-on-write, so a step costs what it touches.

    A step's state starts as a shallow copy of its input's ``nodes``; looking an instance up
    (``[]``, ``get``) copies it first, so the step mutates its own copy and never the input's. The
    paths looked up or added are ``touched`` (a superset of those changed). Iteration (``values``,
    ``items``) sees the shared instances: read them only (:meth:`_Step.node` to mutate).

    It also indexes the instances waiting for input and the busy ones, so pausing needs no scan; the
    index follows the touched paths (refreshed before use) and carries over to the next step.
    """

    def __init__(self, base: dict[str, NodeRun]) -> None:
        super().__init__(base)
        self.touched: set[str] = set()
        if isinstance(base, _Nodes):
            base.refresh()
            self.waiting: set[str] = set(base.waiting)
            self.busy: set[str] = set(base.busy)
        else:
            self.waiting = {p for p, r in base.items() if r.status is NodeStatus.WAITING_INPUT}
            self.busy = {p for p, r in base.items() if _busy(r)}

    def __getitem__(self, path: str) -> NodeRun:
        run = dict.__getitem__(self, path)
        if path not in self.touched:
            run = _copy_run(run)
            dict.__setitem__(self, path, run)
            self.touched.add(path)
        return run

    def get(self, path: str, default: Any = None) -> Any:
        return self[path] if path in self else default

    def __setitem__(self, path: str, run: NodeRun) -> None:
        dict.__setitem__(self, path, run)
        self.touched.add(path)

    def peek(self, path: str) -> NodeRun:
        """An instance to read only (not copied, not touched)."""
        return dict.__getitem__(self, path)

    def refresh(self) -> None:
        """Bring the waiting / busy index up to date with the touched instances."""
        for path in self.touched:
            run = dict.__getitem__(self, path)
            if run.status is NodeStatus.WAITING_INPUT:
                self.waiting.add(path)
            else:
                self.waiting.discard(path)
            if _busy(run):
                self.busy.add(path)
            else:
                self.busy.discard(path)

    def seal(self) -> frozenset[str]:
        """End a step: return the touched paths, and copy on write again from now on (its instances may be shared)."""
        self.refresh()
        touched = frozenset(self.touched)
        self.touched.clear()
        return touched

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, NodeRun]:
        return {path: run.model_copy(deep=True) for path, run in self.items()}

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


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
        for node_id in self.order:
            node = self.definition.node(node_id)
            state.nodes[node_id] = NodeRun(path=node_id, node_id=node_id, type=node.type)
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
            run.reuse(reuse)
        run.advance()
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


def _working_copy(state: ExecutionState) -> ExecutionState:
    """A copy of ``state`` a step can mutate: its containers copied, its node instances copied on write."""
    copied = state.model_copy()
    fields = copied.__dict__
    fields["nodes"] = _Nodes(state.nodes)
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


class _Tally(NamedTuple):
    """Where a join stands: successes, failures, members still open, members taken, successes needed."""

    completed: int
    failed: list[str]
    open: int
    live: int
    quorum: int


class _Step:
    """One step of one execution: mutates its own copy of the state and collects commands."""

    def __init__(self, engine: Engine, state: ExecutionState, now: float) -> None:
        self.engine = engine
        self.definition = engine.definition
        self.state = state
        if not isinstance(state.nodes, _Nodes):
            state.__dict__["nodes"] = _Nodes(state.nodes)
        assert isinstance(state.nodes, _Nodes)
        self.nodes: _Nodes = state.nodes
        """The state's node instances: ``self.nodes[path]`` to change one, ``peek`` to read one."""
        self.now = now
        self.commands: list[Command] = []
        self._launching: set[str] = set()

    # --- output ------------------------------------------------------------------------------

    def emit(self, event: str, run: NodeRun | None = None, *, status: str | None = None, **data: Any) -> None:
        self.state.seq += 1
        self.commands.append(
            EmitEvent(
                event=event,
                seq=self.state.seq,
                path=run.path if run else None,
                node_id=run.node_id if run else None,
                status=status if status is not None else (run.status.value if run else self.state.status.value),
                data={k: v for k, v in data.items() if v is not None},
                at=self.now,
            )
        )

    def set_timer(self, timer_id: str, due: float) -> None:
        self.state.timers[timer_id] = due
        self.commands.append(SetTimer(timer_id=timer_id, due=due))

    def clear_timer(self, timer_id: str | None) -> None:
        if timer_id is not None and self.state.timers.pop(timer_id, None) is not None:
            self.commands.append(ClearTimer(timer_id=timer_id))

    # --- scheduling --------------------------------------------------------------------------

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
        self.enter_exit("success")

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

    # --- templates ---------------------------------------------------------------------------

    def scope_for(self, run: NodeRun | None) -> TemplateScope:
        """What templates of this instance see: outputs, its map item, its loop iteration."""
        overlay: dict[str, JsonValue] = {}
        map_item: JsonValue = UNSET
        map_index: int | None = None
        loop_iteration: int | None = None
        current = run
        while current is not None and current.parent is not None:
            parent = self.nodes.peek(current.parent)
            if parent.type == "map" and map_index is None and current.index is not None and parent.items is not None:
                map_index = current.index
                map_item = parent.items[current.index]
            if parent.type == "loop":
                if loop_iteration is None:
                    loop_iteration = current.iteration
                target = self._container_target(parent)
                latest = self._latest_output(parent)
                if target not in overlay and latest is not UNSET:
                    overlay[target] = latest
            current = parent
        outputs: Mapping[str, JsonValue] = {**self.state.outputs, **overlay} if overlay else self.state.outputs
        scope = self.definition.scope(self.state.input, outputs)
        if map_index is not None:
            scope = scope.with_map_item(map_item, map_index)
        if loop_iteration is not None:
            scope = scope.with_loop_iteration(loop_iteration)
        if self.state.phase == "exit" and self.state.outcome is not None:
            scope = scope.with_status(_STATUS_TEXT[self.state.outcome], self.state.error)
        return scope

    def _container_target(self, container: NodeRun) -> str:
        node = self.definition.node(container.node_id)
        assert isinstance(node, MapNode | LoopNode)
        return node.node

    def _latest_output(self, loop: NodeRun) -> JsonValue:
        for path in reversed(loop.children):
            child = self.nodes.peek(path)
            if child.status is NodeStatus.COMPLETED:
                return child.output
        return UNSET

    # --- node lifecycle ----------------------------------------------------------------------

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
        if isinstance(node, AgentNode | WorkflowNode):
            self._start_call(run)
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

    def _set_final(self, run: NodeRun, status: NodeStatus) -> None:
        """Give an instance its final status, keeping its container's child counts."""
        was_final = run.final
        run.status = status
        if run.parent is None or was_final:
            return
        parent = self.nodes[run.parent]
        if parent.open_children is None:
            self._count_children(parent)
            return
        parent.open_children -= 1
        if status is NodeStatus.COMPLETED:
            parent.completed_children = (parent.completed_children or 0) + 1
        elif status is NodeStatus.FAILED:
            parent.failed_children = (parent.failed_children or 0) + 1

    def _count_children(self, container: NodeRun) -> tuple[int, int, int]:
        """(open, completed, failed) children of a container (counted once, then kept)."""
        if container.open_children is None:
            children = [self.nodes.peek(c) for c in container.children]
            container.open_children = sum(1 for c in children if not c.final)
            container.completed_children = sum(1 for c in children if c.status is NodeStatus.COMPLETED)
            container.failed_children = sum(1 for c in children if c.status is NodeStatus.FAILED)
        return container.open_children, container.completed_children or 0, container.failed_children or 0

    def complete(self, run: NodeRun, output: JsonValue) -> None:
        self._set_final(run, NodeStatus.COMPLETED)
        run.output = output
        run.finished_at = self.now
        self.emit("node.completed", run, attempt=run.attempt or None, duration_ms=self._duration(run))
        self._after_final(run)

    def fail(self, run: NodeRun, error: str, kind: ErrorKind) -> None:
        self._set_final(run, NodeStatus.FAILED)
        run.error = error
        run.error_kind = kind
        run.finished_at = self.now
        self.emit("node.failed", run, attempt=run.attempt or None, error=error, duration_ms=self._duration(run))
        self._after_final(run)

    def skip(self, run: NodeRun, reason: str) -> None:
        self._set_final(run, NodeStatus.SKIPPED)
        run.reason = reason
        run.finished_at = self.now
        self.emit("node.skipped", run, reason=reason)
        self._after_final(run)

    def _duration(self, run: NodeRun) -> int | None:
        return None if run.started_at is None else int((self.now - run.started_at) * 1000)

    def _after_final(self, run: NodeRun) -> None:
        if run.parent is not None:
            self._child_done(self.state.nodes[run.parent], run)
            return
        if run.status is NodeStatus.COMPLETED:
            self.state.outputs[run.node_id] = run.output
        if run.path in self.engine.dag and run.status is NodeStatus.FAILED:
            self._dag_failure(run)

    def cancel(self, run: NodeRun, reason: str) -> None:
        """Stop an instance and everything under it, without propagating (fail-fast, cancel, joins)."""
        if run.final:
            return
        if run.status is NodeStatus.PENDING:
            self._set_final(run, NodeStatus.SKIPPED)
            run.reason = reason
            run.finished_at = self.now
            self.emit("node.skipped", run, reason=reason)
            return
        self.clear_timer(run.timer)
        run.timer = None
        if run.type in CALL_TYPES and run.status in (NodeStatus.RUNNING, NodeStatus.WAITING_INPUT):
            self.clear_timer(_timeout_timer(run.path, run.attempt))
            if run.task_id and run.agent:
                self.commands.append(CancelCall(path=run.path, agent=run.agent, task_id=run.task_id))
        for child in run.children:
            if not self.nodes.peek(child).final:
                self.cancel(self.nodes[child], reason)
        self._set_final(run, NodeStatus.CANCELED)
        run.reason = reason
        run.finished_at = self.now
        self.emit("node.canceled", run, reason=reason)

    def _cancel_all(self, reason: str) -> None:
        for path, run in list(self.nodes.items()):
            if run.parent is None and not run.final:
                self.cancel(self.nodes[path], reason)

    # --- failures, cancellation, timers ------------------------------------------------------

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

    # --- calls -------------------------------------------------------------------------------

    def _call_node(self, run: NodeRun) -> Node:
        return self.definition.node(run.node_id)

    def _call_timeout(self, run: NodeRun) -> float | None:
        node = self._call_node(run)
        timeout = getattr(node, "timeout", None)
        return float(timeout) if isinstance(timeout, int | float) else None

    def _retry_strategy(self, run: NodeRun) -> RetryStrategy | None:
        return self.definition.retry_strategy_for(run.node_id)

    def _call_templates(self, run: NodeRun) -> tuple[str, JsonValue, str | None]:
        """(callee, input template, instruction template) of a call instance."""
        node = self._call_node(run)
        if run.type == "branch":
            assert isinstance(node, ForkNode)
            branch = next(b for b in node.branches if b.id == run.path.rsplit("/", 1)[1])
            return branch.agent_name, branch.input, branch.instruction
        assert isinstance(node, AgentNode | WorkflowNode)
        agent = node.agent_name if isinstance(node, AgentNode) else node.workflow_name
        return agent, node.input, node.instruction

    def _start_call(self, run: NodeRun) -> None:
        node = self._call_node(run)
        scope = self.scope_for(run)
        agent, template, instruction = self._call_templates(run)
        try:
            run.input = resolve({} if template is None else template, scope, path="input")
            run.instruction = None if instruction is None else render(instruction, scope, path="instruction")
        except TemplateError as exc:
            self.fail(run, str(exc), "error")
            return
        run.agent = agent
        if isinstance(node, WorkflowNode):
            chain = [*self.state.call_chain, self.engine.name]
            if agent in chain:
                self.fail(run, f"recursive workflow call: {' → '.join([*chain, agent])}", "error")
                return
            depth = self.state.call_depth + 1
            if depth > self.definition.max_call_depth:
                self.fail(
                    run,
                    f"calling workflow {agent!r} would make the call depth {depth}, above this workflow's "
                    f"max_call_depth {self.definition.max_call_depth}",
                    "error",
                )
                return
        self._dispatch(run)

    def _dispatch(self, run: NodeRun) -> None:
        assert run.agent is not None
        run.attempt += 1
        run.status = NodeStatus.RUNNING
        run.attempt_started_at = self.now
        run.message_id = node_message_id(self.state.execution_id, run.path, run.iteration, run.attempt)
        run.task_id = task_id_for(run.agent, run.message_id)
        run.reply_to = None
        deadline = self.state.deadline
        timeout = self._call_timeout(run)
        if timeout:
            due = self.now + timeout
            self.set_timer(_timeout_timer(run.path, run.attempt), due)
            deadline = due if deadline is None else min(deadline, due)
        self.commands.append(self.engine.dispatch_command(self.state, run, deadline))
        self.emit("node.started", run, agent=run.agent, attempt=run.attempt, task_id=run.task_id)

    def _current_call(self, path: str, attempt: int) -> NodeRun | None:
        run = self.state.nodes.get(path)
        if run is None or run.type not in CALL_TYPES or run.status is not NodeStatus.RUNNING or run.attempt != attempt:
            return None
        return run

    def on_succeeded(self, event: NodeSucceeded) -> None:
        run = self._current_call(event.path, event.attempt)
        if run is None:
            return
        self.clear_timer(_timeout_timer(run.path, run.attempt))
        run.usage = event.usage
        _add_usage(self.state.usage, event.usage)
        self.complete(run, event.output)

    def on_failed(self, event: NodeFailed) -> None:
        run = self._current_call(event.path, event.attempt)
        if run is None:
            return
        self.clear_timer(_timeout_timer(run.path, run.attempt))
        run.usage = event.usage
        _add_usage(self.state.usage, event.usage)
        self._attempt_failed(run, event.error, event.error_kind, event.retryable)

    def _attempt_failed(self, run: NodeRun, error: str, kind: ErrorKind, retryable: bool) -> None:
        strategy = self._retry_strategy(run)
        if retryable and strategy is not None and strategy.retries_on(kind) and run.attempt <= strategy.limit:
            delay = strategy.delay(run.attempt)
            run.error = error
            run.error_kind = kind
            self.emit("node.retrying", run, attempt=run.attempt, error=error, delay_s=delay)
            if delay > 0:
                run.status = NodeStatus.WAITING
                run.timer = f"retry:{run.path}@{run.attempt + 1}"
                self.set_timer(run.timer, self.now + delay)
            else:
                self._dispatch(run)
            return
        self.fail(run, error, kind)

    # --- human review ------------------------------------------------------------------------

    def _start_review(self, run: NodeRun, node: HumanReviewNode) -> None:
        scope = self.scope_for(run)
        try:
            prompt = render(node.prompt, scope, path="prompt")
            data = None if node.data is None else resolve(node.data, scope, path="data")
        except TemplateError as exc:
            self.fail(run, str(exc), "error")
            return
        run.status = NodeStatus.WAITING_INPUT
        run.input = data
        run.review = {
            "type": REVIEW_REQUEST,
            "path": run.path,
            "prompt": prompt,
            "data": data,
            "edit_schema": node.edit_schema,
        }
        if node.timeout:
            run.timer = f"review:{run.path}"
            self.set_timer(run.timer, self.now + float(node.timeout))
        self.emit("node.waiting_input", run, prompt=prompt)

    def on_paused(self, event: NodePaused) -> None:
        """A callee asked for input: its calling node waits for a human too (the path bubbles up)."""
        run = self._current_call(event.path, event.attempt)
        if run is None:
            return
        self.clear_timer(_timeout_timer(run.path, run.attempt))
        if event.task_id:
            run.task_id = event.task_id
        review = dict(event.review)
        inner = str(review.get("path") or "")
        review["path"] = f"{run.path}/{inner}" if inner else run.path
        review.setdefault("type", REVIEW_REQUEST)
        run.review = review
        run.status = NodeStatus.WAITING_INPUT
        self.emit("node.waiting_input", run, prompt=review.get("prompt"), callee_task_id=run.task_id)

    def _waiting(self) -> list[NodeRun]:
        """The instances waiting for input, in the state's order (each copied, to change)."""
        self.nodes.refresh()
        waiting = self.nodes.waiting
        paths = list(waiting) if len(waiting) < 2 else [p for p in self.nodes if p in waiting]
        return [self.nodes[p] for p in paths]

    def on_review(self, event: ReviewAnswered) -> None:
        """A human answered: decide a human_review node, or forward the answer to the paused callee."""
        waiting = self._waiting()
        if not waiting:
            raise InvalidTransition(
                f"cannot resume: execution {self.state.execution_id} is {self.state.status.value} "
                "with no review waiting"
            )
        target, rest = waiting[0], ""
        if event.path:
            found = [r for r in waiting if event.path == r.path or event.path.startswith(r.path + "/")]
            if not found:
                paths = ", ".join(str((r.review or {}).get("path") or r.path) for r in waiting)
                raise InvalidTransition(f"no review waits at path {event.path!r} (waiting: {paths})")
            target, rest = found[0], event.path[len(found[0].path) + 1 :]
        review = target.review or {}
        if event.decision == "edit":
            schema = review.get("edit_schema")
            problems = schema_errors(schema if isinstance(schema, dict) else None, event.data)
            if problems:
                raise InvalidTransition(
                    f"the edit for review {review.get('path') or target.path!r} does not match its edit_schema: "
                    + "; ".join(problems)
                )
        node = self.definition.node(target.node_id)
        if isinstance(node, HumanReviewNode):
            self.clear_timer(target.timer)
            target.timer = None
            self._decide(target, node, event.decision, event.data, event.reason)
            return
        self._forward_review(target, event, rest)

    def _forward_review(self, run: NodeRun, event: ReviewAnswered, rest: str) -> None:
        """Continue the callee's paused task with the answer; its result arrives like any call's."""
        run.status = NodeStatus.RUNNING
        run.resumes += 1
        run.attempt_started_at = self.now
        run.reply_to = None
        deadline = self.state.deadline
        timeout = self._call_timeout(run)
        if timeout:
            due = self.now + timeout
            self.set_timer(_timeout_timer(run.path, run.attempt), due)
            deadline = due if deadline is None else min(deadline, due)
        body: dict[str, Any] = {"decision": event.decision, "data": event.data}
        if event.reason:
            body["reason"] = event.reason
        if rest:
            body["path"] = rest
        command = self.engine.dispatch_command(self.state, run, deadline, resume=body)
        self.commands.append(command.model_copy(update={"message_id": f"{run.message_id}:resume{run.resumes}"}))
        self.emit("node.resumed", run, decision=event.decision, callee_task_id=run.task_id)

    def _decide(self, run: NodeRun, node: HumanReviewNode, decision: str, data: JsonValue, reason: str | None) -> None:
        if decision == "reject":
            if node.on_reject != "fail":
                run.selected = node.on_reject
                self.complete(run, {"decision": "reject", "reason": reason, "data": run.input})
            else:
                self.fail(run, f"rejected by the reviewer{': ' + reason if reason else ''}", "failure")
            return
        self.complete(run, run.input if decision == "approve" else data)

    def _review_timed_out(self, run: NodeRun) -> None:
        node = self.definition.node(run.node_id)
        assert isinstance(node, HumanReviewNode)
        text = f"the review timed out after {float(node.timeout or 0):g}s"
        self.emit("node.review_timeout", run, on_timeout=node.on_timeout)
        if node.on_timeout == "fail":
            self.fail(run, text, "error")
        else:
            self._decide(run, node, node.on_timeout, None, text)

    def settle_pause(self, *, announce: bool) -> None:
        """Pause when only humans are awaited (no call in flight, no retry waiting); un-pause otherwise.

        While paused the execution timeout stops (re-armed with the paused time added on resume) and
        the caller's request ends; ``RequestReview`` tells the executor to answer it with the review.
        """
        state = self.state
        if state.finished:
            return
        waiting = self._waiting()
        busy = bool(self.nodes.busy)
        if waiting and not busy:
            if state.status is ExecutionStatus.RUNNING:
                state.status = ExecutionStatus.PAUSED
                state.paused_at = self.now
                state.deadline = None  # the caller's request ends with the pause (SPEC §7)
                self.clear_timer(EXECUTION_TIMEOUT)
                announce = True
            if announce:
                first = waiting[0]
                review: dict[str, JsonValue] = dict(first.review or {})
                path = str(review.get("path") or first.path)
                self.emit("execution.paused", first, status="paused", reason=review.get("prompt"), review_path=path)
                self.commands.append(RequestReview(path=path, node_id=first.node_id, review=review))
        elif state.status is ExecutionStatus.PAUSED:
            state.status = ExecutionStatus.RUNNING
            state.paused_seconds += self.now - (state.paused_at or self.now)
            state.paused_at = None
            timeout = self.definition.timeout
            if timeout and state.phase == "dag":
                self.set_timer(EXECUTION_TIMEOUT, state.started_at + state.paused_seconds + timeout)
            self.emit("execution.resumed", status="running", paused_ms=int(state.paused_seconds * 1000))

    # --- routers -----------------------------------------------------------------------------

    def _start_switch(self, run: NodeRun, node: SwitchNode) -> None:
        scope = self.scope_for(run)
        for index, case in enumerate(node.cases):
            try:
                holds = evaluate(case.condition, scope)
            except ConditionError as exc:
                self.fail(run, f"cases[{index}].condition: {exc}", "error")
                return
            if holds:
                run.selected = case.node
                self.complete(run, {"selected": case.node, "case": index})
                return
        run.selected = node.default
        self.complete(run, {"selected": node.default, "case": "default" if node.default else None})

    def _start_conditional(self, run: NodeRun, node: ConditionalNode) -> None:
        try:
            holds = evaluate(node.condition, self.scope_for(run))
        except ConditionError as exc:
            self.fail(run, f"condition: {exc}", "error")
            return
        run.selected = node.true_branch if holds else node.false_branch
        self.complete(run, {"result": holds, "selected": run.selected})

    def _join_tally(self, node: JoinNode) -> _Tally:
        members = [self.nodes.peek(m) for m in node.wait_for if m in self.nodes]
        completed = sum(1 for m in members if m.status is NodeStatus.COMPLETED)
        failed = [m.node_id for m in members if m.status is NodeStatus.FAILED]
        open_ = sum(1 for m in members if not m.final)
        inactive = sum(1 for m in members if m.status in (NodeStatus.SKIPPED, NodeStatus.CANCELED))
        live = len(members) - inactive
        if node.strategy == "all":
            quorum = live
        elif node.strategy == "any":
            quorum = 1
        else:
            quorum = node.n or 1
        return _Tally(completed, failed, open_, live, quorum)

    def _settle_join(self, run: NodeRun, node: JoinNode, *, has_other_deps: bool) -> bool:
        tally = self._join_tally(node)
        if tally.live == 0:
            self.skip(run, "every node it waits for was skipped")
            return True
        if tally.completed >= tally.quorum and tally.live > 0:
            if node.when is not None:
                try:
                    if not evaluate(node.when, self.scope_for(run)):
                        self.skip(run, "when is false")
                        return True
                except ConditionError as exc:
                    self.fail(run, f"when: {exc}", "error")
                    return True
            members = [self.state.nodes[m] for m in node.wait_for]
            for member in members:
                if not member.final:
                    self.cancel(member, f"join {node.id} completed without it")
                elif member.status is NodeStatus.FAILED:
                    member.absorbed = True
            done = sorted(
                (m for m in members if m.status is NodeStatus.COMPLETED),
                key=lambda m: (m.finished_at or 0.0, node.wait_for.index(m.node_id)),
            )
            run.started_at = self.now
            self.complete(
                run,
                {
                    "results": {m.node_id: self.state.outputs.get(m.node_id) for m in members},
                    "completed": [m.node_id for m in done],
                },
            )
            return True
        if tally.completed + tally.open < tally.quorum:
            self._fail_join(run, node, tally)
            return True
        return False

    def _fail_join(self, run: NodeRun, node: JoinNode, tally: _Tally) -> None:
        run.started_at = self.now
        needed = f"{tally.quorum} of {len(node.wait_for)}"
        self.fail(
            run,
            f"join {node.strategy} can no longer be satisfied: needs {needed} to succeed, "
            f"{tally.completed} did; failed: {', '.join(tally.failed) or 'none'}",
            "failure",
        )

    # --- containers --------------------------------------------------------------------------

    def _child(self, parent: NodeRun, node_id: str, path: str, kind: str, **fields: Any) -> NodeRun:
        child = NodeRun(path=path, node_id=node_id, type=kind, parent=parent.path, **fields)
        self.nodes[path] = child
        parent.children.append(path)
        if parent.open_children is None:
            self._count_children(parent)
        else:
            parent.open_children += 1
        return child

    def _start_map(self, run: NodeRun, node: MapNode) -> None:
        field, raw = node.item_source
        try:
            items = resolve(raw, self.scope_for(run), path=field)
        except TemplateError as exc:
            self.fail(run, str(exc), "error")
            return
        if field == "with_param" and isinstance(items, str):
            try:
                items = json.loads(items)
            except ValueError:
                self.fail(run, f"with_param: not a list nor the JSON text of one: {items[:60]!r}", "error")
                return
        if not isinstance(items, list):
            got = "null" if items is None else type(items).__name__
            self.fail(run, f"{field}: the items must be a list, got {got}: {to_text(items)[:60]!r}", "error")
            return
        if len(items) > node.max_items:
            self.fail(run, f"{field}: {len(items)} items exceed max_items {node.max_items}", "error")
            return
        run.items = items
        run.status = NodeStatus.RUNNING
        self.emit("node.started", run, items=len(items))
        if not items:
            self.complete(run, {"results": []})
            return
        self._launch_items(run, node)

    def _launch_items(self, run: NodeRun, node: MapNode) -> None:
        if run.path in self._launching:
            return
        self._launching.add(run.path)
        try:
            assert run.items is not None
            limit = node.concurrency_limit or len(run.items)
            while run.status is NodeStatus.RUNNING and run.launched < len(run.items):
                active, _, _ = self._count_children(run)
                if active >= limit:
                    break
                index = run.launched
                run.launched += 1
                target = self.definition.node(node.node)
                child = self._child(run, node.node, f"{run.path}[{index}]", target.type, index=index)
                self.start_node(child)
        finally:
            self._launching.discard(run.path)
        self._settle_map(run, node)

    def _settle_map(self, run: NodeRun, node: MapNode) -> None:
        if run.status is not NodeStatus.RUNNING or run.path in self._launching:
            return
        assert run.items is not None
        if run.launched < len(run.items) or self._count_children(run)[0]:
            return
        children = [self.nodes.peek(c) for c in run.children]
        failed = [c for c in children if c.status is NodeStatus.FAILED]
        if failed:
            self.fail(run, f"item {failed[0].index} failed: {failed[0].error}", failed[0].error_kind or "failure")
            return
        self.complete(run, {"results": [c.output if c.status is NodeStatus.COMPLETED else None for c in children]})

    def _start_loop(self, run: NodeRun, node: LoopNode) -> None:
        run.status = NodeStatus.RUNNING
        self.emit("node.started", run, max_iterations=node.max_iterations)
        self._launch_iteration(run, 0)

    def _launch_iteration(self, run: NodeRun, iteration: int) -> None:
        node = self.definition.node(run.node_id)
        assert isinstance(node, LoopNode)
        target = self.definition.node(node.node)
        run.launched = iteration + 1
        child = self._child(run, node.node, f"{run.path}#{iteration}", target.type, iteration=iteration)
        self.start_node(child)

    def _start_fork(self, run: NodeRun, node: ForkNode) -> None:
        run.status = NodeStatus.RUNNING
        self.emit("node.started", run, branches=len(node.branches))
        children = [self._child(run, node.id, f"{run.path}/{b.id}", "branch") for b in node.branches]
        self._launching.add(run.path)
        try:
            for child in children:
                if run.status is not NodeStatus.RUNNING:
                    break
                if child.status is not NodeStatus.PENDING:
                    continue
                child.started_at = self.now
                self._start_call(child)
        finally:
            self._launching.discard(run.path)
        self._settle_fork(run, node)

    def _settle_fork(self, run: NodeRun, node: ForkNode) -> None:
        if run.status is not NodeStatus.RUNNING or run.path in self._launching:
            return
        children = [self.nodes.peek(c) for c in run.children]
        if any(not c.final for c in children):
            return
        failed = [c for c in children if c.status is NodeStatus.FAILED]
        if failed:
            branch = failed[0].path.rsplit("/", 1)[1]
            self.fail(run, f"branch {branch} failed: {failed[0].error}", failed[0].error_kind or "failure")
            return
        keys = {b.id: b.key for b in node.branches}
        self.complete(run, {keys[c.path.rsplit("/", 1)[1]]: c.output for c in children})

    def _child_done(self, container: NodeRun, child: NodeRun) -> None:
        if container.status is not NodeStatus.RUNNING:
            return
        node = self.definition.node(container.node_id)
        if isinstance(node, MapNode):
            self._map_child_done(container, node, child)
        elif isinstance(node, LoopNode):
            self._loop_child_done(container, node, child)
        elif isinstance(node, ForkNode):
            if child.status is NodeStatus.FAILED and self.definition.fail_fast:
                for sibling in container.children:
                    if not self.nodes.peek(sibling).final:
                        self.cancel(self.nodes[sibling], f"branch {child.path.rsplit('/', 1)[1]} failed")
            self._settle_fork(container, node)

    def _map_child_done(self, container: NodeRun, node: MapNode, child: NodeRun) -> None:
        assert container.items is not None
        _, completed, failed = self._count_children(container)
        self.emit("map.progress", container, completed=completed, failed=failed, total=len(container.items))
        if child.status is NodeStatus.FAILED and self.definition.fail_fast:
            for sibling in container.children:
                if not self.nodes.peek(sibling).final:
                    self.cancel(self.nodes[sibling], f"item {child.index} failed")
            container.launched = len(container.items)
        self._launch_items(container, node)

    def _loop_child_done(self, container: NodeRun, node: LoopNode, child: NodeRun) -> None:
        if child.status is NodeStatus.FAILED:
            self.fail(container, f"iteration {child.iteration} failed: {child.error}", child.error_kind or "failure")
            return
        if child.status is NodeStatus.COMPLETED and container.parent is None:
            self.state.outputs[node.node] = child.output
        done = child.iteration + 1
        try:
            again = evaluate(node.condition, self.scope_for(child))
        except ConditionError as exc:
            self.fail(container, f"condition: {exc}", "error")
            return
        if not again:
            self.complete(container, {"iterations_completed": done, "stopped_reason": "condition_false"})
        elif done >= node.max_iterations:
            self.complete(container, {"iterations_completed": done, "stopped_reason": "max_iterations"})
        elif node.delay:
            container.timer = f"delay:{container.path}#{done}"
            self.set_timer(container.timer, self.now + node.delay)
        else:
            self._launch_iteration(container, done)

    # --- retry support -----------------------------------------------------------------------

    def reuse(self, outputs: Mapping[str, JsonValue]) -> None:
        """Take DAG nodes as completed with outputs of an earlier execution."""
        for node_id in self.engine.order:
            if node_id not in outputs:
                continue
            run = self.nodes[node_id]
            output = outputs[node_id]
            run.status = NodeStatus.COMPLETED
            run.output = output
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
