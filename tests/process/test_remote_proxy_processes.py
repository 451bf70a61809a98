"""The remote agent proxy as OS processes: a proxy SIGKILLed while its task runs on the remote is taken over by
another replica, which follows the remote task from the ids kept in Redis instead of sending it again; ``a2amesh
remote add`` writes a declaration only for a usable card; the mesh of ``a2amesh up`` serves the remotes declared
through the API and stops serving them when they are removed."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.mesh import Mesh
from a2amesh.protocol import TaskState, codes
from a2amesh.remote.declare import RemoteStore
from a2amesh.remote.spec import parse_remote
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import TaskStore
from tests.support.cli import run_cli
from tests.support.processes import ProcessFactory, process_env
from tests.support.stock_a2a import StockServer, stock_server
from tests.support.waiting import eventually, within

__all__ = ["stock_server"]


async def test_proxy_killed_mid_task_is_taken_over_without_resending(
    processes: ProcessFactory, stock_server: Any, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """SIGKILL of the proxy while the remote works: the redelivery goes to a new replica, which follows the same
    remote task (GetTask, then its stream) and answers the caller once it completes; the remote saw one message."""
    stock: StockServer = await stock_server()
    declared = tmp_path / "stock.yaml"
    declared.write_text(yaml.safe_dump({"remote": {"url": stock.url, "name": "stock"}}))
    first = await processes.start("remote", "serve", str(declared))
    await client.registry.wait_for("stock", 20)
    call = await client.dispatch("stock", make_message("gate"), timeout=60)
    await within(stock.agent.started.wait(), 15, "the remote to start the task")
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    await eventually(lambda: tasks.checkpoint(call.task_id), timeout=10, what="the remote task's ids in Redis")
    first.signal(signal.SIGKILL)
    await first.wait(10)
    await processes.start("remote", "serve", str(declared))
    await asyncio.sleep(0)  # the new replica may take the redelivery before or after the release
    stock.agent.release.set()
    task = await within(call.result(), 45, "the final after the takeover")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"released": True}
    assert len(stock.agent.inputs) == 1, "the task was sent to the remote again"
    await tasks.aclose()


async def test_remote_add_writes_only_usable_cards(
    processes: ProcessFactory, stock_server: Any, tmp_path: Path
) -> None:
    """``remote add URL`` checks the card and writes ``{agents}/{name}.yaml``; a bad URL is one error line and
    writes nothing."""
    stock: StockServer = await stock_server()
    agents = tmp_path / "agents"
    ok = await processes.start("remote", "add", stock.url, "--agents", str(agents))
    assert await ok.wait(30) == 0, ok.output()
    written = yaml.safe_load((agents / "Stock-Agent.yaml").read_text())
    assert written == {"remote": {"url": stock.url, "name": "Stock-Agent"}}
    assert "JSONRPC 1.0" in ok.output()
    bad = await processes.start("remote", "add", f"{stock.url}/nothing/here.json", "--agents", str(agents))
    assert await bad.wait(30) == 1
    assert f"remote agent {stock.url}/nothing/here.json: the card request to" in bad.output()
    assert sorted(p.name for p in agents.iterdir()) == ["Stock-Agent.yaml"]


async def test_agents_lists_the_remote_with_its_url(
    processes: ProcessFactory, stock_server: Any, client: Client, settings: Settings, tmp_path: Path
) -> None:
    """``a2amesh agents`` shows a remote agent's type as remote, with its URL."""
    stock: StockServer = await stock_server()
    declared = tmp_path / "stock.yaml"
    declared.write_text(yaml.safe_dump({"remote": {"url": stock.url, "name": "stock"}}))
    await processes.start("remote", "serve", str(declared))
    await client.registry.wait_for("stock", 20)
    code, out, err = await run_cli("agents", env=process_env(settings))
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if line.startswith("stock ")]
    assert row.split()[1] == "remote"
    assert stock.url in row


async def test_serve_stored_runs_an_api_declared_remote(
    processes: ProcessFactory, stock_server: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """``remote serve --stored NAME`` serves the declaration ``POST /api/remotes`` stored; an unknown name is a
    usage error naming it."""
    stock: StockServer = await stock_server()
    spec = parse_remote({"remote": {"url": stock.url, "name": "stored"}}, "test")
    assert await RemoteStore(redis, settings.namespace).add(spec)
    await processes.start("remote", "serve", "--stored", "stored")
    await client.registry.wait_for("stored", 20)
    task = await within(client.send("stored", {"x": 2}), 30, "the stored remote's answer")
    assert task.output() == {"echo": {"x": 2}, "n": 2}
    missing = await processes.start("remote", "serve", "--stored", "nobody")
    assert await missing.wait(30) == 2, missing.output()
    assert "no remote agent 'nobody' is declared through the API" in missing.output()


async def test_up_serves_remotes_added_and_removed_through_the_api(
    gateway: Any, stock_server: Any, client: Client, settings: Settings, tmp_path: Path
) -> None:
    """The mesh of ``a2amesh up`` (its process ``remote serve --stored``, on the test's servers): a remote POSTed
    to /api/remotes is served and a call through the mesh reaches the stock server; after DELETE its card leaves
    the registry and a call is AGENT_NOT_FOUND at once."""
    stock: StockServer = await stock_server()
    url = str(await gateway(api_keys=parse_api_keys("admin=adm1n-secret")))
    admin = {"Authorization": "Bearer adm1n-secret"}
    log = tmp_path / "mesh.log"
    mesh = Mesh(
        settings, agents_dir=None, state_dir=tmp_path / "state", log_file=log, builtins=False, stored_remotes=True
    )
    async with mesh, httpx.AsyncClient(base_url=url, timeout=30) as api:
        assert [c.label for c in mesh.children] == ["remotes"]
        added = await api.post("/api/remotes", json={"url": stock.url, "name": "stock"}, headers=admin)
        assert added.status_code == 201, added.text

        def served() -> bool:
            assert not mesh.crashed(), log.read_text()[-3000:]
            return client.registry.get("stock") is not None

        await eventually(served, timeout=30, what="the card of the remote added through the API")
        task = await within(client.send("stock", {"x": 5}), 30, "the answer through the mesh")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output() == {"echo": {"x": 5}, "n": 2}
        assert len(stock.agent.inputs) == 1

        gone = await api.delete("/api/remotes/stock", headers=admin)
        assert gone.status_code == 204, gone.text
        await eventually(lambda: client.registry.get("stock") is None, timeout=30, what="the card to leave")
        with pytest.raises(TransportError) as failure:
            await within(client.send("stock", {"x": 6}, timeout=5), 5, "AGENT_NOT_FOUND")
        assert failure.value.reason == codes.AGENT_NOT_FOUND
        assert "'stock' is not in the mesh" in str(failure.value)
        assert len(stock.agent.inputs) == 1
        await eventually(lambda: "remote.removed" in log.read_text(), timeout=10, what="remote.removed in the log")
        assert not mesh.crashed(), log.read_text()[-3000:]
