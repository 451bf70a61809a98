"""The binding survives server restarts and rejects name clashes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.protocol import AgentExtension, TaskState, codes
from a2amesh.registry import CardPublisher
from a2amesh.store.redis import connect_redis
from tests.support.servers import MeshServers
from tests.support.waiting import eventually, within


async def echo(input: Any, ctx: Any) -> Any:
    return input


async def test_nats_restart_agent_and_client_carry_on(fault_servers: MeshServers, namespace: str) -> None:
    """NATS restarted with the same store: client and agent reconnect, streams survive, calls work again."""
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=fault_servers.nats_url,
        redis_url=fault_servers.redis_url,
        namespace=namespace,
    )
    bus = await Bus.connect(settings)
    await init_mesh(bus, settings)
    redis = await connect_redis(settings)
    host = AgentHost(
        PythonAgent(AgentDefinition(name="echo", handler="x:y"), echo), bus=bus, redis=redis, settings=settings
    )
    stop = asyncio.Event()
    run = asyncio.create_task(host.run_until(stop))
    client = Client(bus, settings)
    try:
        await within(host.ready.wait(), 10, "the host")
        await client.start()
        assert (await client.send("echo", {"before": 1})).output() == {"before": 1}
        assert fault_servers.nats is not None
        await fault_servers.nats.restart()
        await eventually(lambda: bus.connected, timeout=15, what="the reconnect")

        async def call_works() -> bool:
            try:
                task = await client.send("echo", {"after": 1}, timeout=3)
            except Exception:
                return False
            return bool(task.output() == {"after": 1})

        await eventually(call_works, timeout=20, what="a call to succeed after the restart", interval=0.2)
    finally:
        stop.set()
        await asyncio.wait_for(run, 15)
        await client.close()
        await redis.aclose()
        await bus.close()


async def test_workflow_name_held_by_agent_is_refused(agent_host: Any, bus: Bus, settings: Settings) -> None:
    """A workflow may not take a name a live agent holds (and vice versa): a clear startup error."""
    host = await agent_host("taken", echo)
    card = host.runtime.card(settings.namespace)
    assert card.capabilities.extensions is not None
    exts = [e for e in card.capabilities.extensions if e.uri != codes.EXT_AGENT_TYPE]
    exts.append(AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "workflow"}))
    wf_card = card.model_copy(update={"capabilities": card.capabilities.model_copy(update={"extensions": exts})})
    with pytest.raises(ConfigError) as e:
        await CardPublisher(bus, wf_card, instance="other", card_ttl=settings.card_ttl).publish()
    assert "already used by a live agent" in str(e.value)


async def test_subscribe_to_running_task(agent_host: Any, client: Client) -> None:
    """SubscribeToTask on a running task yields its snapshot, then its progress and its final state."""
    gate = asyncio.Event()

    async def gated(input: Any, ctx: Any) -> Any:
        await ctx.emit_status("waiting")
        await gate.wait()
        await ctx.emit_status("released")
        return {"done": True}

    await agent_host("gated", gated)
    call = await client.dispatch("gated", make_message(data={}))
    seen: list[Any] = []

    async def follow() -> None:
        async for ev in client.subscribe("gated", call.task_id, timeout=10):
            seen.append(ev)

    follower = asyncio.create_task(follow())
    await eventually(lambda: seen, timeout=5, what="the subscription snapshot")
    assert seen[0].task is not None
    gate.set()
    await within(follower, 10, "the subscription to end")
    assert seen[-1].task is not None or seen[-1].status_update is not None
    last = seen[-1].task.status if seen[-1].task else seen[-1].status_update.status
    assert last.state == TaskState.COMPLETED
    assert (await call.result()).output() == {"done": True}


async def test_subscribe_to_queued_task_gets_the_task_first(agent_host: Any, client: Client) -> None:
    """SubscribeToTask on a task still queued: once a replica takes it, the subscriber's first event is the
    task, then its progress and its final state (the subscription reached the agent before the task did)."""
    release = asyncio.Event()
    started: list[Any] = []

    async def one_at_a_time(input: Any, ctx: Any) -> Any:
        started.append(input)
        if input == {"n": 1}:
            await release.wait()
        else:
            await ctx.emit_status("working on it")
        return input

    host = await agent_host("single", one_at_a_time, max_concurrency=1)
    first = await client.dispatch("single", make_message(data={"n": 1}))
    await eventually(lambda: started, timeout=10, what="the first task to start")
    queued = await client.dispatch("single", make_message(data={"n": 2}))
    seen: list[Any] = []

    async def follow() -> None:
        async for ev in client.subscribe("single", queued.task_id, timeout=15):
            seen.append(ev)

    follower = asyncio.create_task(follow())
    await eventually(
        lambda: host.tasks.subscribers(queued.task_id), timeout=5, what="the subscription registered in Redis"
    )
    assert started == [{"n": 1}], "the second task must still be queued"
    release.set()
    await within(follower, 15, "the subscription to end")
    assert seen, "the subscriber got nothing"
    assert seen[0].task is not None, f"the first event must be the task, got {seen[0]!r}"
    last = seen[-1].task.status if seen[-1].task else seen[-1].status_update.status
    assert last.state == TaskState.COMPLETED
    assert (await first.result()).status.state == TaskState.COMPLETED
    assert (await queued.result()).output() == {"n": 2}


async def test_subscribe_to_finished_task_gets_final(agent_host: Any, client: Client) -> None:
    """SubscribeToTask on a finished task answers its final task at once."""
    await agent_host("echo", echo)
    task = await client.send("echo", {"v": 1})
    events = [ev async for ev in client.subscribe("echo", task.id, timeout=5)]
    assert len(events) == 1
    assert events[0].task is not None
    assert events[0].task.output() == {"v": 1}
