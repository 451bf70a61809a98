"""DAG engine steps of routers and joins: switch, conditional, join quorum."""

from __future__ import annotations

from typing import NamedTuple

from a2amesh.workflow.conditions import ConditionError, evaluate
from a2amesh.workflow.dag.nodes import ConditionalNode, JoinNode, SwitchNode
from a2amesh.workflow.dag.state import NodeRun, NodeStatus
from a2amesh.workflow.dag.step import StepBase

__all__ = ["BranchSteps", "Tally"]


class Tally(NamedTuple):
    """Where a join stands: successes, failures, members still open, members taken, successes needed."""

    completed: int
    failed: list[str]
    open: int
    live: int
    quorum: int


class BranchSteps(StepBase):
    """DAG engine steps of routers and joins: switch, conditional, join quorum."""

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

    def _join_tally(self, node: JoinNode) -> Tally:
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
        return Tally(completed, failed, open_, live, quorum)

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

    def _fail_join(self, run: NodeRun, node: JoinNode, tally: Tally) -> None:
        run.started_at = self.now
        needed = f"{tally.quorum} of {len(node.wait_for)}"
        self.fail(
            run,
            f"join {node.strategy} can no longer be satisfied: needs {needed} to succeed, "
            f"{tally.completed} did; failed: {', '.join(tally.failed) or 'none'}",
            "failure",
        )
