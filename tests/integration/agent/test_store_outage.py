"""A handler that meets Redis away (a Valkey restart) is not failed: ``ctx.fence()`` rides out a short outage
(a claim's TTL), and past that the task is handed back and runs again once Valkey is back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.redis import connect_redis
from tests.support.servers import MeshServers
from tests.support.waiting import within

Handler = Callable[[Any, Any], Awaitable[Any]]


@pytest.fixture
async def serve(fault_servers: MeshServers, namespace: str) -> AsyncIterator[Callable[[Handler], Awaitable[Client]]]:
    """Serve one handler as agent ``fenced`` on servers of this test alone; the client that calls it."""
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
    client = Client(bus, settings)
    stop = asyncio.Event()
    runs: list[asyncio.Task[None]] = []

    async def start(handler: Handler) -> Client:
        host = AgentHost(
            PythonAgent(AgentDefinition(name="fenced", handler="x:y"), handler), bus=bus, redis=redis, settings=settings
        )
        runs.append(asyncio.create_task(host.run_until(stop)))
        await within(host.ready.wait(), 10, "the host")
        await client.start()
        return client

    try:
        yield start
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 30)
        await client.close()
        await redis.aclose()
        await bus.close()


async def test_fence_rides_out_a_valkey_restart(serve: Any, fault_servers: MeshServers) -> None:
    restarted = asyncio.Event()
    calls = 0

    async def handler(input: Any, ctx: Any) -> Any:
        nonlocal calls
        calls += 1
        valkey = fault_servers.valkey
        assert valkey is not None
        await valkey.stop()  # Redis away right before the effect's fence
        asyncio.get_running_loop().call_later(0.5, lambda: asyncio.ensure_future(valkey.start()))
        await ctx.fence()
        restarted.set()
        return {"fenced": "through"}

    client = await serve(handler)
    task = await within(client.send("fenced", {"x": 1}, timeout=60), 60, "the task")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"fenced": "through"}
    assert restarted.is_set()
    assert calls == 1, "the fence waited for Valkey: the handler ran once"


async def test_an_outage_past_the_claim_hands_the_task_back(
    serve: Any, fault_servers: MeshServers, settings: Settings
) -> None:
    calls = 0

    async def handler(input: Any, ctx: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            valkey = fault_servers.valkey
            assert valkey is not None
            await valkey.stop()  # away for longer than a claim's TTL
            back = settings.ack_wait * 1.5
            asyncio.get_running_loop().call_later(back, lambda: asyncio.ensure_future(valkey.start()))
        await ctx.fence()
        return {"run": calls}

    client = await serve(handler)
    task = await within(client.send("fenced", {"x": 1}, timeout=90), 90, "the task")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"run": 2}, "handed back, then run again once Valkey was back"
