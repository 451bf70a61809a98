"""The split checkpoint of a DAG state: an instance's state entry made from its node record is the instance."""

from __future__ import annotations

import json

from a2amesh.workflow.dag.checkpoint import node_records, state_write
from a2amesh.workflow.dag.state import ExecutionState, NodeRun, NodeStatus


def state(nodes: list[NodeRun]) -> ExecutionState:
    return ExecutionState(
        execution_id="e1", workflow="wf", digest="d", nodes={run.path: run for run in nodes}, outputs={"a": {"x": 1}}
    )


def test_entries_reuse_records_and_stay_whole_instances() -> None:
    """Every written entry reads back as the instance it was written from, whether it was built from the step's
    node record (an agent call: bookkeeping at its defaults) or serialised whole (a map with items and children)."""
    agent = NodeRun(path="a", node_id="a", type="agent", status=NodeStatus.COMPLETED, attempt=1, output={"x": 1})
    running = NodeRun(path="b", node_id="b", type="agent", status=NodeStatus.RUNNING, attempt=2, input=[1, "é"])
    fan = NodeRun(path="m", node_id="m", type="map", status=NodeStatus.RUNNING, items=[1, 2], launched=2)
    fan = fan.model_copy(update={"children": ["m[0]", "m[1]"], "open_children": 2})
    old = state([])
    new = state([agent, running, fan])
    records = node_records(old, new, None)
    assert set(records) == {"a", "b", "m"}
    assert "items" not in json.loads(records["m"])
    with_records = state_write(old, new, None, None, records)
    without = state_write(old, new, None, None)
    assert with_records.reset
    assert with_records.nodes is not None
    assert without.nodes is not None
    assert with_records.positions == {"a": 0, "b": 1, "m": 2}
    for path, run in new.nodes.items():
        ordinal, text = with_records.nodes[path].split(" ", 1)
        assert int(ordinal) == with_records.positions[path]
        assert NodeRun.model_validate_json(text) == run
        assert json.loads(text) == json.loads(without.nodes[path].split(" ", 1)[1])
    assert with_records.state_json == without.state_json
