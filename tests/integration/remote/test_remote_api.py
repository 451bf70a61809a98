"""Remote agents declared through the management API (``/api/remotes``): a real gateway, a real stock a2a-sdk
server; the card is checked by the code path of ``a2amesh remote add``; bad declarations are precise 4xx naming
the URL and the problem; a stored declaration is served by a proxy like a YAML one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import TaskState
from a2amesh.remote.declare import RemoteStore
from a2amesh.remote.service import RemoteWorker
from a2amesh.store.redis import Redis
from tests.integration.remote.test_remote_agents import _bad_server, socket_closed
from tests.support.stock_a2a import StockServer, stock_server
from tests.support.waiting import eventually, within

__all__ = ["stock_server"]

KEYS = "admin=adm1n-secret,reader=r3ader-secret#read"
ADMIN = {"Authorization": "Bearer adm1n-secret"}
READER = {"Authorization": "Bearer r3ader-secret"}


@pytest.fixture
async def api(gateway: Any) -> Any:
    url = str(await gateway(api_keys=parse_api_keys(KEYS)))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


async def test_add_list_show_serve_remove(
    api: httpx.AsyncClient, stock_server: Any, bus: Bus, redis: Redis, settings: Settings, client: Client
) -> None:
    """An admin declares a remote: the card is checked, the declaration stored and listed; a proxy serving the
    stored declaration forwards calls to the stock server; removing it forgets it."""
    stock: StockServer = await stock_server()
    added = await api.post("/api/remotes", json={"url": stock.url, "name": "stock", "retries": 1}, headers=ADMIN)
    assert added.status_code == 201, added.text
    body = added.json()
    assert added.headers["location"] == "/api/remotes/stock"
    assert body["name"] == "stock"
    assert body["url"] == stock.url
    assert body["skills"] == ["echo"]
    assert body["binding"] in ("JSONRPC", "HTTP+JSON")
    assert body["declaration"] == {"url": stock.url, "name": "stock", "retries": 1}
    assert body["serve"] == "a2amesh remote serve --stored stock"
    unnamed = await api.post("/api/remotes", json={"url": stock.url}, headers=ADMIN)
    assert unnamed.status_code == 201, unnamed.text
    assert unnamed.json()["name"] == "Stock-Agent"

    listed = await api.get("/api/remotes", headers=READER)
    assert [r["name"] for r in listed.json()] == ["Stock-Agent", "stock"], listed.text
    shown = await api.get("/api/remotes/stock", headers=READER)
    assert shown.status_code == 200
    assert shown.json()["declaration"]["retries"] == 1

    again = await api.post("/api/remotes", json={"url": stock.url, "name": "stock"}, headers=ADMIN)
    assert again.status_code == 409
    assert "'stock' is already declared" in again.json()["detail"]

    spec = await RemoteStore(redis, settings.namespace).get("stock")
    assert spec is not None
    worker = RemoteWorker(spec, source="stored remote stock", bus=bus, redis=redis, settings=settings)
    stop = asyncio.Event()
    task = await worker.start(stop, limit=15)
    try:
        answer = await within(client.send("stock", {"x": 1}), 15, "the stored remote's answer")
        assert answer.status.state == TaskState.COMPLETED
        assert answer.output() == {"echo": {"x": 1}, "n": 2}
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)

    gone = await api.delete("/api/remotes/stock", headers=ADMIN)
    assert gone.status_code == 204, gone.text
    assert (await api.get("/api/remotes/stock", headers=READER)).status_code == 404
    assert (await api.delete("/api/remotes/stock", headers=ADMIN)).status_code == 404


async def test_scopes(api: httpx.AsyncClient, stock_server: Any) -> None:
    """Reading needs a key; declaring and removing need admin."""
    stock: StockServer = await stock_server()
    assert (await api.get("/api/remotes")).status_code == 401
    refused = await api.post("/api/remotes", json={"url": stock.url}, headers=READER)
    assert refused.status_code == 403, refused.text
    assert (await api.delete("/api/remotes/x", headers=READER)).status_code == 403
    assert (await api.get("/api/remotes", headers=READER)).json() == []


async def test_bad_declarations_are_precise(api: httpx.AsyncClient, stock_server: Any) -> None:
    """Bad URL and unknown field: 422 naming the field; unreachable: 424; not A2A, not a card, no usable
    interface: 422; each naming the URL and the problem. Nothing is stored."""
    stock = await _bad_server(stock_server)
    bad_url = await api.post("/api/remotes", json={"url": "ftp://x"}, headers=ADMIN)
    assert bad_url.status_code == 422
    assert "body.url" in bad_url.json()["detail"]
    assert "'ftp://x' is not an http:// or https:// URL" in bad_url.text
    unknown = await api.post("/api/remotes", json={"url": stock.url, "nmae": "x"}, headers=ADMIN)
    assert unknown.status_code == 422, unknown.text
    assert "body.nmae" in unknown.json()["detail"]
    with socket_closed() as port:
        cases = {
            f"http://127.0.0.1:{port}": (424, "remote-unreachable", "unreachable"),
            f"{stock.url}/html/": (422, "bad-remote-card", "answered HTTP 404"),
            f"{stock.url}/json/card.json": (422, "bad-remote-card", "not an A2A agent card"),
            f"{stock.url}/grpc/card.json": (422, "bad-remote-card", "offers no JSONRPC or HTTP+JSON interface"),
        }
        for url, (status, title, problem) in cases.items():
            answer = await api.post("/api/remotes", json={"url": url, "retries": 0}, headers=ADMIN)
            assert answer.status_code == status, (url, answer.text)
            got = answer.json()
            assert got["title"] == title, got
            assert got["detail"].startswith(f"remote agent {url}: "), got
            assert problem in got["detail"], got
    missing_secret = {"url": stock.url, "auth": {"type": "bearer", "token": {"env": "A2AMESH_TEST_UNSET_TOKEN"}}}
    answer = await api.post("/api/remotes", json=missing_secret, headers=ADMIN)
    assert answer.status_code == 422
    assert "A2AMESH_TEST_UNSET_TOKEN is not set" in answer.json()["detail"]
    assert (await api.get("/api/remotes", headers=ADMIN)).json() == []


async def test_a_name_a_live_agent_holds_is_refused(
    api: httpx.AsyncClient, stock_server: Any, agent_host: Any, executor: Any
) -> None:
    """A stored remote may not take the name of a live local agent or workflow: both would serve its tasks."""
    stock: StockServer = await stock_server()

    async def echo(input: Any, ctx: Any) -> Any:
        return input

    await agent_host("busy", echo)
    await executor({"flow": "name: flow\nnodes:\n  - {id: a, type: agent, agent_name: busy}\n"})
    for name, what in (("busy", "live agent"), ("flow", "live workflow")):

        async def seen(name: str = name) -> bool:
            card = await api.get(f"/agents/{name}/.well-known/agent-card.json")
            return card.status_code == 200

        await eventually(seen, timeout=15, what=f"the gateway to see {name}")
        refused = await api.post("/api/remotes", json={"url": stock.url, "name": name}, headers=ADMIN)
        assert refused.status_code == 409, refused.text
        assert f"{name!r} is the name of a {what} in the mesh" in refused.json()["detail"]
        assert (await api.get(f"/api/remotes/{name}", headers=READER)).status_code == 404
