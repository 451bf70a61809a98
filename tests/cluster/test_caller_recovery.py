"""A caller whose NATS node is lost while its call finishes gets the same final it would have had (issue 35,
item 7): status, artifacts and output, read back from ``{NS}_REPLIES`` after it reconnects to another node.

The caller's node is frozen (SIGSTOP) so the replies routed to it are lost, the agent (on another node)
finishes meanwhile (artifact and final stored), then the frozen node is SIGKILLed: the caller reconnects to a
live node and recovers the call. Before the fix it read only the last stored reply (the final status) and
reported ``COMPLETED`` with no artifacts (``output`` null, as ``a2amesh run --json`` printed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats.errors
import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.servers import NatsServer
from a2amesh.store.redis import Redis, connect_redis
from tests.support.servers import ClusterServers
from tests.support.waiting import eventually, within


@dataclass
class Split:
    """A caller on one node of the cluster and an agent host on another."""

    settings: Settings
    caller: Client
    caller_node: NatsServer
    agent_bus: Bus
    started: asyncio.Event
    release: asyncio.Event


@pytest.fixture
async def split(cluster_servers: ClusterServers, namespace: str) -> AsyncIterator[Split]:
    settings = Settings.load(
        environ={},
        profile="test",
        nats_url=cluster_servers.nats_url,
        redis_url=cluster_servers.redis_url,
        namespace=namespace,
        replicas=3,
        card_ttl=15.0,
    )
    caller_node, agent_node = cluster_servers.nats.nodes[0], cluster_servers.nats.nodes[1]
    agent_bus = await Bus.connect(settings, name="agent", url=agent_node.url)
    await init_mesh(agent_bus, settings)
    redis: Redis = await connect_redis(settings)
    started, release = asyncio.Event(), asyncio.Event()

    async def answer(input: Any, ctx: Any) -> Any:
        started.set()
        await release.wait()
        return {"answer": 42, "got": input}

    host = AgentHost(
        PythonAgent(AgentDefinition(name="answer", handler="x:y"), answer),
        bus=agent_bus,
        redis=redis,
        settings=settings,
    )
    # the caller is given its node alone: it learns the others from the cluster (nats-py adds them)
    caller_bus = await Bus.connect(settings, name="caller", url=caller_node.url)
    caller = Client(caller_bus, settings)
    try:
        async with host:
            await caller.start()
            await caller.registry.wait_for("answer", 10)
            try:
                yield Split(settings, caller, caller_node, agent_bus, started, release)
            finally:
                release.set()
    finally:
        await caller.close()
        await caller_bus.close()
        await redis.aclose()
        await agent_bus.close()


@pytest.mark.parametrize("stream", [True, False])
async def test_caller_recovers_final_with_artifacts_after_node_loss(split: Split, stream: bool) -> None:
    s = split
    call = await s.caller.dispatch("answer", make_message(data={"q": 1}), stream=stream, timeout=60)
    await within(s.started.wait(), 15, "the handler to start")
    s.caller_node.pause()  # replies routed to the caller's node from now on are lost with it
    try:
        s.release.set()

        async def final_stored() -> bool:
            # read from the stream's leader: a direct get may be routed to the frozen node's replica, which
            # keeps its interest until the route's pings time out, and is then never answered
            try:
                stored = await s.agent_bus.jsm.get_last_msg(
                    s.agent_bus.subjects.replies_stream, call.reply_subject, direct=False
                )
            except (TimeoutError, nats.errors.Error):
                return False  # not stored yet, or the stream is electing its leader
            return (stored.headers or {}).get(h.FINAL) == "true"

        await eventually(final_stored, timeout=30, what="the call's final to be stored", interval=0.1)
    finally:
        await s.caller_node.kill()

    async def final_task() -> Any:
        async for _ in call.events():  # as `a2amesh run` reads a call
            pass
        return call.task

    task = await within(final_task(), 40, "the caller's final after its node was lost")
    assert task is not None
    assert task.status.state == TaskState.COMPLETED
    assert task.artifacts, "the final task has lost its artifacts"
    assert task.output() == {"answer": 42, "got": {"q": 1}}
