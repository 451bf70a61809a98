"""A2A 1.0 semantics over HTTP that the full-cycle tests do not reach: returnImmediately, ListTasks filters and
pages, and /readyz when Redis goes away."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.gateway import Gateway, GatewaySettings
from a2amesh.servers import ValkeyServer
from a2amesh.store.redis import connect_redis
from tests.integration.gateway.test_gateway import Worker, collect, message
from tests.support.gateway import sdk_client
from tests.support.waiting import eventually, within

BINDINGS = ["JSONRPC", "HTTP+JSON"]


@pytest.fixture
async def worker(agent_host: Any, client: Client) -> Worker:
    w = Worker()
    await agent_host("worker", w)
    await client.registry.wait_for("worker", 5)
    return w


def in_context(data: dict[str, Any], context_id: str) -> pb.SendMessageRequest:
    req = message(data)
    req.message.context_id = context_id
    return req


@pytest.mark.parametrize("binding", BINDINGS)
async def test_return_immediately_answers_the_working_task(worker: Worker, gateway: Any, binding: str) -> None:
    """``returnImmediately`` answers at once with the task still WORKING; GetTask later finds it COMPLETED."""
    url = await gateway()
    async with sdk_client(f"{url}/agents/worker", binding, streaming=False) as c:
        req = message({"wait": True})
        req.configuration.return_immediately = True
        [only] = await within(collect(c.send_message(req)), 15, "the immediate answer")
        task = only.task
        assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING), task.status
        await within(worker.started.wait(), 15, "the worker to start")
        worker.release.set()

        async def completed() -> bool:
            got = await c.get_task(pb.GetTaskRequest(id=task.id))
            return got.status.state == pb.TASK_STATE_COMPLETED

        await eventually(completed, timeout=15, what="the task to complete after the immediate answer")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_filters_and_pages(worker: Worker, gateway: Any, binding: str) -> None:
    """ListTasks filters by context and state, pages with pageSize / nextPageToken (each task once), and leaves
    artifacts out unless asked."""
    url = await gateway()
    context = uuid.uuid4().hex
    async with sdk_client(f"{url}/agents/worker", binding, streaming=False) as c:
        ids = []
        for n in range(5):
            [only] = await within(collect(c.send_message(in_context({"n": n}, context))), 15, f"call {n}")
            assert only.task.status.state == pb.TASK_STATE_COMPLETED
            ids.append(only.task.id)
        await within(collect(c.send_message(message({"other": True}))), 15, "a call in another context")

        seen: list[str] = []
        token = ""
        for _ in range(5):
            page = await c.list_tasks(pb.ListTasksRequest(context_id=context, page_size=2, page_token=token))
            assert len(page.tasks) <= 2
            assert all(t.context_id == context for t in page.tasks)
            assert all(not t.artifacts for t in page.tasks), "artifacts are left out unless includeArtifacts"
            seen.extend(t.id for t in page.tasks)
            token = page.next_page_token
            if not token:
                break
        assert sorted(seen) == sorted(ids), "every task of the context once, across the pages"
        assert len(seen) == len(set(seen))

        full = await c.list_tasks(pb.ListTasksRequest(context_id=context, include_artifacts=True, history_length=0))
        assert {t.id for t in full.tasks} == set(ids)
        assert all(t.artifacts for t in full.tasks)
        assert all(len(t.history) == 0 for t in full.tasks)
        done = await c.list_tasks(pb.ListTasksRequest(context_id=context, status=pb.TASK_STATE_COMPLETED))
        assert {t.id for t in done.tasks} == set(ids)
        working = await c.list_tasks(pb.ListTasksRequest(context_id=context, status=pb.TASK_STATE_WORKING))
        assert not working.tasks


async def test_list_tasks_bad_page_token_is_invalid_params(worker: Worker, gateway: Any) -> None:
    """A page token the gateway never handed out is -32602 naming it, and the gateway keeps serving."""
    url = await gateway()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ListTasks",
        "params": {"pageToken": "not-a-token"},
    }
    async with httpx.AsyncClient(timeout=15) as http:
        r = await http.post(f"{url}/agents/worker/", json=body, headers={"A2A-Version": "1.0"})
        err = r.json()["error"]
        assert err["code"] == -32602, err
        assert "not-a-token" in err["message"]
        assert (await http.get(f"{url}/healthz")).status_code == 200


async def test_readyz_reports_redis_down(worker: Worker, bus: Bus, settings: Settings, tmp_path: Path) -> None:
    """/readyz is 503 naming Redis once the gateway's Redis stops, while /healthz and calls over NATS still work."""
    valkey = ValkeyServer(data_dir=tmp_path / "gw-valkey")
    await asyncio.to_thread(valkey.start_sync)
    stopped = False
    redis = await connect_redis(settings, url=valkey.url)
    gw = Gateway(settings, GatewaySettings(host="127.0.0.1", port=0), bus=bus, redis=redis)
    stop = asyncio.Event()
    serving = asyncio.create_task(gw.run_until(stop))
    try:
        await within(gw.ready.wait(), 10, "the gateway to listen")
        async with httpx.AsyncClient(base_url=gw.url, timeout=15) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            await asyncio.to_thread(valkey.stop_sync)
            stopped = True
            down = await http.get("/readyz")
            assert down.status_code == 503
            assert down.json() == {"status": "unavailable", "checks": {"nats": True, "registry": True, "redis": False}}
            assert (await http.get("/healthz")).status_code == 200
        async with sdk_client(f"{gw.url}/agents/worker", "JSONRPC", streaming=False) as c:
            [only] = await within(collect(c.send_message(message({"n": 1}))), 15, "a call while Redis is down")
            assert only.task.status.state == pb.TASK_STATE_COMPLETED
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 15)
        await redis.aclose()
        if not stopped:
            await asyncio.to_thread(valkey.stop_sync)
