"""The handlers of routers and joins: switch, conditional, join quorum, and a DAG node's failure a join may absorb."""

from __future__ import annotations

from typing import NamedTuple

from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag.nodes import ConditionalNode, JoinNode, Node, SwitchNode
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import StepContext

__all__ = [
    "Tally",
    "dag_failure",
    "fail_join",
    "join_tally",
    "settle_join",
    "start_conditional",
    "start_join",
    "start_switch",
]


class Tally(NamedTuple):
    """Where a join stands: successes, failures, members still open, members taken, successes needed."""

    completed: int
    failed: list[str]
    open: int
    live: int
    quorum: int


def start_switch(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Take the first case whose condition holds, else the default."""
    assert isinstance(node, SwitchNode)
    scope = ctx.scope_for(run)
    for index, case in enumerate(node.cases):
        try:
            holds = evaluate(case.condition, scope)
        except ConditionError as exc:
            ctx.fail(run, f"cases[{index}].condition: {exc}", "error")
            return
        if holds:
            run.selected = case.node
            ctx.complete(run, {"selected": case.node, "case": index})
            return
    run.selected = node.default
    ctx.complete(run, {"selected": node.default, "case": "default" if node.default else None})


def start_conditional(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """Take the true or the false branch."""
    assert isinstance(node, ConditionalNode)
    try:
        holds = evaluate(node.condition, ctx.scope_for(run))
    except ConditionError as exc:
        ctx.fail(run, f"condition: {exc}", "error")
        return
    run.selected = node.true_branch if holds else node.false_branch
    ctx.complete(run, {"result": holds, "selected": run.selected})


def join_tally(ctx: StepContext, node: JoinNode) -> Tally:
    members = [ctx.nodes.peek(m) for m in node.wait_for if m in ctx.nodes]
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
    return Tally(completed, failed, open_, live, quorum)


def settle_join(ctx: StepContext, run: NodeRun, node: JoinNode, *, has_other_deps: bool) -> bool:
    tally = join_tally(ctx, node)
    if tally.live == 0:
        ctx.skip(run, "every node it waits for was skipped")
        return True
    if tally.completed >= tally.quorum and tally.live > 0:
        if node.when is not None:
            try:
                if not evaluate(node.when, ctx.scope_for(run)):
                    ctx.skip(run, "when is false")
                    return True
            except ConditionError as exc:
                ctx.fail(run, f"when: {exc}", "error")
                return True
        members = [ctx.state.nodes[m] for m in node.wait_for]
        for member in members:
            if not member.final:
                ctx.cancel(member, f"join {node.id} completed without it")
            elif member.status is NodeStatus.FAILED:
                member.absorbed = True
        done = sorted(
            (m for m in members if m.status is NodeStatus.COMPLETED),
            key=lambda m: (m.finished_at or 0.0, node.wait_for.index(m.node_id)),
        )
        run.started_at = ctx.now
        ctx.complete(
            run,
            {
                "results": {m.node_id: ctx.state.outputs.get(m.node_id) for m in members},
                "completed": [m.node_id for m in done],
            },
        )
        return True
    if tally.completed + tally.open < tally.quorum:
        fail_join(ctx, run, node, tally)
        return True
    return False


def fail_join(ctx: StepContext, run: NodeRun, node: JoinNode, tally: Tally) -> None:
    run.started_at = ctx.now
    needed = f"{tally.quorum} of {len(node.wait_for)}"
    ctx.fail(
        run,
        f"join {node.strategy} can no longer be satisfied: needs {needed} to succeed, "
        f"{tally.completed} did; failed: {', '.join(tally.failed) or 'none'}",
        "failure",
    )


def start_join(ctx: StepContext, run: NodeRun, node: Node) -> None:
    """A join started outside the DAG (an exit handler or a container's target) has nothing to wait for."""
    ctx.complete(run, {"results": {}, "completed": []})


def dag_failure(ctx: StepContext, run: NodeRun) -> None:
    """A DAG node failed: fail fast, unless every dependent is a join that can still reach its quorum."""
    if not ctx.definition.fail_fast or _absorbable(ctx, run):
        return
    for dependent in ctx.definition.dependents_of(run.node_id):
        node = ctx.definition.node(dependent)
        join = ctx.state.nodes.get(dependent)
        if isinstance(node, JoinNode) and run.node_id in node.wait_for and join and not join.final:
            tally = join_tally(ctx, node)
            if tally.completed + tally.open < tally.quorum:
                fail_join(ctx, join, node, tally)  # fails the execution with the join's reason
                return
    ctx.fail_execution(f"node {run.node_id!r} failed: {run.error}")


def _absorbable(ctx: StepContext, run: NodeRun) -> bool:
    """Whether every dependent is a join that can still reach its quorum without this node."""
    dependents = [d for d in ctx.definition.dependents_of(run.node_id) if d in ctx.engine.dag]
    if not dependents:
        return False
    for dependent in dependents:
        node = ctx.definition.node(dependent)
        if not isinstance(node, JoinNode) or run.node_id not in node.wait_for:
            return False
        tally = join_tally(ctx, node)
        if tally.completed + tally.open < tally.quorum:
            return False
    return True
