"""The DAG state's ``outputs`` in a split checkpoint: a step writes only the outputs it changed, each with its
place, a reset writes them all, and the parts read back (``assemble_state``) as the engine's state.

Every scenario of ``test_engine`` (those without parameters) runs again with each step written to a model of
the store's hashes (the ``exec_commit`` script's rules) and read back.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.crc import key_slot

from a2amesh.access import EXECUTOR, redis_key_patterns
from a2amesh.store.executions import assemble_state
from a2amesh.store.keys import Keys
from a2amesh.workflow.dag import checkpoint
from a2amesh.workflow.dag.engine import Engine, StepResult
from a2amesh.workflow.dag.state import Event, ExecutionState, NodeRun, NodeStatus
from a2amesh.workflow.engine_protocol import StateWrite
from a2amesh.workflow.events import NodeSucceeded
from tests.support.enginesim import definition
from tests.unit.workflow import test_engine
from tests.unit.workflow.test_engine_cow import NO_STEPS, SCENARIOS


@dataclass
class Stored:
    """The ``state``, ``state_nodes`` and ``state_outputs`` keys as ``exec_commit`` leaves them."""

    head: str = ""
    nodes: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    def write(self, write: StateWrite) -> Stored:
        """The keys after ``write`` (a new object: a state may be stepped from twice)."""
        after = Stored(write.state_json, dict(self.nodes), dict(self.outputs))
        parts = ((after.nodes, write.nodes, write.reset), (after.outputs, write.outputs, write.outputs_reset))
        for part, entries, reset in parts:
            if entries is None or reset:
                part.clear()
            part.update(entries or {})
        return after

    def read(self) -> ExecutionState:
        return ExecutionState.model_validate_json(assemble_state(self.head, self.nodes, self.outputs))


def _same(restored: ExecutionState, state: ExecutionState) -> None:
    assert restored == state
    assert list(restored.nodes) == list(state.nodes)
    assert list(restored.outputs) == list(state.outputs)


@dataclass
class Writes:
    """What the scenarios' steps wrote."""

    steps: int = 0
    deltas: int = 0
    outputs_written: int = 0
    replaced: int = 0


RECORD_EXCLUDE = checkpoint._RECORD_EXCLUDE
"""The container bookkeeping a node record leaves out."""


@pytest.fixture
def written_steps(monkeypatch: pytest.MonkeyPatch) -> Writes:
    """Write every ``Engine.apply`` after the state it stepped from and check the parts read back as its state."""
    original: Callable[..., StepResult] = Engine.apply
    stores: dict[int, tuple[ExecutionState, Stored, dict[str, int] | None]] = {}
    writes = Writes()

    def apply(self: Engine, state: ExecutionState, event: Event, now: float) -> StepResult:
        result = original(self, state, event, now)
        known = stores.get(id(state))
        stored, positions = (known[1], known[2]) if known is not None and known[0] is state else (Stored(), None)
        records = checkpoint.node_records(state, result.state, result.touched)
        positions = None if positions is None else dict(positions)
        write = checkpoint.state_write(state, result.state, result.touched, positions)
        assert write.outputs is not None
        assert write.nodes is not None
        # written by orjson: the same bytes pydantic writes
        for path, record in records.items():
            assert record == result.state.nodes[path].model_dump_json(exclude=RECORD_EXCLUDE)
        for path, entry in write.nodes.items():
            assert entry.split(" ", 1)[1] == result.state.nodes[path].model_dump_json()
        head = result.state.model_dump_json(exclude={"nodes", "outputs"})
        assert write.state_json == head[:-1] + ',"nodes":null,"outputs":null}'
        after = stored.write(write)
        _same(after.read(), result.state)
        writes.steps += 1
        if not write.outputs_reset:
            writes.deltas += 1
            writes.outputs_written += len(write.outputs)
            writes.replaced += sum(1 for key in write.outputs if key in state.outputs)
            assert len(write.outputs) <= len(result.state.outputs)
        stores[id(result.state)] = (result.state, after, write.positions)
        return result

    monkeypatch.setattr(Engine, "apply", apply)
    return writes


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[fn.__name__ for fn in SCENARIOS])
def test_scenario_steps_read_back_from_split_writes(scenario: Callable[[], None], written_steps: Writes) -> None:
    scenario()
    assert written_steps.steps > 0 or scenario.__name__ in NO_STEPS


def test_the_scenarios_write_deltas_and_replace_outputs(written_steps: Writes) -> None:
    """The loop scenarios replace an output in place (the loop target's, every iteration) without a reset."""
    test_engine.test_loop_until_condition_false_with_delay()
    assert written_steps.deltas > 0
    assert written_steps.replaced > 0


CHAIN = """
nodes:
  - {id: a, type: agent, agent_name: echo, input: "{{workflow.input}}"}
  - {id: b, type: agent, agent_name: echo, input: "{{a.output}}", depends_on: [a]}
  - {id: c, type: agent, agent_name: echo, input: "{{b.output}}", depends_on: [b]}
"""


