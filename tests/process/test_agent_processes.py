"""Agents as separate OS processes: replicas, SIGKILL, redelivery, poison messages, cards, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any, cast

import pytest
from nats.js.api import ConsumerInfo

from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import TaskState, codes
from a2amesh.store.redis import Redis
from tests.support.processes import ProcessFactory, write_agent
from tests.support.waiting import eventually, within


async def presence_count(bus: Bus, agent: str) -> int:
    kv = await bus.kv(bus.subjects.presence_bucket)
    return len([k for k in await kv.keys() if k.startswith(f"{agent}.")])


async def start_replicas(processes: ProcessFactory, bus: Bus, path: Path, agent: str, n: int) -> list[Any]:
    procs = [await processes.start("agent", str(path)) for _ in range(n)]

    async def all_present() -> bool:
        dead = [p for p in procs if p.returncode is not None]
        assert not dead, f"agent process exited: {dead[0].output()[-2000:]}"
        return await presence_count(bus, agent) >= n

    await eventually(all_present, timeout=20, what=f"{n} replicas of {agent} to be present")
    return procs


def key(settings: Settings, *parts: str) -> str:
    return ":".join([settings.namespace, "test", *parts])


async def test_two_replicas_share_100_tasks_exactly_once(
    processes: ProcessFactory, bus: Bus, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """Two replicas of one agent split 100 tasks: each task done exactly once, each replica took at least 30."""
    path = write_agent(tmp_path, "counter", "count", max_concurrency=8)
    await start_replicas(processes, bus, path, "counter", 2)
    calls = [await client.dispatch("counter", make_message(data={"i": i, "sleep": 0.03})) for i in range(100)]
    tasks = await within(asyncio.gather(*(c.result() for c in calls)), 60, "100 tasks to finish")
    assert all(t.status.state == TaskState.COMPLETED for t in tasks)
    done = await redis.hgetall(key(settings, "done"))
    assert len(done) == 100
    assert set(done.values()) == {"1"}, "a task ran more than once"
    by_pid = {pid: int(n) for pid, n in (await redis.hgetall(key(settings, "by_pid"))).items()}
    assert len(by_pid) == 2
    assert min(by_pid.values()) >= 30, f"uneven split: {by_pid}"


async def test_sigkill_mid_task_redelivers_to_other_replica(
    processes: ProcessFactory, bus: Bus, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """A replica SIGKILLed mid-task: exactly one final result reaches the caller, with A2A-Attempt 2, within 10 s."""
    path = write_agent(tmp_path, "slowpoke", "slow_first")
    procs = await start_replicas(processes, bus, path, "slowpoke", 2)
    call = await client.dispatch("slowpoke", make_message(data={}))
    started = cast(  # decode_responses: strs
        list[str],
        await eventually(lambda: redis.lrange(key(settings, "started"), 0, -1), timeout=10, what="task start"),
    )
    pid = int(started[0].split(":")[0])
    victim = next(p for p in procs if p.pid == pid)
    victim.signal(signal.SIGKILL)
    task = await within(call.result(), 10, "the final result after the kill")
    assert task.status.state == TaskState.COMPLETED
    assert call.attempt == 2
    assert task.output()["attempt"] == 2
    assert task.output()["pid"] != pid
    assert await redis.hgetall(key(settings, "done")) == {call.task_id: "1"}


async def test_same_message_id_twice_runs_once(
    processes: ProcessFactory, bus: Bus, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """The same request published twice (same messageId) runs once, and both callers get the result."""
    path = write_agent(tmp_path, "once", "count")
    await start_replicas(processes, bus, path, "once", 1)
    other = Client(bus, settings)
    await other.start()
    try:
        msg = make_message(data={"sleep": 0.5})
        first = await client.dispatch("once", msg)
        second = await other.dispatch("once", msg)
        t1, t2 = await within(asyncio.gather(first.result(), second.result()), 15, "both callers' results")
    finally:
        await other.close()
    assert t1.id == t2.id
    assert t1.output() == t2.output() == {"n": 1, "pid": t1.output()["pid"]}
    assert await redis.hgetall(key(settings, "done")) == {msg.message_id: "1"}


async def test_poison_message_answered_max_deliveries(
    processes: ProcessFactory, bus: Bus, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """A task that crashes its agent every time is answered MAX_DELIVERIES after max_deliver and not redelivered."""
    path = write_agent(tmp_path, "poison", "crash")
    await start_replicas(processes, bus, path, "poison", 1)
    call = await client.dispatch("poison", make_message(data={}), timeout=90)
    result: asyncio.Task[Any] = asyncio.create_task(call.result())
    restarts = 0
    while not result.done():
        alive = [p for p in processes.procs if p.returncode is None]
        if not alive:
            restarts += 1
            assert restarts < settings.max_deliver + 2, "the poison message kept being delivered"
            await processes.start("agent", str(path))
        await asyncio.wait({result}, timeout=0.2)
    with pytest.raises(TransportError) as e:
        result.result()
    assert e.value.reason == codes.MAX_DELIVERIES
    started = await redis.lrange(key(settings, "started"), 0, -1)
    assert len(started) == settings.max_deliver - 1, started

    async def settled() -> bool:
        info: ConsumerInfo = await bus.jsm.consumer_info(bus.subjects.tasks_stream, "poison")
        return info.num_pending == 0 and info.num_ack_pending == 0

    await eventually(settled, timeout=5, what="the poison message to be terminated")


async def test_card_lifecycle_across_kill_and_clean_stops(
    processes: ProcessFactory, bus: Bus, client: Client, settings: Settings, tmp_path: Path
) -> None:
    """Card TTL 3 s: SIGKILL of the only replica drops the card within 5 s; clean stops keep it until the last."""
    path = write_agent(tmp_path, "carded", "count")
    (only,) = await start_replicas(processes, bus, path, "carded", 1)
    await eventually(lambda: client.registry.get("carded"), timeout=5, what="the card to appear")
    only.signal(signal.SIGKILL)
    await eventually(lambda: client.registry.get("carded") is None, timeout=5, what="the card to age out")

    a, b = await start_replicas(processes, bus, path, "carded", 2)
    await eventually(lambda: client.registry.get("carded"), timeout=5, what="the card to come back")
    a.signal(signal.SIGTERM)
    assert await a.wait(15) == 0
    kv = await bus.kv(bus.subjects.cards_bucket)
    assert await kv.get("carded") is not None, "a clean stop removed the card while a sibling lives"
    b.signal(signal.SIGTERM)
    assert await b.wait(15) == 0
    assert await kv.get("carded") is None, "the last replica's clean stop did not remove the card"


async def test_sigterm_lets_running_task_finish(
    processes: ProcessFactory, bus: Bus, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """SIGTERM stops pulling but lets the running task finish within the grace period, then exits 0."""
    path = write_agent(tmp_path, "sleeper", "sleepy")
    (proc,) = await start_replicas(processes, bus, path, "sleeper", 1)
    call = await client.dispatch("sleeper", make_message(data={"seconds": 1.5}))
    await eventually(lambda: redis.lrange(key(settings, "started"), 0, -1), timeout=10, what="task start")
    proc.signal(signal.SIGTERM)
    task = await within(call.result(), 10, "the running task's result after SIGTERM")
    assert task.status.state == TaskState.COMPLETED
    assert await proc.wait(15) == 0
