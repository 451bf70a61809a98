"""The handlers of containers: map items, loop iterations, fork branches (each a starter and a child-done handler)."""

from __future__ import annotations

import json
from typing import Any

from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag import calls
from a2amesh.workflow.dag.nodes import ForkNode, LoopNode, MapNode, Node
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import StepContext
from a2amesh.workflow.templates import TemplateError, resolve, to_text

__all__ = [
    "fork_child_done",
    "launch_iteration",
    "loop_child_done",
    "map_child_done",
    "start_fork",
    "start_loop",
    "start_map",
]


def _child(ctx: StepContext, parent: NodeRun, node_id: str, path: str, kind: str, **fields: Any) -> NodeRun:
    child = NodeRun(path=path, node_id=node_id, type=kind, parent=parent.path, **fields)
    ctx.nodes[path] = child
    parent.children.append(path)
    if parent.open_children is None:
        ctx.count_children(parent)
    else:
        parent.open_children += 1
    return child


# --- map ------------------------------------------------------------------------------------------


def start_map(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Resolve the items, then launch the first ones (up to the concurrency limit)."""
    assert isinstance(node, MapNode)
    field, raw = node.item_source
    try:
        items = resolve(raw, ctx.scope_for(run), path=field)
    except TemplateError as exc:
        ctx.fail(run, str(exc), "error")
        return
    if field == "with_param" and isinstance(items, str):
        try:
            items = json.loads(items)
        except ValueError:
            ctx.fail(run, f"with_param: not a list nor the JSON text of one: {items[:60]!r}", "error")
            return
    if not isinstance(items, list):
        got = "null" if items is None else type(items).__name__
        ctx.fail(run, f"{field}: the items must be a list, got {got}: {to_text(items)[:60]!r}", "error")
        return
    if len(items) > node.max_items:
        ctx.fail(run, f"{field}: {len(items)} items exceed max_items {node.max_items}", "error")
        return
    run.items = items
    run.status = NodeStatus.RUNNING
    ctx.emit("node.started", run, items=len(items))
    if not items:
        ctx.complete(run, {"results": []})
        return
    _launch_items(ctx, run, node)


def _launch_items(ctx: StepContext, run: NodeRun, node: MapNode) -> None:
    if run.path in ctx.launching:
        return
    ctx.launching.add(run.path)
    try:
        assert run.items is not None
        limit = node.concurrency_limit or len(run.items)
        while run.status is NodeStatus.RUNNING and run.launched < len(run.items):
            active, _, _ = ctx.count_children(run)
            if active >= limit:
                break
            index = run.launched
            run.launched += 1
            target = ctx.definition.node(node.node)
            child = _child(ctx, run, node.node, f"{run.path}[{index}]", target.type, index=index)
            ctx.start_node(child)
    finally:
        ctx.launching.discard(run.path)
    _settle_map(ctx, run, node)


def _settle_map(ctx: StepContext, run: NodeRun, node: MapNode) -> None:
    if run.status is not NodeStatus.RUNNING or run.path in ctx.launching:
        return
    assert run.items is not None
    if run.launched < len(run.items) or ctx.count_children(run)[0]:
        return
    children = [ctx.nodes.peek(c) for c in run.children]
    failed = [c for c in children if c.status is NodeStatus.FAILED]
    if failed:
        ctx.fail(run, f"item {failed[0].index} failed: {failed[0].error}", failed[0].error_kind or "failure")
        return
    ctx.complete(run, {"results": [c.output if c.status is NodeStatus.COMPLETED else None for c in children]})


def map_child_done(ctx: StepContext, container: NodeRun, child: NodeRun) -> None:
    """Report progress, stop the other items on a failure under fail_fast, launch the next items or settle."""
    node = ctx.definition.node(container.node_id)
    assert isinstance(node, MapNode)
    assert container.items is not None
    _, completed, failed = ctx.count_children(container)
    ctx.emit("map.progress", container, completed=completed, failed=failed, total=len(container.items))
    if child.status is NodeStatus.FAILED and ctx.definition.fail_fast:
        for sibling in container.children:
            if not ctx.nodes.peek(sibling).final:
                ctx.cancel(ctx.nodes[sibling], f"item {child.index} failed")
        container.launched = len(container.items)
    _launch_items(ctx, container, node)


# --- loop -----------------------------------------------------------------------------------------


def start_loop(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Launch the first iteration."""
    assert isinstance(node, LoopNode)
    run.status = NodeStatus.RUNNING
    ctx.emit("node.started", run, max_iterations=node.max_iterations)
    launch_iteration(ctx, run, 0)


def launch_iteration(ctx: StepContext, run: NodeRun, iteration: int) -> None:
    """Start iteration ``iteration`` of a loop instance (also when its delay timer fires)."""
    node = ctx.definition.node(run.node_id)
    assert isinstance(node, LoopNode)
    target = ctx.definition.node(node.node)
    run.launched = iteration + 1
    child = _child(ctx, run, node.node, f"{run.path}#{iteration}", target.type, iteration=iteration)
    ctx.start_node(child)


def loop_child_done(ctx: StepContext, container: NodeRun, child: NodeRun) -> None:
    """An iteration ended: fail, stop (condition false, max_iterations), or run the next (after the delay)."""
    node = ctx.definition.node(container.node_id)
    assert isinstance(node, LoopNode)
    if child.status is NodeStatus.FAILED:
        ctx.fail(container, f"iteration {child.iteration} failed: {child.error}", child.error_kind or "failure")
        return
    if child.status is NodeStatus.COMPLETED and container.parent is None:
        ctx.state.outputs[node.node] = child.output
    done = child.iteration + 1
    try:
        again = evaluate(node.condition, ctx.scope_for(child))
    except ConditionError as exc:
        ctx.fail(container, f"condition: {exc}", "error")
        return
    if not again:
        ctx.complete(container, {"iterations_completed": done, "stopped_reason": "condition_false"})
    elif done >= node.max_iterations:
        ctx.complete(container, {"iterations_completed": done, "stopped_reason": "max_iterations"})
    elif node.delay:
        container.timer = f"delay:{container.path}#{done}"
        ctx.set_timer(container.timer, ctx.now + node.delay)
    else:
        launch_iteration(ctx, container, done)


# --- fork -----------------------------------------------------------------------------------------


def start_fork(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Call every branch at once."""
    assert isinstance(node, ForkNode)
    run.status = NodeStatus.RUNNING
    ctx.emit("node.started", run, branches=len(node.branches))
    children = [_child(ctx, run, node.id, f"{run.path}/{b.id}", "branch") for b in node.branches]
    ctx.launching.add(run.path)
    try:
        for child in children:
            if run.status is not NodeStatus.RUNNING:
                break
            if child.status is not NodeStatus.PENDING:
                continue
            child.started_at = ctx.now
            calls.start_call(ctx, child)
    finally:
        ctx.launching.discard(run.path)
    _settle_fork(ctx, run, node)


def _settle_fork(ctx: StepContext, run: NodeRun, node: ForkNode) -> None:
    if run.status is not NodeStatus.RUNNING or run.path in ctx.launching:
        return
    children = [ctx.nodes.peek(c) for c in run.children]
    if any(not c.final for c in children):
        return
    failed = [c for c in children if c.status is NodeStatus.FAILED]
    if failed:
        branch = failed[0].path.rsplit("/", 1)[1]
        ctx.fail(run, f"branch {branch} failed: {failed[0].error}", failed[0].error_kind or "failure")
        return
    keys = {b.id: b.key for b in node.branches}
    ctx.complete(run, {keys[c.path.rsplit("/", 1)[1]]: c.output for c in children})


def fork_child_done(ctx: StepContext, container: NodeRun, child: NodeRun) -> None:
    """A branch ended: stop the others on a failure under fail_fast, settle when all are done."""
    node = ctx.definition.node(container.node_id)
    assert isinstance(node, ForkNode)
    if child.status is NodeStatus.FAILED and ctx.definition.fail_fast:
        for sibling in container.children:
            if not ctx.nodes.peek(sibling).final:
                ctx.cancel(ctx.nodes[sibling], f"branch {child.path.rsplit('/', 1)[1]} failed")
    _settle_fork(ctx, container, node)
