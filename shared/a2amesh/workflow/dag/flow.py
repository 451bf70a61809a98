"""The DAG's schedule and the execution's course in one step: start, skip or settle what became possible, run the
exit handlers, finish; cancellation, timers and reused outputs.

What each node kind does when started is its handler's (:mod:`.kinds`); this module decides when.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from a2amesh.diagnostics import schema_errors
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag import branches, calls, containers, review
from a2amesh.workflow.dag.nodes import HumanReviewNode, JoinNode, LoopNode
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import EXECUTION_TIMEOUT, StepContext
from a2amesh.workflow.events import CancelCall, ExecutionStatus, Finish
from a2amesh.workflow.templates import RefKind, TemplateError, find_templates, parse_reference, resolve

__all__ = ["advance", "finish", "on_cancel", "on_timer", "reuse"]

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


def advance(ctx: StepContext, *, incremental: bool = False) -> None:
    """Start, skip or finish whatever became possible, until nothing changes.

    ``incremental``: the state came from a finished step, so every pending DAG node was blocked by a
    node it watches; only those whose watched nodes (or themselves) this step touched are decided
    again, which keeps a step on a long chain from costing a pass over every node.
    """
    progressed = True
    touched = ctx.nodes.touched
    watches = ctx.engine.watches
    while progressed and not ctx.state.finished:
        progressed = False
        if ctx.state.phase == "dag":
            for node_id in ctx.engine.order:
                if (incremental and node_id not in touched and touched.isdisjoint(watches[node_id])) or (
                    dict.__getitem__(ctx.nodes, node_id).status is not NodeStatus.PENDING
                ):
                    continue
                # only a node that became final can unblock others: a started one needs no second pass
                if _try_start(ctx, node_id) and ctx.nodes.peek(node_id).final:
                    progressed = True
                if ctx.state.phase != "dag":
                    break
            # the last nodes in order are the likeliest to be open: look at them first
            if ctx.state.phase == "dag" and all(ctx.nodes.peek(i).final for i in reversed(ctx.engine.order)):
                _end_dag(ctx)
                progressed = True
        elif ctx.state.phase == "exit":
            progressed = _advance_exit(ctx)


def _try_start(ctx: StepContext, node_id: str) -> bool:
    """Decide a pending DAG node: wait (False), or skip / start / settle it (True)."""
    node = ctx.definition.node(node_id)
    deps = [ctx.nodes.peek(d) for d in ctx.engine.waits[node_id] if d in ctx.nodes]
    if any(not dep.final for dep in deps):
        return False  # still waiting: read only, so the node is neither copied nor written by this step
    run = ctx.nodes[node_id]
    for dep in deps:
        router = ctx.definition.node(dep.node_id)
        targets = {target for _, target in router.branch_targets()}
        if dep.status is NodeStatus.COMPLETED and run.node_id in targets and dep.selected != run.node_id:
            ctx.skip(run, f"not taken: {dep.node_id} chose {dep.selected or 'no branch'}")
            return True
        if isinstance(router, HumanReviewNode) and dep.selected and dep.selected != run.node_id:
            ctx.skip(run, f"not taken: {dep.node_id} was rejected")
            return True
    failed = [dep for dep in deps if dep.status is NodeStatus.FAILED and not dep.absorbed]
    if failed:
        ctx.skip(run, f"dependency {failed[0].node_id} failed")
        return True
    if isinstance(node, JoinNode):
        return branches.settle_join(ctx, run, node, has_other_deps=bool(deps))
    if deps and not any(dep.status is NodeStatus.COMPLETED for dep in deps):
        ctx.skip(run, "all dependencies were skipped")
        return True
    ctx.start_node(run)
    return True


def _end_dag(ctx: StepContext) -> None:
    failed = [
        ctx.nodes.peek(i)
        for i in ctx.engine.order
        if ctx.nodes.peek(i).status is NodeStatus.FAILED and not ctx.nodes.peek(i).absorbed
    ]
    if failed:
        first = failed[0]
        ctx.state.error = f"node {first.node_id!r} failed: {first.error}"
        ctx.enter_exit("failure")
        return
    output, error = _build_output(ctx)
    if error is not None:
        ctx.state.error = error
        ctx.enter_exit("failure")
        return
    ctx.state.output = output
    ctx.state.output_file = _passes_a_file(ctx, output)
    ctx.enter_exit("success")


def _passes_a_file(ctx: StepContext, output: JsonValue) -> bool:
    """Whether the output is a node's file result as it came: ``output_mapping`` is the one reference
    ``{{node.output…}}`` and the value is a file result of that node's instances. Then the workflow answers
    with the file part. What the callee answered with decides (``NodeRun.file``), never the shape of a value,
    so data that looks like a file reference, or data built around one, stays data."""
    mapping = ctx.definition.output_mapping
    if not isinstance(output, dict) or not isinstance(mapping, str):
        return False
    spans = find_templates(mapping)
    if len(spans) != 1 or spans[0][:2] != (0, len(mapping)):
        return False
    ref = parse_reference(spans[0][2], ctx.definition.node_ids)
    if ref.kind is not RefKind.NODE or ref.node_id is None:
        return False
    node_id = ref.node_id
    return any(
        run.file
        and run.status is NodeStatus.COMPLETED
        and (run.node_id == node_id or _within(run.path, node_id))
        and run.output == output
        for run in ctx.nodes.values()
    )


def _build_output(ctx: StepContext) -> tuple[JsonValue, str | None]:
    scope = ctx.scope_for(None).with_status("completed")
    if ctx.definition.output_mapping is None:
        leaves = [i for i in ctx.engine.order if not any(d in ctx.engine.dag for d in ctx.definition.dependents_of(i))]
        output: JsonValue = {i: ctx.state.outputs[i] for i in leaves if i in ctx.state.outputs}
    else:
        try:
            output = resolve(ctx.definition.output_mapping, scope, path="output_mapping")
        except TemplateError as exc:
            return None, f"cannot build the output: {exc}"
    problems = schema_errors(ctx.definition.output_schema, output)
    if problems:
        return None, "the output does not match the workflow's output_schema: " + "; ".join(problems)
    return output, None


def _advance_exit(ctx: StepContext) -> bool:
    handlers = [r for r in ctx.state.nodes.values() if r.node_id in ctx.engine.exit_handlers and r.parent is None]
    if any(not r.final for r in handlers):
        return False
    if ctx.state.exit_queue:
        node_id = ctx.state.exit_queue.pop(0)
        node = ctx.definition.node(node_id)
        run = NodeRun(path=node_id, node_id=node_id, type=node.type)
        ctx.nodes[node_id] = run
        ctx.start_node(run)
        return True
    finish(ctx)
    return True


def finish(ctx: StepContext) -> None:
    """Finish the execution with its outcome (exactly once)."""
    if ctx.state.finished:
        return
    outcome = ctx.state.outcome or "failure"
    status = _FINAL_STATUS[outcome]
    ctx.state.status = status
    ctx.state.phase = "done"
    ctx.state.finished_at = ctx.now
    for timer_id in list(ctx.state.timers):
        ctx.clear_timer(timer_id)
    output = ctx.state.output if status is ExecutionStatus.COMPLETED else None
    ctx.emit(
        _EVENT_OF_STATUS[status],
        status=status.value,
        error=ctx.state.error,
        duration_ms=int((ctx.now - ctx.state.started_at) * 1000),
    )
    ctx.commands.append(Finish(status=status, output=output, error=ctx.state.error))


def on_cancel(ctx: StepContext, reason: str) -> None:
    ctx.state.cancel_requested = True
    if ctx.state.phase == "dag":
        ctx.state.error = reason
        ctx.cancel_all(reason)
        ctx.enter_exit("cancel")
    elif ctx.state.phase == "exit":
        ctx.state.exit_queue = []
        ctx.cancel_all(reason)
        if ctx.state.outcome != "cancel":
            ctx.state.outcome = "cancel"
            ctx.state.error = reason


def on_timer(ctx: StepContext, timer_id: str) -> None:
    if ctx.state.timers.pop(timer_id, None) is None:
        return  # disarmed, or already handled
    if timer_id == EXECUTION_TIMEOUT:
        timeout = ctx.definition.timeout
        if timeout and ctx.state.started_at + ctx.state.paused_seconds + timeout <= ctx.now + 1e-6:
            ctx.fail_execution(f"the workflow timed out after {timeout:g}s")
        else:
            ctx.fail_execution("the caller's deadline passed before the workflow finished")
        return
    kind, _, rest = timer_id.partition(":")
    if kind in ("timeout", "retry"):
        path, _, attempt_text = rest.rpartition("@")
        run = ctx.state.nodes.get(path)
        if run is None or not attempt_text.isdigit():
            return
        attempt = int(attempt_text)
        if kind == "timeout" and run.status is NodeStatus.RUNNING and run.attempt == attempt:
            if run.task_id and run.agent:
                ctx.commands.append(CancelCall(path=run.path, agent=run.agent, task_id=run.task_id))
            timeout = calls.call_timeout(ctx, run) or 0
            calls.attempt_failed(ctx, run, f"timed out after {timeout:g}s (attempt {attempt})", "error", True)
        elif kind == "retry" and run.status is NodeStatus.WAITING and run.timer == timer_id:
            run.timer = None
            calls.dispatch(ctx, run)
    elif kind == "review":
        run = ctx.state.nodes.get(rest)
        if run is not None and run.status is NodeStatus.WAITING_INPUT and run.timer == timer_id:
            run.timer = None
            review.review_timed_out(ctx, run)
    elif kind == "delay":
        path, _, iteration = rest.rpartition("#")
        run = ctx.state.nodes.get(path)
        if run is not None and run.status is NodeStatus.RUNNING and run.timer == timer_id:
            run.timer = None
            containers.launch_iteration(ctx, run, int(iteration))


def reuse(ctx: StepContext, outputs: Mapping[str, JsonValue], files: Collection[str] = ()) -> None:
    """Take DAG nodes as completed with outputs of an earlier execution (``files``: those that are file results)."""
    for node_id in ctx.engine.order:
        if node_id not in outputs:
            continue
        run = ctx.nodes[node_id]
        output = outputs[node_id]
        run.status = NodeStatus.COMPLETED
        run.output = output
        run.file = node_id in files
        run.reason = f"reused from {ctx.state.reused_from or 'an earlier execution'}"
        run.started_at = run.finished_at = ctx.now
        if isinstance(output, dict) and "selected" in output:
            selected = output.get("selected")
            run.selected = selected if isinstance(selected, str) else None
        ctx.state.outputs[node_id] = output
        node = ctx.definition.node(node_id)
        if isinstance(node, LoopNode) and node.node in outputs:
            ctx.state.outputs[node.node] = outputs[node.node]
        ctx.emit("node.completed", run, reused=True)


def _within(path: str, node_id: str) -> bool:
    """Whether the instance ``path`` is node ``node_id`` or inside it (a map item, loop iteration, fork branch)."""
    return path == node_id or (path.startswith(node_id) and path[len(node_id)] in "[#/")
