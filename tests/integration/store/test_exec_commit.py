"""``ExecutionStore.commit`` against Valkey: what one step writes, and what it refuses (the ``exec_commit`` script)."""

from __future__ import annotations

from typing import Any

from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.workflow.dag.state import ExecutionState, NodeRun

TOKEN = "me:1"


def _nothing(**changes: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "nodes": {},
        "events": [],
        "applied": [],
        "set_timers": {},
        "clear_timers": [],
        "fields": {},
    }
    return step | changes


async def _created(redis: Any, settings: Any, execution_id: str) -> ExecutionStore:
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=5)
    state = ExecutionState(execution_id=execution_id, workflow="wf", digest="d")
    created = await store.create(
        execution_id,
        owner="me",
        state_json=state.model_dump_json(),
        fields={"status": "running"},
        nodes={},
        events=[],
        timers={},
    )
    assert created.created
    return store


async def test_a_step_writes_records_events_timers_and_fields(redis: Any, settings: Any) -> None:
    store = await _created(redis, settings, "exec-c1")
    keys = Keys(settings.namespace)
    result = await store.commit(
        "exec-c1",
        TOKEN,
        state_json='{"x": 1}',
        **_nothing(
            nodes={"a": '{"path": "a", "status": "running"}', "b": '{"path": "b"}'},
            events=['{"event": "node.started", "seq": 1}', '{"event": "node.started", "seq": 2}'],
            applied=["a#0@1"],
            set_timers={"t1": 5_000, "t2": 3_000},
            fields={"status": "running", "finished": 1_795_807_955_181, "output": '{"w": 1}'},
        ),
    )
    assert result.ok
    assert result.detail == "3000", "the earliest timer armed is the execution's next due time"
    assert await store.state("exec-c1") == '{"x": 1}'
    assert set(await store.nodes("exec-c1")) == {"a", "b"}
    assert [e["seq"] for e in await store.events("exec-c1")] == [1, 2]
    record = await store.record("exec-c1") or {}
    assert record["finished"] == "1795807955181"
    assert record["output"] == '{"w": 1}'
    assert record["updated"].isdigit()

    # the next step disarms one timer, arms none
    result = await store.commit("exec-c1", TOKEN, state_json='{"x": 2}', **_nothing(clear_timers=["t2"]))
    assert result.ok
    assert result.detail == "5000"
    assert await redis.zrange(keys.execution_timers("exec-c1"), 0, -1) == ["t1"]


async def test_a_step_with_a_result_applied_before_is_refused_whole(redis: Any, settings: Any) -> None:
    store = await _created(redis, settings, "exec-c2")
    assert (await store.commit("exec-c2", TOKEN, state_json='{"x": 1}', **_nothing(applied=["n1#0@1"]))).ok

    again = await store.commit(
        "exec-c2",
        TOKEN,
        state_json='{"x": 2}',
        **_nothing(applied=["n2#0@1", "n1#0@1"], nodes={"n2": "{}"}, fields={"status": "failed"}),
    )
    assert (again.outcome, again.detail) == ("duplicate", "n1#0@1")
    assert await store.state("exec-c2") == '{"x": 1}', "a refused step writes nothing"
    assert await store.nodes("exec-c2") == {}
    assert (await store.record("exec-c2") or {})["status"] == "running"
    assert not await redis.sismember(Keys(settings.namespace).execution_applied("exec-c2"), "n2#0@1")


async def test_a_writer_without_the_lease_is_refused(redis: Any, settings: Any) -> None:
    store = await _created(redis, settings, "exec-c3")
    stale = await store.commit("exec-c3", "other:7", state_json='{"x": 9}', **_nothing())
    assert (stale.outcome, stale.detail) == ("stale", TOKEN)
    assert await store.state("exec-c3") != '{"x": 9}'


async def test_a_large_reset_holds_every_instance_in_order(redis: Any, settings: Any) -> None:
    """A reset of 3,001 split instances (a wide map's state) reads back whole and in order."""
    store = await _created(redis, settings, "exec-c4")
    paths = [f"m[{i}]" for i in range(3_001)]
    state = ExecutionState(
        execution_id="exec-c4",
        workflow="wf",
        digest="d",
        nodes={p: NodeRun(path=p, node_id="m", type="agent") for p in paths},
    )
    head = state.model_dump_json(exclude={"nodes"})[:-1] + ',"nodes":null}'
    instances = {p: f"{i} {state.nodes[p].model_dump_json()}" for i, p in enumerate(paths)}
    result = await store.commit(
        "exec-c4", TOKEN, state_json=head, state_nodes=instances, reset_state_nodes=True, **_nothing()
    )
    assert result.ok
    restored = ExecutionState.model_validate_json(await store.state("exec-c4") or "")
    assert list(restored.nodes) == paths
    assert restored == state
