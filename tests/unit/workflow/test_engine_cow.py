"""The engine's copy-on-write steps: pure from the caller's view, ``touched`` covers every change, counters hold,
and deciding only the nodes a step may have unblocked gives what a pass over every pending node gives.

Every scenario of ``test_engine`` (those without parameters) runs again with each step checked.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest

from a2amesh.errors import InvalidTransition
from a2amesh.workflow.dag import flow
from a2amesh.workflow.dag.engine import Engine, StepResult
from a2amesh.workflow.dag.state import Event, ExecutionState, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import StepContext
from a2amesh.workflow.events import NodeSucceeded, ReviewAnswered
from tests.support.enginesim import HANG, Sim, definition
from tests.unit.workflow import test_engine

SCENARIOS = [
    fn
    for name, fn in sorted(vars(test_engine).items())
    if name.startswith("test_") and inspect.isfunction(fn) and not inspect.signature(fn).parameters
]

NO_STEPS = {
    "test_execution_refuses_being_in_its_own_chain",
    "test_input_schema_rejects_before_any_node",
    "test_map_empty_list_completes_at_once",
    "test_map_max_items_and_non_list_fail",
    "test_sub_workflow_recursion_and_depth",
}
"""Scenarios that only start an execution."""


def _check_counts(state: ExecutionState) -> None:
    for run in state.nodes.values():
        if run.open_children is None:
            continue
        children = [state.nodes[c] for c in run.children]
        assert run.open_children == sum(1 for c in children if not c.final), run.path
        assert run.completed_children == sum(1 for c in children if c.status is NodeStatus.COMPLETED), run.path
        assert run.failed_children == sum(1 for c in children if c.status is NodeStatus.FAILED), run.path


@pytest.fixture
def checked_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check every ``Engine.apply``: the input is left as it was, ``touched`` names every changed node, and the
    engine's fresh instances (shared by every new execution) are as new."""
    original: Callable[..., StepResult] = Engine.apply
    steps = [0]

    def apply(self: Engine, state: ExecutionState, event: Event, now: float) -> StepResult:
        before = state.model_dump_json()
        try:
            result = original(self, state, event, now)
        finally:
            assert state.model_dump_json() == before, "the step mutated its input"
            for path, run in self.fresh_runs.items():
                assert run == NodeRun(path=path, node_id=path, type=run.type), f"fresh instance {path} changed"
        old = json.loads(before)["nodes"]
        new = json.loads(result.state.model_dump_json())["nodes"]
        changed = {p for p in new if old.get(p) != new[p]}
        assert changed <= result.touched, f"changed but not touched: {changed - result.touched}"
        _check_counts(result.state)
        steps[0] += 1
        return result

    monkeypatch.setattr(Engine, "apply", apply)
    return steps


@pytest.fixture
def full_scan_agrees(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check every ``Engine.apply`` of a node result: the same step with every pending DAG node decided again
    (``advance(incremental=False)``) gives the same state and the same commands, in the same order."""
    original_apply: Callable[..., StepResult] = Engine.apply
    original_advance = flow.advance
    compared = [0]

    def full_advance(ctx: StepContext, *, incremental: bool = False) -> None:
        original_advance(ctx, incremental=False)

    def apply(self: Engine, state: ExecutionState, event: Event, now: float) -> StepResult:
        result = original_apply(self, state, event, now)
        with monkeypatch.context() as m:
            m.setattr(flow, "advance", full_advance)
            full = original_apply(self, state, event, now)
        assert full.state.model_dump_json() == result.state.model_dump_json(), "the states differ"
        assert [c.model_dump_json() for c in full.commands] == [c.model_dump_json() for c in result.commands]
        compared[0] += 1
        return result

    monkeypatch.setattr(Engine, "apply", apply)
    return compared


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[fn.__name__ for fn in SCENARIOS])
def test_scenario_steps_decide_what_a_full_pass_decides(
    scenario: Callable[[], None], full_scan_agrees: list[int]
) -> None:
    scenario()
    assert full_scan_agrees[0] > 0 or scenario.__name__ in NO_STEPS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[fn.__name__ for fn in SCENARIOS])
def test_scenario_steps_are_pure_and_tracked(scenario: Callable[[], None], checked_steps: list[int]) -> None:
    scenario()
    assert checked_steps[0] > 0 or scenario.__name__ in NO_STEPS


MAP = """
nodes:
  - {id: each, type: map, items: "{{workflow.input.items}}", node: slow, concurrency_limit: 3}
  - {id: slow, type: agent, agent_name: slow, input: {n: "{{_map_item}}"}}
"""


def test_map_counters_survive_a_checkpoint_without_them(checked_steps: list[int]) -> None:
    """A checkpoint written before the counters existed (None) is counted once, then kept."""
    sim = Sim(definition(MAP), {"slow": lambda i: HANG})
    state = sim.start({"items": [1, 2, 3, 4, 5]})
    raw: dict[str, Any] = json.loads(state.model_dump_json())
    for record in raw["nodes"].values():
        for key in ("open_children", "completed_children", "failed_children"):
            record.pop(key)
    sim.state = ExecutionState.model_validate_json(json.dumps(raw))
    assert sim.state.nodes["each"].open_children is None
    for index in range(5):
        sim.feed(NodeSucceeded(path=f"each[{index}]", attempt=1, output=index))
    assert sim.state.status == "completed"
    assert sim.state.output == {"each": {"results": [0, 1, 2, 3, 4]}}
    assert [e.data["completed"] for e in sim.events("map.progress")] == [1, 2, 3, 4, 5]


def test_invalid_review_leaves_state_unchanged() -> None:
    """A ReviewAnswered that fits no review raises, and the state is as it was."""
    sim = Sim(definition(MAP), {"slow": lambda i: HANG})
    state = sim.start({"items": [1]})
    before = state.model_dump_json()
    with pytest.raises(InvalidTransition):
        Engine(sim.definition).step(state, ReviewAnswered(decision="approve"), sim.now)
    assert state.model_dump_json() == before


def test_step_result_shares_untouched_nodes_and_deep_copies_cleanly() -> None:
    """Untouched instances are shared (that is the point); a deep copy of a state is independent."""
    sim = Sim(definition(MAP), {"slow": lambda i: HANG})
    state = sim.start({"items": [1, 2, 3, 4]})
    result = Engine(sim.definition).apply(state, NodeSucceeded(path="each[0]", attempt=1, output=0), sim.now)
    assert {"each[0]", "each", "each[3]"} <= result.touched
    assert dict.__getitem__(result.state.nodes, "each[1]") is dict.__getitem__(state.nodes, "each[1]")
    copied = result.state.model_copy(deep=True)
    assert type(copied.nodes) is dict
    copied.nodes["each[1]"].status = NodeStatus.FAILED
    assert result.state.nodes["each[1]"].status is NodeStatus.RUNNING
    # a caller changing the returned state copies the instance first: the input is not affected
    result.state.nodes["each[1]"].reply_to = "somewhere"
    assert state.nodes["each[1]"].reply_to is None
