"""Split state checkpoints in Valkey: a step writes the state without its nodes plus the instances it changed."""

from __future__ import annotations

from typing import Any

from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.workflow.dag.state import ExecutionState, NodeRun, NodeStatus


def _state(*paths: str) -> ExecutionState:
    return ExecutionState(
        execution_id="exec-split",
        workflow="wf",
        digest="d",
        nodes={p: NodeRun(path=p, node_id=p.split("[")[0], type="agent") for p in paths},
    )


def _split(state: ExecutionState, positions: dict[str, int], *paths: str) -> tuple[str, dict[str, str]]:
    head = state.model_dump_json(exclude={"nodes"})[:-1] + ',"nodes":null}'
    return head, {p: f"{positions[p]} {state.nodes[p].model_dump_json()}" for p in paths}


async def test_split_commits_reassemble_in_order(redis: Any, settings: Any) -> None:
    """A reset then deltas rebuild the state, nodes in their order; a whole state written later wins."""
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=5)
    state = _state("m", "m[0]", "m[1]")
    created = await store.create(
        "exec-split",
        owner="me",
        state_json=state.model_dump_json(),
        fields={"status": "running"},
        nodes={},
        events=[],
        timers={},
    )
    assert created.created
    token = "me:1"
    common: dict[str, Any] = {
        "nodes": {},
        "events": [],
        "applied": [],
        "set_timers": {},
        "clear_timers": [],
        "fields": {},
    }
    positions = {"m": 0, "m[0]": 1, "m[1]": 2}
    head, records = _split(state, positions, "m", "m[0]", "m[1]")
    result = await store.commit(
        "exec-split", token, state_json=head, state_nodes=records, reset_state_nodes=True, **common
    )
    assert result.ok
    assert ExecutionState.model_validate_json(await store.state("exec-split") or "") == state

    # a step completes m[0] and adds m[2] (the other instances are not written)
    state.nodes["m[0]"].status = NodeStatus.COMPLETED
    state.nodes["m[2]"] = NodeRun(path="m[2]", node_id="m", type="agent", parent="m")
    state.seq = 7
    positions["m[2]"] = 3
    head, records = _split(state, positions, "m[0]", "m[2]")
    assert (await store.commit("exec-split", token, state_json=head, state_nodes=records, **common)).ok
    restored = ExecutionState.model_validate_json(await store.state("exec-split") or "")
    assert restored == state
    assert list(restored.nodes) == ["m", "m[0]", "m[1]", "m[2]"]

    # a whole state (a runner that does not split) replaces the split one
    whole = _state("x")
    assert (await store.commit("exec-split", token, state_json=whole.model_dump_json(), **common)).ok
    assert ExecutionState.model_validate_json(await store.state("exec-split") or "") == whole
    assert not await redis.exists(Keys(settings.namespace).execution_state_nodes("exec-split"))

    # a split state without nodes (nothing in the hash) still reads back
    empty = _state()
    head, records = _split(empty, {})
    assert (
        await store.commit("exec-split", token, state_json=head, state_nodes=records, reset_state_nodes=True, **common)
    ).ok
    assert ExecutionState.model_validate_json(await store.state("exec-split") or "") == empty