def test_a_chain_step_writes_only_the_output_it_added() -> None:
    """Each step of a chain writes one output, at its place; the head holds none of the earlier ones."""
    engine = Engine(definition(CHAIN))
    state, _ = engine.start(execution_id="e1", input={"pad": "x" * 100}, now=1.0)
    first = checkpoint.state_write(state, state, None, None)
    assert first.reset
    assert first.outputs_reset
    assert first.outputs == {}
    stored = Stored().write(first)
    positions = first.positions
    for index, path in enumerate(["a", "b", "c"]):
        step = engine.apply(state, NodeSucceeded(path=path, attempt=1, output={"n": index, "pad": "y" * 100}), 2.0)
        write = checkpoint.state_write(state, step.state, step.touched, positions)
        assert not write.reset
        assert not write.outputs_reset
        assert write.outputs == {path: f'{index} {{"n":{index},"pad":"{"y" * 100}"}}'}
        assert write.state_json.endswith(',"nodes":null,"outputs":null}')
        assert not any(f'"n":{earlier},' in write.state_json for earlier in range(index))
        stored = stored.write(write)
        _same(stored.read(), step.state)
        state, positions = step.state, write.positions
    assert state.finished
    assert list(stored.outputs) == ["a", "b", "c"]


def _state(outputs: dict[str, Any], *paths: str) -> ExecutionState:
    nodes = {p: NodeRun(path=p, node_id=p, type="agent", status=NodeStatus.COMPLETED) for p in paths}
    return ExecutionState(execution_id="e1", workflow="wf", digest="d", nodes=nodes, outputs=outputs)


def test_an_equal_output_is_not_written_and_a_replaced_one_keeps_its_place() -> None:
    old = _state({"a": {"x": 1}, "b": [1, 2]}, "a", "b")
    positions = {"a": 0, "b": 1}
    same = old.model_copy(update={"outputs": {"a": {"x": 1}, "b": [1, 2]}})  # equal values, other objects
    assert checkpoint.state_write(old, same, set(), dict(positions)).outputs == {}
    replaced = old.model_copy(update={"outputs": {"a": {"x": 2}, "b": old.outputs["b"], "c": None}})
    write = checkpoint.state_write(old, replaced, set(), dict(positions))
    assert not write.outputs_reset
    assert write.outputs == {"a": '0 {"x":2}', "c": "2 null"}


def test_a_removed_or_reordered_output_writes_everything_again() -> None:
    """A step that did more than replace and append outputs writes them all again (stale entries are dropped);
    the nodes' part is not reset for it."""
    old = _state({"a": 1, "b": 2}, "a", "b")
    positions = {"a": 0, "b": 1}
    stored = Stored().write(checkpoint.state_write(old, old, None, None))
    for outputs in ({"a": 1}, {"b": 2, "a": 1}, {"a": 1, "c": 3}):
        new = old.model_copy(update={"outputs": outputs})
        write = checkpoint.state_write(old, new, set(), dict(positions))
        assert write.outputs_reset
        assert not write.reset
        assert write.outputs is not None
        assert write.nodes == {}
        assert set(write.outputs) == set(outputs)
        after = stored.write(write)
        assert set(after.outputs) == set(outputs)
        _same(after.read(), new)


def test_no_positions_writes_every_output() -> None:
    state = _state({"a": 1, "b": {"deep": ["é"]}}, "a")
    write = checkpoint.state_write(state, state, set(), None)
    assert write.reset
    assert write.outputs_reset
    assert write.outputs == {"a": "0 1", "b": '1 {"deep":["é"]}'}


def test_assemble_state_reads_whole_states_and_older_split_ones() -> None:
    """A whole state is read as written; a split checkpoint of a version that split only the nodes (its
    outputs in the state) is put back together, and an empty part reads as empty."""
    state = _state({"a": {"x": 1}}, "a", "b")
    whole = state.model_dump_json()
    assert assemble_state(whole, {}, {}) == whole
    nodes_only = state.model_dump_json(exclude={"nodes"})[:-1] + ',"nodes":null}'
    entries = {p: f"{i} {run.model_dump_json()}" for i, (p, run) in enumerate(state.nodes.items())}
    _same(ExecutionState.model_validate_json(assemble_state(nodes_only, entries, {"stale": '0 "x"'})), state)
    empty = _state({})
    head = empty.model_dump_json(exclude={"nodes", "outputs"})[:-1] + ',"nodes":null,"outputs":null}'
    _same(ExecutionState.model_validate_json(assemble_state(head, {}, {})), empty)
    graph_like = json.dumps({"execution_id": "g", "finished_at": None})
    assert assemble_state(graph_like, {}, {}) == graph_like


def test_the_outputs_key_shares_the_execution_slot_and_acl() -> None:
    """``state_outputs`` carries the execution's hash tag (one slot with the keys ``exec_commit`` takes) and
    the executor's ACL patterns cover it, an agent's do not."""
    keys = Keys("ns")
    key = keys.execution_state_outputs("e1")
    assert key_slot(key.encode()) == key_slot(keys.execution_state("e1").encode())
    assert any(fnmatch.fnmatchcase(key, p) for p in redis_key_patterns("ns", EXECUTOR))
    assert not any(fnmatch.fnmatchcase(key, p) for p in redis_key_patterns("ns", "alpha"))
