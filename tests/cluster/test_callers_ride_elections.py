"""Callers that start while a stream or bucket of theirs elects a new leader (issue 35, item 6).

On a 3-node NATS cluster (R3 streams and buckets) the node leading the cards bucket (or the tasks stream) is
SIGKILLed, and at once several callers start as `a2amesh run` does: connect, bind and watch the cards bucket,
look the card up, publish, wait for the reply. Each must ride out the election within its bound (or fail with
``UNAVAILABLE`` naming what it waited for); before the fix they failed with nats-py's bare ``nats: timeout``
(the CLI's "internal error (TimeoutError)").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import TaskState, codes
from a2amesh.store.redis import connect_redis
from tests.support.servers import ClusterServers
from tests.support.waiting import within

CALLERS = 6


async def echo(input: Any, ctx: Any) -> Any:
    return {"echo": input}


@pytest.fixture
async def settings_r3(cluster_servers: ClusterServers, namespace: str) -> Settings:
    return Settings.load(
        environ={},
        profile="test",
        nats_url=cluster_servers.nats_url,
        redis_url=cluster_servers.redis_url,
        namespace=namespace,
        replicas=3,
        card_ttl=15.0,
    )


@pytest.fixture
async def admin(settings_r3: Settings) -> AsyncIterator[Bus]:
    bus = await Bus.connect(settings_r3, name="admin")
    await init_mesh(bus, settings_r3)
    yield bus
    await bus.close()


async def leader_of(bus: Bus, stream: str) -> str:
    info = await bus.jsm.stream_info(stream)
    return str(info.cluster.leader or "")


async def one_caller(settings: Settings, i: int) -> Any:
    """A caller from scratch, as `a2amesh run`: its own connection, registry and call."""
    client = await Client.connect(settings, name=f"caller-{i}")
    try:
        return await client.send("echo", {"i": i}, timeout=45)
    finally:
        await client.close()


@pytest.mark.parametrize("what", ["cards", "tasks"])
async def test_callers_starting_during_an_election_ride_it_out(
    cluster_servers: ClusterServers, settings_r3: Settings, admin: Bus, what: str
) -> None:
    stream = f"KV_{admin.subjects.cards_bucket}" if what == "cards" else admin.subjects.tasks_stream
    victim = cluster_servers.nats.node(await leader_of(admin, stream))
    survivor = next(n for n in cluster_servers.nats.nodes if n is not victim)
    agent_bus = await Bus.connect(settings_r3, name="agent", url=survivor.url)
    redis = await connect_redis(settings_r3)
    host = AgentHost(
        PythonAgent(AgentDefinition(name="echo", handler="x:y"), echo), bus=agent_bus, redis=redis, settings=settings_r3
    )
    try:
        async with host:
            await victim.kill()
            outcomes = await within(
                asyncio.gather(*(one_caller(settings_r3, i) for i in range(CALLERS)), return_exceptions=True),
                90,
                "every caller to finish",
            )
    finally:
        await redis.aclose()
        await agent_bus.close()
    internal = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, TransportError)]
    assert not internal, f"callers failed with an internal error: {[repr(e) for e in internal]}"
    unavailable = [o for o in outcomes if isinstance(o, TransportError)]
    assert all(e.reason == codes.UNAVAILABLE for e in unavailable), [str(e) for e in unavailable]
    # the election ends within the callers' bounds: every one of them gets its answer
    assert not unavailable, [str(e) for e in unavailable]
    for i, task in enumerate(outcomes):
        assert not isinstance(task, BaseException)
        assert task.status.state == TaskState.COMPLETED
        assert task.output() == {"echo": {"i": i}}
