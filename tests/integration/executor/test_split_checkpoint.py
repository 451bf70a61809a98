"""Split state checkpoints in Valkey: a step writes the state without its nodes and outputs, plus the instances
and outputs it changed."""

from __future__ import annotations

import asyncio
from typing import Any

from a2amesh.client import Client, make_message
from a2amesh.protocol import TaskState
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.workflow.dag.state import ExecutionState, NodeRun, NodeStatus
from a2amesh.workflow.events import ExecutionStatus
from tests.support.waiting import eventually, within

NOTHING_ELSE: dict[str, Any] = {
    "nodes": {},
    "events": [],
    "applied": [],
    "set_timers": {},
    "clear_timers": [],
    "fields": {},
}
"""The rest of a commit that writes only the checkpoint."""


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
    common = dict(NOTHING_ELSE)
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


async def test_split_outputs_reset_whole_and_retention(redis: Any, settings: Any) -> None:
    """The outputs hash: deltas reassemble in order, a reset drops stale outputs, a whole state drops the hash,
    and a finishing step gives it the execution's retention like every other key."""
    keys = Keys(settings.namespace)
    store = ExecutionStore(redis, keys, retention=60, lease_ttl=5)
    state = _state("a", "b")
    state.outputs = {"a": {"v": 1}}
    created = await store.create(
        "exec-out", owner="me", state_json=state.model_dump_json(), fields={}, nodes={}, events=[], timers={}
    )
    assert created.created
    common = dict(NOTHING_ELSE)

    def split(state: ExecutionState) -> tuple[str, dict[str, str]]:
        head = state.model_dump_json(exclude={"nodes", "outputs"})[:-1] + ',"nodes":null,"outputs":null}'
        return head, {p: f"{i} {run.model_dump_json()}" for i, (p, run) in enumerate(state.nodes.items())}

    async def commit(state: ExecutionState, outputs: dict[str, str], reset: bool, **extra: Any) -> None:
        head, records = split(state)
        result = await store.commit(
            "exec-out",
            "me:1",
            state_json=head,
            state_nodes=records,
            reset_state_nodes=True,
            state_outputs=outputs,
            reset_state_outputs=reset,
            **{**common, **extra},
        )
        assert result.ok

    async def read() -> ExecutionState:
        return ExecutionState.model_validate_json(await store.state("exec-out") or "")

    await commit(state, {"a": '0 {"v":1}'}, True)
    assert await read() == state
    state.outputs = {"a": {"v": 1}, "b": [2], "c": "three"}
    await commit(state, {"b": "1 [2]", "c": '2 "three"'}, False)
    state.outputs["a"] = {"v": 4}
    await commit(state, {"a": '0 {"v":4}'}, False)
    restored = await read()
    assert restored == state
    assert list(restored.outputs) == ["a", "b", "c"]

    state.outputs = {"c": "three"}
    await commit(state, {"c": '0 "three"'}, True)
    assert await redis.hkeys(keys.execution_state_outputs("exec-out")) == ["c"]
    assert await read() == state

    whole = _state("x")
    whole.outputs = {"x": 1}
    assert (await store.commit("exec-out", "me:1", state_json=whole.model_dump_json(), **common)).ok
    assert not await redis.exists(keys.execution_state_outputs("exec-out"))
    assert await read() == whole

    state.status = ExecutionStatus.COMPLETED
    await commit(state, {"c": '0 "three"'}, True, final_status="completed", fields={"status": "completed"})
    assert 0 < await redis.ttl(keys.execution_state_outputs("exec-out")) <= 60
    assert 0 < await redis.ttl(keys.execution_state_nodes("exec-out")) <= 60
    assert await read() == state


async def _gated(input: Any, ctx: Any) -> Any:
    await GATE.wait()
    return {"done": input}


GATE = asyncio.Event()

OUTPUTS_WORKFLOW = """
name: outs
nodes:
  - {id: a, type: agent, agent_name: bump, input: {n: "{{workflow.input.n}}"}}
  - {id: poll, type: loop, node: check, depends_on: [a], condition: "{{check.output.n}} < 3", max_iterations: 5}
  - {id: check, type: agent, agent_name: bump, input: {n: "{{_loop_iteration}}"}}
  - {id: b, type: agent, agent_name: bump, depends_on: [poll], input: {n: "{{check.output.n}}"}}
  - {id: last, type: agent, agent_name: gated, depends_on: [b], input: "{{b.output.n}}"}
output_mapping: {a: "{{a.output.n}}", check: "{{check.output.n}}", b: "{{b.output.n}}", last: "{{last.output}}"}
"""


async def test_a_running_execution_reads_back_and_resumes_from_split_outputs(
    agent_host: Any, executor: Any, client: Client, redis: Any, settings: Any
) -> None:
    """After a chain and a loop (whose target's output is replaced each iteration), the state read back from
    Valkey is the runner's, its outputs kept apart from the state; a replica taking the execution over
    finishes it from that state."""
    GATE.clear()

    async def bump(input: Any, ctx: Any) -> Any:
        return {"n": input["n"] + 1, "pad": "p" * 2000}  # outputs the state written each step would repeat

    await agent_host("bump", bump)
    await agent_host("gated", _gated)
    first = await executor({"outs": OUTPUTS_WORKFLOW})
    await client.registry.wait_for("outs", 5)
    call = await client.dispatch("outs", make_message(data={"n": 0}), stream=True)
    execution_id = call.task_id

    def waiting_on_last() -> bool:
        runner = first.runners.get(execution_id)
        return runner is not None and runner.state.nodes.get("last") is not None and "b" in runner.state.outputs

    await eventually(waiting_on_last, timeout=10, what="node last to start")
    runner = first.runners[execution_id]
    keys = Keys(settings.namespace)
    store = ExecutionStore(redis, keys, retention=60, lease_ttl=5)
    restored = ExecutionState.model_validate_json(await store.state(execution_id) or "")
    assert restored == runner.state
    assert list(restored.outputs) == ["a", "check", "poll", "b"]
    assert restored.outputs["check"] == {"n": 3, "pad": "p" * 2000}
    head = await redis.get(keys.execution_state(execution_id))
    assert head.endswith(',"nodes":null,"outputs":null}')
    assert "p" * 2000 not in head
    assert sorted(await redis.hkeys(keys.execution_state_outputs(execution_id))) == ["a", "b", "check", "poll"]

    # a frozen owner: its lease renewals and runner stop without releasing the lease
    first.background.cancel()
    first.drivers.tasks[execution_id].cancel()
    second = await executor({"outs": OUTPUTS_WORKFLOW})
    await eventually(lambda: execution_id in second.runners, timeout=8, what="the takeover")
    taken = second.runners[execution_id].state  # read back, then maybe stepped (the call re-sent): same outputs
    assert taken.outputs == restored.outputs
    assert list(taken.outputs) == list(restored.outputs)
    GATE.set()
    final = await within(call.result(), 10, "the final answer after the takeover")
    assert final.status.state == TaskState.COMPLETED
    assert final.output() == {"a": 1, "check": 3, "b": 4, "last": {"done": 4}}
