"""The handler of call nodes (agent, workflow, built-in agents, fork branches): dispatch, results, retries, timeouts."""

from __future__ import annotations

from a2amesh.ids import node_message_id, task_id_for
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag.nodes import (
    AgentNode,
    BuiltinNode,
    ForkNode,
    MemoryConfig,
    MemoryNodeBase,
    Node,
    ToolsNode,
    WorkflowNode,
)
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import CALL_TYPES, StepContext, add_usage, timeout_timer
from a2amesh.workflow.events import ErrorKind, NodeFailed, NodePaused, NodeSucceeded
from a2amesh.workflow.templates import TemplateError, render, resolve

__all__ = [
    "answered_call",
    "arm_call_timeout",
    "attempt_failed",
    "call_timeout",
    "dispatch",
    "on_failed",
    "on_succeeded",
    "start",
    "start_call",
]

_DISABLED_MEMORY: dict[str, JsonValue] = {
    "memory_read": {"entries": [], "text": "", "disabled": True},
    "memory_write": {"id": None, "key": None, "agent": None, "user": None, "replaced": False, "disabled": True},
}
"""What memory nodes output when the workflow's memory_config disables memory."""


def start(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Start a call node: send its first attempt (a memory node of a workflow whose memory is off answers here)."""
    if isinstance(node, MemoryNodeBase) and not (ctx.definition.memory_config or MemoryConfig()).enabled:
        run.status = NodeStatus.RUNNING
        ctx.emit("node.started", run)
        ctx.complete(run, _DISABLED_MEMORY[node.type])
        return
    start_call(ctx, run)


def call_timeout(ctx: StepContext, run: NodeRun) -> float | None:
    """The per-attempt timeout of a call instance, if its node has one."""
    timeout = getattr(ctx.definition.node(run.node_id), "timeout", None)
    return float(timeout) if isinstance(timeout, int | float) else None


def _call_templates(ctx: StepContext, run: NodeRun) -> tuple[str, JsonValue, str | None]:
    """(callee, input template, instruction template) of a call instance."""
    node = ctx.definition.node(run.node_id)
    if run.type == "branch":
        assert isinstance(node, ForkNode)
        branch = next(b for b in node.branches if b.id == run.path.rsplit("/", 1)[1])
        return branch.agent_name, branch.input, branch.instruction
    if isinstance(node, BuiltinNode):
        return node.builtin_agent, _builtin_input(ctx, node), None
    assert isinstance(node, AgentNode | WorkflowNode)
    agent = node.agent_name if isinstance(node, AgentNode) else node.workflow_name
    return agent, node.input, node.instruction


def _builtin_input(ctx: StepContext, node: BuiltinNode) -> JsonValue:
    """The input template of a node run by a built-in agent, the workflow's agent settings applied."""
    d = ctx.definition
    if isinstance(node, ToolsNode):
        source = node.source_node(d.llm_node_ids())
        assert source is not None, "validated: a tools node has an llm source"
        data = node.source_input(source, d.agent_config)
    else:
        data = node.call_input(d.agent_config, d.max_tool_iterations)
    assert isinstance(data, dict)
    if isinstance(node, MemoryNodeBase):
        data = node.with_memory_config(data, d.memory_config)
        data["agent"] = data["agent"] or ctx.engine.name  # the default scope: this workflow
    return {**data, "stream": d.streaming_enabled}


def start_call(ctx: StepContext, run: NodeRun) -> None:
    """Render a call instance's input and instruction, refuse a recursive or too deep workflow call, send it."""
    node = ctx.definition.node(run.node_id)
    scope = ctx.scope_for(run)
    agent, template, instruction = _call_templates(ctx, run)
    try:
        run.input = resolve({} if template is None else template, scope, path="input")
        run.instruction = None if instruction is None else render(instruction, scope, path="instruction")
    except TemplateError as exc:
        ctx.fail(run, str(exc), "error")
        return
    run.agent = agent
    if isinstance(node, WorkflowNode):
        chain = [*ctx.state.call_chain, ctx.engine.name]
        if agent in chain:
            ctx.fail(run, f"recursive workflow call: {' → '.join([*chain, agent])}", "error")
            return
        depth = ctx.state.call_depth + 1
        if depth > ctx.definition.max_call_depth:
            ctx.fail(
                run,
                f"calling workflow {agent!r} would make the call depth {depth}, above this workflow's "
                f"max_call_depth {ctx.definition.max_call_depth}",
                "error",
            )
            return
    dispatch(ctx, run)


def dispatch(ctx: StepContext, run: NodeRun) -> None:
    """Send the next attempt of a call instance."""
    assert run.agent is not None
    attempt = run.attempt + 1
    message_id = node_message_id(ctx.state.execution_id, run.path, run.iteration, attempt)
    # one dict update for the six fields (a NodeRun's fields are plain, unvalidated on assignment): 0.6 us
    # against 2.4 for six pydantic __setattr__ calls, on every dispatch
    run.__dict__.update(
        attempt=attempt,
        status=NodeStatus.RUNNING,
        attempt_started_at=ctx.now,
        message_id=message_id,
        task_id=task_id_for(run.agent, message_id),
        reply_to=None,
    )
    ctx.commands.append(ctx.engine.dispatch_command(ctx.state, run, arm_call_timeout(ctx, run)))
    ctx.emit("node.started", run, agent=run.agent, attempt=run.attempt, task_id=run.task_id)


def arm_call_timeout(ctx: StepContext, run: NodeRun) -> float | None:
    """Arm the timeout timer of a call being sent; the deadline to send it with."""
    deadline = ctx.state.deadline
    timeout = call_timeout(ctx, run)
    if timeout:
        due = ctx.now + timeout
        ctx.set_timer(timeout_timer(run.path, run.attempt), due)
        deadline = due if deadline is None else min(deadline, due)
    return deadline


def answered_call(ctx: StepContext, event: NodeSucceeded | NodeFailed | NodePaused) -> NodeRun | None:
    """The call instance ``event`` answers, its timeout disarmed; None for a stale or unknown answer."""
    run = ctx.state.nodes.get(event.path)
    if (
        run is None
        or run.type not in CALL_TYPES
        or run.status is not NodeStatus.RUNNING
        or run.attempt != event.attempt
    ):
        return None
    ctx.clear_timer(timeout_timer(run.path, run.attempt))
    return run


def on_succeeded(ctx: StepContext, event: NodeSucceeded) -> None:
    run = answered_call(ctx, event)
    if run is None:
        return
    run.usage = event.usage
    add_usage(ctx.state.usage, event.usage)
    run.file = event.file
    ctx.complete(run, event.output)


def on_failed(ctx: StepContext, event: NodeFailed) -> None:
    run = answered_call(ctx, event)
    if run is None:
        return
    run.usage = event.usage
    add_usage(ctx.state.usage, event.usage)
    attempt_failed(ctx, run, event.error, event.error_kind, event.retryable)


def attempt_failed(ctx: StepContext, run: NodeRun, error: str, kind: ErrorKind, retryable: bool) -> None:
    """An attempt failed: retry it (at once or after the backoff's timer), or fail the instance."""
    strategy = ctx.definition.retry_strategy_for(run.node_id)
    if retryable and strategy is not None and strategy.retries_on(kind) and run.attempt <= strategy.limit:
        delay = strategy.delay(run.attempt)
        run.error = error
        run.error_kind = kind
        ctx.emit("node.retrying", run, attempt=run.attempt, error=error, delay_s=delay)
        if delay > 0:
            run.status = NodeStatus.WAITING
            run.timer = f"retry:{run.path}@{run.attempt + 1}"
            ctx.set_timer(run.timer, ctx.now + delay)
        else:
            dispatch(ctx, run)
        return
    ctx.fail(run, error, kind)
