"""Executor presence in process: a replica whose presence may have lapsed stops its runners and hands over."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.redis import Redis
from tests.support.waiting import eventually, within

WORKFLOW = """
name: fenced
nodes:
  - {id: first, type: agent, agent_name: gate, input: {v: 1}}
  - {id: second, type: agent, agent_name: count, depends_on: [first], input: "{{first.output}}"}
output_mapping: {out: "{{second.output}}"}
"""


async def test_lapsed_presence_stops_the_runners_and_hands_over_at_once(
    agent_host: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """With the production lease (10 s), a presence that may have lapsed (a renewal landing after its
    margin) stops the runner before it steps again; its lease is handed over at once and taken back
    (epoch 2) long before it would expire; the call in flight is followed, and each node runs once."""
    opened = asyncio.Event()
    gate = asyncio.Event()
    runs: Counter[str] = Counter()

    async def gated(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        runs["first"] += 1
        opened.set()
        await gate.wait()
        return dict(input)

    async def count(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        runs["second"] += 1
        return dict(input)

    await agent_host("gate", gated)
    await agent_host("count", count)
    ex = await executor({"fenced": WORKFLOW}, settings_=settings.model_copy(update={"lease_ttl": 10.0}))
    await client.registry.wait_for("fenced", 10)
    call = await client.dispatch("fenced", make_message(data={}), timeout=60)
    await within(opened.wait(), 10, "the first node to start")
    exec_key = f"{settings.namespace}:exec:{{{call.task_id}}}"
    assert await redis.hget(exec_key, "epoch") == "1"
    runner = ex.runners[call.task_id]

    ex.presence._valid_until = 0.0  # as if the last renewal had landed too late: the next one finds a gap
    await eventually(lambda: runner.fenced, timeout=5, what="the runner to be stopped")

    async def taken_back() -> bool:
        return await redis.hget(exec_key, "epoch") == "2"

    await eventually(taken_back, timeout=4, what="the execution to be taken over (epoch 2) before the 10 s lease")
    # the lease is taken (epoch 2) a few round trips before the new runner is launched: its state read first
    await eventually(
        lambda: ex.runners.get(call.task_id) not in (None, runner), timeout=4, what="the new runner to be launched"
    )
    gate.set()
    task = await within(call.result(), 20, "the final answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"out": {"v": 1}}
    assert runs == Counter({"first": 1, "second": 1})
