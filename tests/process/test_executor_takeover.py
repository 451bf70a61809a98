"""Takeover with the production lease (10 s): a crashed replica's execution within 5 s, a stopped one's at once."""

from __future__ import annotations

import functools
import signal
import time
from pathlib import Path

import pytest

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.redis import Redis
from tests.process.test_executor_processes import (
    instance_of,
    tkey,
    write_behaviour_agent,
    write_definitions,
)
from tests.support.cancelling import cancel_at_once, canceled_once_at_least
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually, within

pytestmark = pytest.mark.alone  # takeover and hand-over under wall-clock bounds, a replica frozen (SIGSTOP)

PRODUCTION_LEASE = {"A2AMESH_LEASE_TTL": "10"}


def has_instance(proc: Proc) -> bool:
    return instance_of(proc) is not None


WORKFLOW = """
name: handover
nodes:
  - {id: first, type: agent, agent_name: hold, input: {v: 1}}
  - {id: second, type: agent, agent_name: tag, depends_on: [first], input: "{{first.output}}"}
output_mapping: {out: "{{second.output}}"}
"""


async def two_replicas(
    processes: ProcessFactory, client: Client, tmp_path: Path, env: dict[str, str]
) -> tuple[list[Proc], Path]:
    await processes.start("agent", str(write_behaviour_agent(tmp_path, "hold", "hold")))
    await processes.start("agent", str(write_behaviour_agent(tmp_path, "tag", "tag")))
    await eventually(
        lambda: client.registry.get("hold") is not None and client.registry.get("tag") is not None,
        timeout=20,
        what="the agents' cards",
    )
    folder = write_definitions(tmp_path / "wf", {"handover": WORKFLOW})
    procs = []
    for _ in range(2):
        proc = await processes.start("executor", str(folder), "--reload-interval", "0.2", env=env)
        await eventually(functools.partial(has_instance, proc), timeout=20, what="an executor to be ready")
        procs.append(proc)
    await eventually(lambda: client.registry.get("handover") is not None, timeout=20, what="the workflow card")
    return procs, folder


async def owner_of(redis: Redis, settings: Settings, execution_id: str) -> str:
    return str(await redis.get(f"{settings.namespace}:exec:{{{execution_id}}}:lease") or "").partition(":")[0]


