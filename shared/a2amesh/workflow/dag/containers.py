"""DAG engine steps of containers: map items, loop iterations, fork branches."""

from __future__ import annotations

import json
from typing import Any

from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag.calls import CallSteps
from a2amesh.workflow.dag.nodes import ForkNode, LoopNode, MapNode
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.templates import TemplateError, resolve, to_text

__all__ = ["ContainerSteps"]


class ContainerSteps(CallSteps):
    """DAG engine steps of containers: map items, loop iterations, fork branches."""

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
