"""The proxies of the remotes declared through the management API (``remote/stored.py``): one in-process
:class:`StoredRemotes` against a real gateway and stock a2a-sdk servers. ``POST /api/remotes`` starts a proxy at
once (the announcement, not the re-read: the re-read interval is longer than the test), ``DELETE`` stops it and
takes its card away; the re-read finds a declaration whose announcement was lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import TaskState, codes
from a2amesh.remote.declare import RemoteStore
from a2amesh.remote.spec import parse_remote
from a2amesh.remote.stored import StoredRemotes
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from tests.support.stock_a2a import StockServer, stock_server
from tests.support.waiting import eventually, within

__all__ = ["stock_server"]

ADMIN = {"Authorization": "Bearer adm1n-secret"}


@pytest.fixture
async def api(gateway: Any) -> AsyncIterator[httpx.AsyncClient]:
    from a2amesh.gateway.settings import parse_api_keys

    url = str(await gateway(api_keys=parse_api_keys("admin=adm1n-secret")))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


@contextlib.asynccontextmanager
async def serving(bus: Bus, redis: Redis, settings: Settings, *, interval: float) -> AsyncIterator[StoredRemotes]:
    remotes = StoredRemotes(bus=bus, redis=redis, settings=settings, interval=interval)
    stop = asyncio.Event()
    running = await remotes.start(stop, limit=15)
    try:
        yield remotes
    finally:
        stop.set()
        await within(running, 30, "the stored remotes to stop")


async def test_api_add_serves_and_delete_stops(
    api: httpx.AsyncClient, stock_server: Any, bus: Bus, redis: Redis, settings: Settings, client: Client
) -> None:
    """Added through the API: served within seconds and calls reach the stock server; deleted: the card leaves
    the registry and a call is AGENT_NOT_FOUND at once; added again: served again."""
    stock: StockServer = await stock_server()
    async with serving(bus, redis, settings, interval=600) as remotes:
        assert remotes.served == {}
        added = await api.post("/api/remotes", json={"url": stock.url, "name": "stock"}, headers=ADMIN)
        assert added.status_code == 201, added.text
        await within(client.registry.wait_for("stock", 15), 16, "the card of the remote added through the API")
        answer = await within(client.send("stock", {"x": 1}), 15, "the stored remote's answer")
        assert answer.status.state == TaskState.COMPLETED
        assert answer.output() == {"echo": {"x": 1}, "n": 2}
        assert stock.agent.inputs, "the stock server saw no message"

        gone = await api.delete("/api/remotes/stock", headers=ADMIN)
        assert gone.status_code == 204, gone.text
        await eventually(lambda: client.registry.get("stock") is None, timeout=15, what="the card to leave")
        assert "stock" not in remotes.served
        with pytest.raises(TransportError) as failure:
            await within(client.send("stock", {"x": 2}, timeout=5), 5, "AGENT_NOT_FOUND")
        assert failure.value.reason == codes.AGENT_NOT_FOUND
        assert len(stock.agent.inputs) == 1

        again = await api.post("/api/remotes", json={"url": stock.url, "name": "stock"}, headers=ADMIN)
        assert again.status_code == 201, again.text
        await within(client.registry.wait_for("stock", 15), 16, "the card of the remote added again")
        answer = await within(client.send("stock", {"x": 3}), 15, "the answer after it was added again")
        assert answer.output() == {"echo": {"x": 3}, "n": 2}


async def test_reread_finds_a_declaration_without_its_announcement(
    stock_server: Any, bus: Bus, redis: Redis, settings: Settings, client: Client
) -> None:
    """A declaration written to the store with no event (a lost announcement) is served by the next re-read, and
    one removed that way is stopped by it; an unreachable remote, and a stored declaration that cannot be read,
    are not served and the others are."""
    stock: StockServer = await stock_server()
    store = RemoteStore(redis, settings.namespace)
    await redis.hset(Keys(settings.namespace).remotes(), "broken", '{"url": 1')
    async with serving(bus, redis, settings, interval=0.2) as remotes:
        down = parse_remote({"remote": {"url": "http://127.0.0.1:9/", "name": "down", "retries": 0}}, "test")
        assert await store.add(down)
        assert await store.add(parse_remote({"remote": {"url": stock.url, "name": "quiet"}}, "test"))
        await within(client.registry.wait_for("quiet", 15), 16, "the card found by the re-read")
        assert set(remotes.served) == {"down", "quiet"}
        assert client.registry.get("down") is None
        task = await within(client.send("quiet", {"x": 4}), 15, "the answer")
        assert task.output() == {"echo": {"x": 4}, "n": 2}
        assert await store.remove("quiet")
        await eventually(lambda: client.registry.get("quiet") is None, timeout=15, what="the card to leave")
        assert set(remotes.served) == {"down"}
    assert remotes.served == {}
