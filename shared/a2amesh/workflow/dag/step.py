"""The context of one DAG engine step (:class:`StepContext`): copy-on-write node instances, events and timers, the
node lifecycle every node kind shares.

What a node kind does is not here: each kind has a handler (:mod:`.kinds` maps node type → handler) that
receives the context, as :mod:`.calls`, :mod:`.review`, :mod:`.branches` and :mod:`.containers` do; the DAG
schedule, timers, cancellation and the execution's end are :mod:`.flow`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from a2amesh.jsontext import JsonValue
from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS, LoopNode, MapNode, Node
from a2amesh.workflow.dag.state import Command, ExecutionState, NodeRun, NodeStatus
from a2amesh.workflow.events import CancelCall, ClearTimer, EmitEvent, ErrorKind, SetTimer
from a2amesh.workflow.templates import UNSET, TemplateScope, Unset

if TYPE_CHECKING:
    from a2amesh.workflow.dag.engine import Engine

__all__ = [
    "CALL_TYPES",
    "EXECUTION_TIMEOUT",
    "ChildDone",
    "NodeKinds",
    "Nodes",
    "Starter",
    "StepContext",
    "add_usage",
    "timeout_timer",
]

EXECUTION_TIMEOUT = "execution_timeout"
"""Timer id of the whole execution's timeout."""

CALL_TYPES = frozenset({"agent", "workflow", "branch", *BUILTIN_AGENTS})
"""Node-instance types that call an agent or workflow."""

_STATUS_TEXT = {"success": "completed", "failure": "failed", "cancel": "canceled"}


def timeout_timer(path: str, attempt: int) -> str:
    return f"timeout:{path}@{attempt}"


def add_usage(total: dict[str, int], usage: Mapping[str, Any] | None) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _busy(run: NodeRun) -> bool:
    """Waiting for a timer, or a call in flight (what keeps an execution from pausing)."""
    return run.status is NodeStatus.WAITING or (run.type in CALL_TYPES and run.status is NodeStatus.RUNNING)


def _copy_run(run: NodeRun) -> NodeRun:
    """A copy of a node instance a step may mutate (its only field mutated in place is ``children``)."""
    return run.updated(children=list(run.children))


class Nodes(dict[str, NodeRun]):
    """The ``nodes`` of a state a step works on: copy-on-write, so a step costs what it touches.

    A step's state starts as a shallow copy of its input's ``nodes``; looking an instance up
    (``[]``, ``get``) copies it first, so the step mutates its own copy and never the input's. The
    paths looked up or added are ``touched`` (a superset of those changed). Iteration (``values``,
    ``items``) sees the shared instances: read them only (``[]`` to mutate).

    It also indexes the instances waiting for input and the busy ones, so pausing needs no scan; the
    index follows the touched paths (refreshed before use) and carries over to the next step.
    """

    def __init__(self, base: dict[str, NodeRun]) -> None:
        super().__init__(base)
        self.touched: set[str] = set()
        self.sealed: frozenset[str] = frozenset()
        """The paths the step that made this state touched (:meth:`seal`)."""
        if isinstance(base, Nodes):
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
        """End a step: return the touched paths, and copy on write again from now on (its instances may be shared
        with the states of the steps after it)."""
        self.refresh()
        touched = frozenset(self.touched)
        self.touched.clear()
        self.sealed = touched
        return touched

    def own(self, path: str) -> NodeRun:
        """The instance at ``path`` to change before this state is stepped from: the last step's own copy when it
        touched ``path`` (no other state holds that one), else a copy (as ``[]``)."""
        if path in self.sealed:
            return dict.__getitem__(self, path)
        return self[path]

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, NodeRun]:
        return {path: run.model_copy(deep=True) for path, run in self.items()}

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


Starter = Callable[["StepContext", NodeRun, Node], None]
"""A node kind's handler of a starting instance (its ``when`` already held)."""

ChildDone = Callable[["StepContext", NodeRun, NodeRun], None]
"""A container kind's handler of a child that became final: ``(context, container, child)``."""


@dataclass(frozen=True)
class NodeKinds:
    """What each node kind does, by node type (:data:`a2amesh.workflow.dag.kinds.KINDS` is the one registry)."""

    start: Mapping[str, Starter]
    """Every node type → how an instance of it starts."""
    child_done: Mapping[str, ChildDone]
    """Every container type (map, loop, fork) → what a child becoming final does to it."""
    dag_failure: Callable[[StepContext, NodeRun], None]
    """What a top-level DAG node's failure does: fail fast, unless a join absorbs it."""


