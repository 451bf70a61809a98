"""Executor fencing in process: a step write refused by the lease epoch is counted and logged once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from a2amesh import metrics
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.waiting import eventually, within

WORKFLOW = """
name: fenced_write
nodes:
  - {id: first, type: agent, agent_name: gate, input: {v: 1}}
  - {id: second, type: agent, agent_name: gate, depends_on: [first], input: "{{first.output}}"}
output_mapping: {out: "{{second.output}}"}
"""


def _fenced_metric() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("a2amesh_fenced_total", {"kind": "executor"}) or 0.0


async def test_a_step_write_refused_by_the_lease_epoch_is_counted_once(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """Another replica takes the execution over (its lease `other:2`) while this runner waits for a node's
    answer; the answer's step write is refused by the epoch: nothing is stored, the runner stops, and the
    replica counts it once (``fenced``, ``a2amesh_fenced_total{kind="executor"}``)."""
    pytest.importorskip("prometheus_client")
    metrics.enable()
    before = _fenced_metric()
    opened = asyncio.Event()
    gate = asyncio.Event()

    async def gated(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        opened.set()
        await gate.wait()
        return dict(input)

    await agent_host("gate", gated)
    # a long lease: its renewal (every lease_ttl/3) does not find the takeover before the step write does
    ex = await executor({"fenced_write": WORKFLOW}, settings_=settings.model_copy(update={"lease_ttl": 60.0}))
    await client.registry.wait_for("fenced_write", 10)
    call = await client.dispatch("fenced_write", make_message(data={}), timeout=60)
    await within(opened.wait(), 10, "the first node to start")
    keys = Keys(settings.namespace)
    runner = ex.runners[call.task_id]
    assert await redis.get(keys.lease(call.task_id)) == runner.token
    stored = (keys.execution_state(call.task_id), keys.execution_state_nodes(call.task_id))
    state_before = (await redis.get(stored[0]), await redis.hgetall(stored[1]))

    await redis.set(keys.lease(call.task_id), "other:2", px=60_000)  # as a takeover by another replica would
    gate.set()
    await eventually(lambda: ex.fenced == 1, timeout=10, what="the refused step write to be counted")
    assert runner.write_fenced
    assert runner.lost
    state_after = (await redis.get(stored[0]), await redis.hgetall(stored[1]))
    assert state_after == state_before, "the refused step stored nothing"
    assert _fenced_metric() == before + 1
    await eventually(lambda: call.task_id not in ex.runners, timeout=10, what="the fenced runner to end")
    assert ex.fenced == 1, "counted once per execution"
