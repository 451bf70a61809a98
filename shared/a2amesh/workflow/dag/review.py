"""The handler of human review: review nodes, callees that asked for input, answers, pausing."""

from __future__ import annotations

from typing import Any

from a2amesh.diagnostics import schema_errors
from a2amesh.errors import InvalidTransition
from a2amesh.jsontext import JsonValue
from a2amesh.protocol.vocabulary import REVIEW_REQUEST
from a2amesh.workflow.dag import calls
from a2amesh.workflow.dag.nodes import HumanReviewNode, Node
from a2amesh.workflow.dag.state import NodePaused, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import EXECUTION_TIMEOUT, StepContext
from a2amesh.workflow.events import ExecutionStatus, RequestReview, ReviewAnswered
from a2amesh.workflow.templates import TemplateError, render, resolve

__all__ = ["on_paused", "on_review", "review_timed_out", "settle_pause", "start_review"]


def start_review(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Ask a human: the instance waits for input (until its timeout, if any)."""
    assert isinstance(node, HumanReviewNode)
    scope = ctx.scope_for(run)
    try:
        prompt = render(node.prompt, scope, path="prompt")
        data = None if node.data is None else resolve(node.data, scope, path="data")
    except TemplateError as exc:
        ctx.fail(run, str(exc), "error")
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
        ctx.set_timer(run.timer, ctx.now + float(node.timeout))
    ctx.emit("node.waiting_input", run, prompt=prompt)


def on_paused(ctx: StepContext, event: NodePaused) -> None:
    """A callee asked for input: its calling node waits for a human too (the path bubbles up)."""
    run = calls.answered_call(ctx, event)
    if run is None:
        return
    if event.task_id:
        run.task_id = event.task_id
    review = dict(event.review)
    inner = str(review.get("path") or "")
    review["path"] = f"{run.path}/{inner}" if inner else run.path
    review.setdefault("type", REVIEW_REQUEST)
    run.review = review
    run.status = NodeStatus.WAITING_INPUT
    ctx.emit("node.waiting_input", run, prompt=review.get("prompt"), callee_task_id=run.task_id)


def _waiting(ctx: StepContext) -> list[NodeRun]:
    """The instances waiting for input, in the state's order (each copied, to change)."""
    ctx.nodes.refresh()
    waiting = ctx.nodes.waiting
    paths = list(waiting) if len(waiting) < 2 else [p for p in ctx.nodes if p in waiting]
    return [ctx.nodes[p] for p in paths]


def on_review(ctx: StepContext, event: ReviewAnswered) -> None:
    """A human answered: decide a human_review node, or forward the answer to the paused callee."""
    waiting = _waiting(ctx)
    if not waiting:
        raise InvalidTransition(
            f"cannot resume: execution {ctx.state.execution_id} is {ctx.state.status.value} with no review waiting"
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
    node = ctx.definition.node(target.node_id)
    if isinstance(node, HumanReviewNode):
        ctx.clear_timer(target.timer)
        target.timer = None
        _decide(ctx, target, node, event.decision, event.data, event.reason)
        return
    _forward_review(ctx, target, event, rest)


def _forward_review(ctx: StepContext, run: NodeRun, event: ReviewAnswered, rest: str) -> None:
    """Continue the callee's paused task with the answer; its result arrives like any call's."""
    run.status = NodeStatus.RUNNING
    run.resumes += 1
    run.attempt_started_at = ctx.now
    run.reply_to = None
    deadline = calls.arm_call_timeout(ctx, run)
    body: dict[str, Any] = {"decision": event.decision, "data": event.data}
    if event.reason:
        body["reason"] = event.reason
    if rest:
        body["path"] = rest
    command = ctx.engine.dispatch_command(ctx.state, run, deadline, resume=body)
    ctx.commands.append(command.model_copy(update={"message_id": f"{run.message_id}:resume{run.resumes}"}))
    ctx.emit("node.resumed", run, decision=event.decision, callee_task_id=run.task_id)


def _decide(
    ctx: StepContext, run: NodeRun, node: HumanReviewNode, decision: str, data: JsonValue, reason: str | None
) -> None:
    if decision == "reject":
        if node.on_reject != "fail":
            run.selected = node.on_reject
            ctx.complete(run, {"decision": "reject", "reason": reason, "data": run.input})
        else:
            ctx.fail(run, f"rejected by the reviewer{': ' + reason if reason else ''}", "failure")
        return
    ctx.complete(run, run.input if decision == "approve" else data)


def review_timed_out(ctx: StepContext, run: NodeRun) -> None:
    node = ctx.definition.node(run.node_id)
    assert isinstance(node, HumanReviewNode)
    text = f"the review timed out after {float(node.timeout or 0):g}s"
    ctx.emit("node.review_timeout", run, on_timeout=node.on_timeout)
    if node.on_timeout == "fail":
        ctx.fail(run, text, "error")
    else:
        _decide(ctx, run, node, node.on_timeout, None, text)


def settle_pause(ctx: StepContext, *, announce: bool) -> None:
    """Pause when only humans are awaited (no call in flight, no retry waiting); un-pause otherwise.

    While paused the execution timeout stops (re-armed with the paused time added on resume) and
    the caller's request ends; ``RequestReview`` tells the executor to answer it with the review.
    """
    state = ctx.state
    if state.finished:
        return
    waiting = _waiting(ctx)
    busy = bool(ctx.nodes.busy)
    if waiting and not busy:
        if state.status is ExecutionStatus.RUNNING:
            state.status = ExecutionStatus.PAUSED
            state.paused_at = ctx.now
            state.deadline = None  # the caller's request ends with the pause (SPEC §7)
            ctx.clear_timer(EXECUTION_TIMEOUT)
            announce = True
        if announce:
            first = waiting[0]
            review: dict[str, JsonValue] = dict(first.review or {})
            path = str(review.get("path") or first.path)
            ctx.emit("execution.paused", first, status="paused", reason=review.get("prompt"), review_path=path)
            ctx.commands.append(RequestReview(path=path, node_id=first.node_id, review=review))
    elif state.status is ExecutionStatus.PAUSED:
        state.status = ExecutionStatus.RUNNING
        state.paused_seconds += ctx.now - (state.paused_at or ctx.now)
        state.paused_at = None
        timeout = ctx.definition.timeout
        if timeout and state.phase == "dag":
            ctx.set_timer(EXECUTION_TIMEOUT, state.started_at + state.paused_seconds + timeout)
        ctx.emit("execution.resumed", status="running", paused_ms=int(state.paused_seconds * 1000))
