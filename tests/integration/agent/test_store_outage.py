"""A handler that meets Redis away (a Valkey restart) is not failed: ``ctx.fence()`` rides out a short outage
(a claim's TTL), and past that the task is handed back and runs again once Valkey is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import StoreUnavailable
from a2amesh.protocol import SendMessageRequest, TaskState, codes
from a2amesh.rpc import encode_request
from a2amesh.store.redis import connect_redis
from tests.support.inbox import Inbox, publish_request
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


async def test_a_final_held_up_past_the_claim_keeps_the_task(
    agent_host: Any, bus: Bus, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A final write that cannot land for longer than a claim's TTL (a Valkey Cluster shard just failed over has
    no replica for its WAIT until the old primary rejoins) keeps the claim: a resend that reaches another
    replica meanwhile follows the run and gets its final, instead of claiming the task and running the handler
    a second time (the chaos suite's duplicated side effect on a primary's SIGKILL)."""
    claim_ttl = settings.ack_wait * 2 / 3
    held_until = 0.0
    effect_done = asyncio.Event()
    runs = 0

    async def handler(input: Any, ctx: Any) -> Any:
        nonlocal runs, held_until
        runs += 1
        if runs == 1:
            held_until = time.monotonic() + 3 * claim_ttl
            effect_done.set()
        return {"run": runs}

    one = await agent_host("held", handler, max_concurrency=1)  # busy with the first copy: the resend goes to two
    two = await agent_host("held", handler, max_concurrency=1)
    for host in (one, two):
        write = host.tasks.write

        async def held_write(*args: Any, _write: Any = write, **kwargs: Any) -> Any:
            if kwargs.get("release") and time.monotonic() < held_until:
                raise StoreUnavailable("the shard's WAIT found no replica (test)")
            return await _write(*args, **kwargs)

        monkeypatch.setattr(host.tasks, "write", held_write)

    message = make_message(data={"x": 1})
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=message), "first")
    first = await Inbox(bus, "held").start()
    await publish_request(bus, "held", body, f"held:{message.message_id}", first.subject)
    await within(effect_done.wait(), 10, "the handler's first run")
    await asyncio.sleep(2 * claim_ttl)  # the final is held up past the claim's TTL: what is tested
    second = await Inbox(bus, "held").start()
    resend = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=message), "second")
    await publish_request(bus, "held", resend, f"held:{message.message_id}:resend", second.subject)
    for inbox, request_id in ((first, "first"), (second, "second")):
        replies = await inbox.until_final(f"the final of copy {request_id!r}", timeout=20)
        final = replies[-1][0]
        assert final["id"] == request_id, final
        assert final["result"]["task"]["status"]["state"] == TaskState.COMPLETED.value, final
    assert runs == 1, "the handler ran again on the replica the resend reached"