class StepContext:
    """One step of one execution: its own copy of the state, the commands it emits, the clock and the definition.

    The handlers of the node kinds (``kinds``) advance the state through this context only: events and
    timers (:meth:`emit`, :meth:`set_timer`, :meth:`clear_timer`), templates (:meth:`scope_for`), the
    node lifecycle (:meth:`start_node`, :meth:`complete`, :meth:`fail`, :meth:`skip`, :meth:`cancel`)
    and the execution's leaving of the DAG (:meth:`fail_execution`, :meth:`enter_exit`).
    """

    def __init__(self, engine: Engine, state: ExecutionState, now: float, kinds: NodeKinds) -> None:
        self.engine = engine
        self.definition = engine.definition
        self.kinds = kinds
        self.state = state
        if not isinstance(state.nodes, Nodes):
            state.__dict__["nodes"] = Nodes(state.nodes)
        assert isinstance(state.nodes, Nodes)
        self.nodes: Nodes = state.nodes
        """The state's node instances: ``self.nodes[path]`` to change one, ``peek`` to read one."""
        self.now = float(now)  # an int clock would be stored as "5" where the state's floats say "5.0"
        self.commands: list[Command] = []
        self.launching: set[str] = set()
        """Containers launching their children now (a child settling meanwhile must not settle the container)."""

    def emit(self, event: str, run: NodeRun | None = None, *, status: str | None = None, **data: Any) -> None:
        self.state.seq += 1
        self.commands.append(
            EmitEvent(
                event=event,
                seq=self.state.seq,
                path=run.path if run else None,
                node_id=run.node_id if run else None,
                status=status if status is not None else str(run.status if run else self.state.status),
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

    def scope_for(self, run: NodeRun | None) -> TemplateScope:
        """What templates of this instance see: outputs, its map item, its loop iteration."""
        overlay: dict[str, JsonValue] = {}
        map_item: JsonValue = None  # with map_index
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
                if target not in overlay and not isinstance(latest, Unset):
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

    def _latest_output(self, loop: NodeRun) -> JsonValue | Unset:
        for path in reversed(loop.children):
            child = self.nodes.peek(path)
            if child.status is NodeStatus.COMPLETED:
                return child.output
        return UNSET

    # --- the node lifecycle ---------------------------------------------------------------------

    def start_node(self, run: NodeRun) -> None:
        """Start one instance: evaluate ``when``, then hand it to its kind's handler."""
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
        self.kinds.start[node.type](self, run, node)

    def _set_final(self, run: NodeRun, status: NodeStatus) -> None:
        """Give an instance its final status, keeping its container's child counts."""
        was_final = run.final
        run.status = status
        if run.parent is None or was_final:
            return
        parent = self.nodes[run.parent]
        if parent.open_children is None:
            self.count_children(parent)
            return
        parent.open_children -= 1
        if status is NodeStatus.COMPLETED:
            parent.completed_children = (parent.completed_children or 0) + 1
        elif status is NodeStatus.FAILED:
            parent.failed_children = (parent.failed_children or 0) + 1

    def count_children(self, container: NodeRun) -> tuple[int, int, int]:
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
            container = self.state.nodes[run.parent]
            if container.status is NodeStatus.RUNNING:
                self.kinds.child_done[self.definition.node(container.node_id).type](self, container, run)
            return
        if run.status is NodeStatus.COMPLETED:
            self.state.outputs[run.node_id] = run.output
        if run.path in self.engine.dag and run.status is NodeStatus.FAILED:
            self.kinds.dag_failure(self, run)

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
            self.clear_timer(timeout_timer(run.path, run.attempt))
            if run.task_id and run.agent:
                self.commands.append(CancelCall(path=run.path, agent=run.agent, task_id=run.task_id))
        for child in run.children:
            if not self.nodes.peek(child).final:
                self.cancel(self.nodes[child], reason)
        self._set_final(run, NodeStatus.CANCELED)
        run.reason = reason
        run.finished_at = self.now
        self.emit("node.canceled", run, reason=reason)

    def cancel_all(self, reason: str) -> None:
        for path, run in list(self.nodes.items()):
            if run.parent is None and not run.final:
                self.cancel(self.nodes[path], reason)

    # --- leaving the DAG ------------------------------------------------------------------------

    def enter_exit(self, outcome: Literal["success", "failure", "cancel"]) -> None:
        """Leave the DAG: run the outcome's exit handlers, then finish (:mod:`.flow`)."""
        if self.state.phase != "dag":
            return
        self.state.phase = "exit"
        self.state.outcome = outcome
        self.clear_timer(EXECUTION_TIMEOUT)
        self.state.exit_queue = self.definition.exit_handlers.handlers_for(outcome)

    def fail_execution(self, error: str) -> None:
        """Fail fast: cancel whatever runs, then run the failure exit handlers."""
        if self.state.phase != "dag":
            return
        self.state.error = error
        self.cancel_all("the execution failed")
        self.enter_exit("failure")
