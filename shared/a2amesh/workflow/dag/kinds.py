"""The one registry of DAG node kinds (:data:`KINDS`): node type → the handler that starts an instance of it, container
type → the handler of a child that ended, and what a DAG node's failure does.

A handler is a function of the step's context (:class:`~a2amesh.workflow.dag.step.StepContext`): calls
(:mod:`.calls`), human review (:mod:`.review`), routers and joins (:mod:`.branches`), containers
(:mod:`.containers`), and the prompt node here (rendered by the engine, no call).
"""

from __future__ import annotations

from a2amesh.workflow.dag import branches, calls, containers, review
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS, Node, PromptNode
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import NodeKinds, StepContext
from a2amesh.workflow.templates import TemplateError, render

__all__ = ["KINDS", "start_prompt"]


def start_prompt(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """A prompt node: its template rendered here, no agent call."""
    assert isinstance(node, PromptNode)
    try:
        text = render(node.template, ctx.scope_for(run), path="template")
    except TemplateError as exc:
        ctx.fail(run, str(exc), "error")
        return
    run.status = NodeStatus.RUNNING
    ctx.emit("node.started", run)
    ctx.complete(run, {"text": text})


KINDS = NodeKinds(
    start={
        "agent": calls.start,
        "workflow": calls.start,
        **dict.fromkeys(BUILTIN_AGENTS, calls.start),
        "prompt": start_prompt,
        "switch": branches.start_switch,
        "conditional": branches.start_conditional,
        "join": branches.start_join,
        "map": containers.start_map,
        "loop": containers.start_loop,
        "fork": containers.start_fork,
        "human_review": review.start_review,
    },
    child_done={
        "map": containers.map_child_done,
        "loop": containers.loop_child_done,
        "fork": containers.fork_child_done,
    },
    dag_failure=branches.dag_failure,
)
"""Every DAG node kind's handlers."""