async def test_crashed_replica_taken_over_before_its_lease_expires(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """SIGKILL of the driving replica with a 10 s lease: its presence lapses and the other replica takes the
    execution over within 5 s; the held node's answer is applied once and the next node runs once."""
    procs, _ = await two_replicas(processes, client, tmp_path, PRODUCTION_LEASE)
    call = await client.dispatch("handover", make_message(data={}), timeout=60)
    await eventually(lambda: redis.llen(tkey(settings, "started")), timeout=15, what="the first node to start")
    owner = await owner_of(redis, settings, call.task_id)
    victim = next(p for p in procs if instance_of(p) == owner)
    survivor = next(p for p in procs if p is not victim)
    killed = time.monotonic()
    victim.signal(signal.SIGKILL)
    await victim.wait(10)

    async def taken_over() -> bool:
        return await owner_of(redis, settings, call.task_id) == instance_of(survivor)

    await eventually(taken_over, timeout=9, what="the surviving replica to take the execution over")
    took = time.monotonic() - killed
    assert took < 5.0, f"takeover took {took:.1f}s (lease 10 s)"
    print(f"takeover {took:.2f}s after the kill")
    await redis.set(tkey(settings, "release"), "1")
    task = await within(call.result(), 30, "the final answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"out": {"released": True, "v": 1}}
    assert await redis.hgetall(tkey(settings, "runs")) == {"second": "1"}
    await eventually(
        lambda: "executor.presence_expired" in survivor.output(), timeout=5, what="the survivor to log the expiry"
    )


async def test_clean_stop_hands_over_at_once(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """SIGTERM of the driving replica (no grace): the other replica owns the execution as soon as it has
    exited, long before the 10 s lease would expire, and the stopped replica leaves no presence behind."""
    procs, _ = await two_replicas(processes, client, tmp_path, {**PRODUCTION_LEASE, "A2AMESH_SHUTDOWN_GRACE": "0"})
    call = await client.dispatch("handover", make_message(data={}), timeout=60)
    await eventually(lambda: redis.llen(tkey(settings, "started")), timeout=15, what="the first node to start")
    owner = await owner_of(redis, settings, call.task_id)
    stopping = next(p for p in procs if instance_of(p) == owner)
    survivor = next(p for p in procs if p is not stopping)
    stopping.signal(signal.SIGTERM)
    assert await stopping.wait(15) == 0, stopping.output()[-3000:]
    exited = time.monotonic()

    async def taken_over() -> bool:
        return await owner_of(redis, settings, call.task_id) == instance_of(survivor)

    await eventually(taken_over, timeout=9, what="the surviving replica to take the execution over")
    assert time.monotonic() - exited < 2.0
    assert "execution.handed_over" in stopping.output(), stopping.output()[-3000:]
    assert not await redis.zscore(f"{settings.namespace}:executors", owner)
    await redis.set(tkey(settings, "release"), "1")
    task = await within(call.result(), 30, "the final answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert await redis.hgetall(tkey(settings, "runs")) == {"second": "1"}


async def test_frozen_replica_taken_over_and_stopped_when_thawed(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """SIGSTOP of the driving replica (10 s lease): taken over once its presence lapses, within 5 s; thawed,
    it stops the runners that lived through the gap (they take no step) and the next node runs once."""
    procs, _ = await two_replicas(processes, client, tmp_path, PRODUCTION_LEASE)
    call = await client.dispatch("handover", make_message(data={}), timeout=60)
    await eventually(lambda: redis.llen(tkey(settings, "started")), timeout=15, what="the first node to start")
    owner = await owner_of(redis, settings, call.task_id)
    frozen = next(p for p in procs if instance_of(p) == owner)
    survivor = next(p for p in procs if p is not frozen)
    stopped = time.monotonic()
    frozen.signal(signal.SIGSTOP)
    try:

        async def taken_over() -> bool:
            return await owner_of(redis, settings, call.task_id) == instance_of(survivor)

        await eventually(taken_over, timeout=9, what="the surviving replica to take the execution over")
        assert time.monotonic() - stopped < 5.0
    finally:
        frozen.signal(signal.SIGCONT)
    await eventually(
        lambda: "executor.presence_lapsed" in frozen.output(), timeout=10, what="the thawed replica to stop"
    )
    await redis.set(tkey(settings, "release"), "1")
    task = await within(call.result(), 30, "the final answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert await redis.hgetall(tkey(settings, "runs")) == {"second": "1"}


async def test_cancel_of_an_execution_whose_replica_was_sigkilled_is_answered(
    settings: Settings, client: Client, redis: Redis, processes: ProcessFactory, tmp_path: Path
) -> None:
    """SIGKILL of the driving replica, then at once CancelTask: the survivor gets the cancel while the dead
    replica's lease lives, and leaves it to that holder; the takeover applies the cancel mark and answers every
    canceller (three at once, not the first alone), CANCELED, within its bound (the lifecycle model found the
    workflow CANCELED and its cancel never answered)."""
    procs, _ = await two_replicas(processes, client, tmp_path, PRODUCTION_LEASE)
    call = await client.dispatch("handover", make_message(data={}), timeout=60)
    await eventually(lambda: redis.llen(tkey(settings, "started")), timeout=15, what="the first node to start")
    owner = await owner_of(redis, settings, call.task_id)
    victim = next(p for p in procs if instance_of(p) == owner)
    victim.signal(signal.SIGKILL)
    await victim.wait(10)
    assert await owner_of(redis, settings, call.task_id) == owner, "the lease lapsed before the cancel: no race"
    answers = await cancel_at_once(client, "handover", call.task_id, 3, within_s=15)
    assert canceled_once_at_least(answers), answers
    final = await within(call.result(), 30, "the workflow's final")
    assert final.status.state == TaskState.CANCELED, final
    assert await redis.hgetall(tkey(settings, "runs")) == {}, "a node after the cancel ran"
