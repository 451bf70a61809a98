"""The split checkpoint of a DAG state: records, entries and the head are the bytes pydantic writes for them."""

from __future__ import annotations

import json
import random
import struct
from typing import Any

from a2amesh.workflow.dag import checkpoint
from a2amesh.workflow.dag.checkpoint import node_record, node_records, state_json, state_write
from a2amesh.workflow.dag.state import ExecutionState, NodeRun, NodeStatus
from a2amesh.workflow.dag.step import Nodes
from a2amesh.workflow.events import ExecutionStatus

RECORD_EXCLUDE = checkpoint._RECORD_EXCLUDE
"""The container bookkeeping a node record leaves out."""


def state(nodes: list[NodeRun], **fields: Any) -> ExecutionState:
    return ExecutionState(
        execution_id="e1",
        workflow="wf",
        digest="d",
        nodes={run.path: run for run in nodes},
        outputs={"a": {"x": 1}},
        **fields,
    )


def instances() -> list[NodeRun]:
    agent = NodeRun(
        path="a",
        node_id="a",
        type="agent",
        status=NodeStatus.COMPLETED,
        attempt=1,
        output={"x": 1, "f": 0.1 + 0.2, "big": 2**63, "s": "é\u2028\x00</"},
        started_at=1764270000.123456,
        finished_at=1e16,
        usage={"input_tokens": 3},
    )
    running = NodeRun(path="b", node_id="b", type="agent", status=NodeStatus.RUNNING, attempt=2, input=[1, "é", None])
    fan = NodeRun(path="m", node_id="m", type="map", status=NodeStatus.RUNNING, items=[1, 2], launched=2)
    fan = fan.model_copy(update={"children": ["m[0]", "m[1]"], "open_children": 2})
    failed = NodeRun(path="f", node_id="f", type="agent", status=NodeStatus.FAILED, error="boom", error_kind="error")
    return [agent, running, fan, failed]


def test_records_and_entries_are_what_pydantic_writes() -> None:
    """Every written entry is the instance's ``model_dump_json``, every record the same without the container
    bookkeeping, and the head the state's without ``nodes`` and ``outputs`` (then both as null)."""
    old = state([])
    new = state(instances(), status=ExecutionStatus.RUNNING, timers={"t": 5.5}, usage={"x": 1}, deadline=7.25)
    records = node_records(old, new, None)
    assert set(records) == {"a", "b", "m", "f"}
    write = state_write(old, new, None, None)
    assert write.reset
    assert write.nodes is not None
    assert write.positions == {"a": 0, "b": 1, "m": 2, "f": 3}
    for path, run in new.nodes.items():
        assert records[path] == run.model_dump_json(exclude=RECORD_EXCLUDE)
        ordinal, text = write.nodes[path].split(" ", 1)
        assert int(ordinal) == write.positions[path]
        assert text == run.model_dump_json()
        assert NodeRun.model_validate_json(text) == run
    head = new.model_dump_json(exclude={"nodes", "outputs"})
    assert write.state_json == head[:-1] + ',"nodes":null,"outputs":null}'


def test_floats_are_written_as_pydantic_writes_them() -> None:
    """orjson and pydantic-core agree on every float (shortest round-trip form): random bit patterns and scales."""
    rng = random.Random(27)
    for _ in range(2000):
        value = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        scaled = rng.random() * 10 ** rng.randint(-10, 25)
        run = NodeRun(path="p", node_id="p", type="agent", output=[value, scaled], started_at=scaled)
        assert node_record(run) == run.model_dump_json(exclude=RECORD_EXCLUDE)


def test_values_orjson_refuses_fall_back_to_pydantic() -> None:
    """An output orjson does not take (an int beyond 64 bits, non-string keys, bytes) is written by pydantic."""
    for output in ({"n": 2**70}, {1: "a"}, b"raw"):
        run = NodeRun(path="p", node_id="p", type="agent", output=output)
        assert node_record(run) == run.model_dump_json(exclude=RECORD_EXCLUDE)
        write = state_write(state([]), state([run], input={"n": 2**70}), None, None)
        assert write.nodes is not None
        assert write.nodes["p"] == f"0 {run.model_dump_json()}"


def test_changed_instances_only() -> None:
    """A step's records are the instances it changed: a copy with equal fields is not a change."""
    runs = instances()
    old = state(runs)
    same = runs[1].model_copy()
    changed = runs[0].model_copy(update={"attempt": 2})
    new = state([changed, same, *runs[2:]])
    assert set(node_records(old, new, None)) == {"a"}
    assert set(node_records(old, new, ["a", "b"])) == {"a"}
    added = NodeRun(path="n", node_id="n", type="agent")
    assert set(node_records(old, state([*runs, added]), ["n"])) == {"n"}
    assert json.loads(node_records(old, new, None)["a"])["attempt"] == 2


def test_whole_state_is_what_pydantic_writes() -> None:
    """An execution's first write: the whole state, nodes as the engine's copy-on-write dict, or with an
    output orjson refuses (then pydantic writes it)."""
    whole = state(instances(), timers={"t": 5.5})
    assert state_json(whole) == whole.model_dump_json()
    whole.__dict__["nodes"] = Nodes(whole.nodes)
    assert state_json(whole) == whole.model_dump_json()
    odd = state([NodeRun(path="p", node_id="p", type="agent", output={1: b"raw"})])
    assert state_json(odd) == odd.model_dump_json()


def test_own_is_the_steps_copy_and_never_a_shared_instance() -> None:
    """``Nodes.own`` (the executor records reply subjects with it after a step) hands out the step's own copy of an
    instance the step touched, and a fresh copy of one it did not: the state stepped from is never changed."""
    a = NodeRun(path="a", node_id="a", type="agent")
    b = NodeRun(path="b", node_id="b", type="agent")
    before = Nodes({"a": a, "b": b})
    after = Nodes(before)
    after["a"].status = NodeStatus.RUNNING  # the step's copy
    assert after.seal() == {"a"}
    own_a = after.own("a")
    assert own_a is dict.__getitem__(after, "a")
    assert own_a is not a
    own_b = after.own("b")
    assert own_b is not b
    own_a.reply_to = own_b.reply_to = "reply.x"
    assert a.reply_to is None
    assert b.reply_to is None
    assert after.own("a") is own_a
