"""The remote agent proxy as OS processes: a proxy SIGKILLed while its task runs on the remote is taken over by
another replica, which follows the remote task from the ids kept in Redis instead of sending it again; ``a2amesh
remote add`` writes a declaration only for a usable card."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import yaml

from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
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
