"""The HTTP gateway with a2a-sdk's own client: send, stream, get, list, cancel, resubscribe on another replica."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from typing import Any, cast

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from a2amesh.client import Client
from tests.support.gateway import sdk_client
from tests.support.waiting import within

FLOW = """
name: flow
nodes:
  - {id: a, type: agent, agent_name: worker, input: "{{workflow.input}}"}
output_mapping: {out: "{{a.output}}"}
"""

BINDINGS = ["JSONRPC", "HTTP+JSON"]
TERMINAL = (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_CANCELED, pb.TASK_STATE_FAILED)


class Worker:
    """A Python agent that reports progress and, when asked, waits for the test to let it finish."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        await ctx.emit_status("step 1")
        await ctx.emit_status("step 2")
        if input.get("wait"):
            self.started.set()
            await self.release.wait()
        return {"echo": input.get("text", input)}


def message(data: dict[str, Any]) -> pb.SendMessageRequest:
    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
    msg.parts.add().data.struct_value.update(data)
    return pb.SendMessageRequest(message=msg)


def state_of(event: pb.StreamResponse) -> int:
    """The task state an event reports (a final may come as a status update or as the whole task)."""
    return event.status_update.status.state if event.HasField("status_update") else event.task.status.state


async def collect(stream: Any) -> list[pb.StreamResponse]:
    return [event async for event in stream]


@pytest.fixture
async def mesh(agent_host: Any, executor: Any, client: Client) -> Worker:
    worker = Worker()
    await agent_host("worker", worker)
    await executor({"flow": FLOW})
    await client.registry.wait_for("flow", 5)
    return worker


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("target", ["worker", "flow"])
async def test_sdk_client_full_cycle(mesh: Worker, gateway: Any, binding: str, target: str) -> None:
    """Every method through the gateway, as a stock A2A client uses it, for an agent and a workflow."""
    url = await gateway()
    replica = await gateway(own_bus=True)

    async with sdk_client(f"{url}/agents/{target}", binding, streaming=False) as c:
        [only] = await within(collect(c.send_message(message({"n": 1}))), 15, "SendMessage")
        task = only.task
        assert task.status.state == pb.TASK_STATE_COMPLETED, task.status
        assert task.artifacts[0].name == "result"

        got = await c.get_task(pb.GetTaskRequest(id=task.id, history_length=0))
        assert got.id == task.id
        assert got.status.state == pb.TASK_STATE_COMPLETED
        assert len(got.history) == 0
        listed = await c.list_tasks(pb.ListTasksRequest())
        assert task.id in [t.id for t in listed.tasks]

    async with sdk_client(f"{url}/agents/{target}", binding) as c:
        events = await within(collect(c.send_message(message({"n": 2}))), 15, "the stream")
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[0] == "task", kinds
        assert kinds[-1] == "status_update", kinds
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
        assert all(e.status_update.status.state not in TERMINAL for e in events[1:-1] if e.HasField("status_update"))

    # a task that waits: follow it from a second replica, then cancel it
    async with sdk_client(f"{url}/agents/{target}", binding) as c:
        stream = cast(AsyncGenerator[pb.StreamResponse], c.send_message(message({"wait": True})))
        first = await within(anext(stream), 15, "the first event")
        task_id = first.task.id
        await within(mesh.started.wait(), 15, "the worker to start")
        await stream.aclose()  # the HTTP client goes away: the task goes on
    async with sdk_client(f"{replica}/agents/{target}", binding) as other:
        follow = other.subscribe(pb.SubscribeToTaskRequest(id=task_id))
        snapshot = await within(anext(follow), 15, "the subscription's snapshot")
        assert snapshot.task.id == task_id
        assert snapshot.task.status.state == pb.TASK_STATE_WORKING
        if target == "worker":
            mesh.release.set()
            rest = await within(collect(follow), 15, "the followed task's end")
            assert state_of(rest[-1]) == pb.TASK_STATE_COMPLETED, rest
        else:
            canceled = await within(other.cancel_task(pb.CancelTaskRequest(id=task_id)), 15, "CancelTask")
            assert canceled.status.state == pb.TASK_STATE_CANCELED
            rest = await within(collect(follow), 15, "the canceled task's end")
            assert state_of(rest[-1]) == pb.TASK_STATE_CANCELED, rest


async def test_card_directory_and_probes(mesh: Worker, gateway: Any) -> None:
    """The card lists the gateway's HTTP interfaces only (not the NATS one); /agents lists both; probes answer."""
    url = await gateway()
    async with httpx.AsyncClient(base_url=url) as http:
        r = await http.get("/agents/flow/.well-known/agent-card.json")
        assert r.status_code == 200
        card = r.json()
        bindings = [i["protocolBinding"] for i in card["supportedInterfaces"]]
        assert bindings == ["JSONRPC", "HTTP+JSON", "JSONRPC", "HTTP+JSON"]
        assert [i["protocolVersion"] for i in card["supportedInterfaces"][:4]] == ["1.0", "1.0", "0.3", "0.3"]
        assert card["supportedInterfaces"][0]["url"] == f"{url}/agents/flow/"
        assert card["capabilities"]["pushNotifications"] is True  # the gateway has its Redis store
        assert r.headers["etag"]
        assert "max-age" in r.headers["cache-control"]
        again = await http.get("/agents/flow/.well-known/agent-card.json", headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304
        listing = (await http.get("/agents")).json()["agents"]
        types = {a["name"]: a["type"] for a in listing}
        assert types == {"worker": "agent", "flow": "workflow"}
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"nats": True, "registry": True, "redis": True}


async def test_agents_appear_after_start_and_cors_is_opt_in(agent_host: Any, gateway: Any, client: Client) -> None:
    """An agent started after the gateway is served at once (no per-agent routes); CORS only when configured."""
    plain = await gateway()
    cors = await gateway(cors_origins=["https://app.example"])
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(f"{plain}/agents/late/.well-known/agent-card.json")).status_code == 404
        await agent_host("late", Worker())
        await client.registry.wait_for("late", 5)
        r = await http.get(f"{plain}/agents/late/.well-known/agent-card.json")
        assert r.status_code == 200
        assert r.json()["name"] == "late"
        preflight = {
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,a2a-version",
        }
        allowed = await http.options(f"{cors}/agents/late/", headers=preflight)
        assert allowed.headers.get("access-control-allow-origin") == "https://app.example"
        denied = await http.options(f"{plain}/agents/late/", headers=preflight)
        assert "access-control-allow-origin" not in denied.headers


async def test_an_idle_keep_alive_connection_outlives_the_clients_own_limit(gateway: Any) -> None:
    """A connection idle for longer than httpx's (and uvicorn's default) 5 s keep-alive is still open: the client
    closes it, not the gateway, so a request sent on it the moment a server would have closed it is not lost
    (the lifecycle model's soak saw that race as an httpx ReadError)."""
    url = httpx.URL(await gateway())
    reader, writer = await asyncio.open_connection(url.host, url.port)
    request = f"GET /healthz HTTP/1.1\r\nHost: {url.host}\r\n\r\n".encode()
    try:
        for turn in ("first", "after 6 s idle"):
            writer.write(request)
            await writer.drain()
            status = await within(reader.readline(), 5, f"the {turn} answer")
            assert status.startswith(b"HTTP/1.1 200"), f"{turn}: {status!r} (the gateway closed the connection)"
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            if turn == "first":
                await asyncio.sleep(6)  # idle past the 5 s limit of uvicorn's default: what is tested
    finally:
        writer.close()
