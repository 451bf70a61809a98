"""Push notifications through the gateway (docs/gateway.md "Push notifications"), with a real HTTP receiver.

Config CRUD over JSON-RPC and HTTP+JSON, delivery of a task's updates (inline config, a config set on a running
task, a task continued after input-required) with the token and Authorization headers, retries when the
receiver fails first, and bad configs refused precisely.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.errors import InputRequired
from tests.support.waiting import eventually, within

V = {"A2A-Version": "1.0"}
BINDINGS = ["JSONRPC", "HTTP+JSON"]


@dataclass
class Hook:
    """One request the receiver got."""

    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    """A webhook receiver on a loopback port: records every POST; answers ``failures`` 503s first."""

    failures: int = 0
    hooks: list[Hook] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        status = 503 if len(self.answered) < self.failures else 200
        self.answered.append(status)
        if status == 200:
            self.hooks.append(Hook(headers, json.loads(body)))
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    def states(self) -> list[str]:
        """The task state each delivered update reports."""
        out = []
        for hook in self.hooks:
            body = hook.body
            status = body.get("statusUpdate", {}).get("status") or body.get("task", {}).get("status") or {}
            if status:
                out.append(str(status["state"]))
        return out


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    server = await asyncio.start_server(rec.handle, "127.0.0.1", 0)
    rec.port = server.sockets[0].getsockname()[1]
    yield rec
    server.close()
    await server.wait_closed()


class Worker:
    """Asks for input when told to; waits for ``release`` when told to; else answers ``done``."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, input: Any, ctx: Any) -> str:
        if isinstance(input, dict) and input.get("ask"):
            raise InputRequired("more, please")
        if isinstance(input, dict) and input.get("wait"):
            self.started.set()
            await self.release.wait()
        return "done"


@pytest.fixture
async def worker(agent_host: Any, client: Client) -> Worker:
    w = Worker()
    await agent_host("pushy", w)
    await client.registry.wait_for("pushy", 5)
    return w


@pytest.fixture
async def http(worker: Worker, gateway: Any) -> AsyncIterator[httpx.AsyncClient]:
    url = await gateway()
    async with httpx.AsyncClient(base_url=f"{url}/agents/pushy", timeout=20) as h:
        yield h


def msg(data: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    parts = [{"data": data}] if data is not None else [{"text": "hi"}]
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts, **fields}


async def call(http: httpx.AsyncClient, binding: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One A2A method over ``binding``: ``{"result": …}`` or ``{"error": {"code"|"status", "message"}}``."""
    if binding == "JSONRPC":
        r = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=V)
        return dict(r.json())
    task = params.get("taskId") or params.get("id")
    config = params.get("id")
    if method == "SendMessage":
        r = await http.post("/message:send", json=params, headers=V)
    elif method == "CreateTaskPushNotificationConfig":
        r = await http.post(f"/tasks/{task}/pushNotificationConfigs", json=params, headers=V)
    elif method == "GetTaskPushNotificationConfig":
        r = await http.get(f"/tasks/{params['taskId']}/pushNotificationConfigs/{config}", headers=V)
    elif method == "ListTaskPushNotificationConfigs":
        r = await http.get(f"/tasks/{task}/pushNotificationConfigs", headers=V)
    else:
        r = await http.delete(f"/tasks/{params['taskId']}/pushNotificationConfigs/{config}", headers=V)
    if r.status_code >= 400:
        return {"error": {"status": r.status_code, "message": r.json()["error"]["message"]}}
    return {"result": r.json() if r.content else None}


async def completed_task(http: httpx.AsyncClient, binding: str) -> str:
    got = await call(http, binding, "SendMessage", {"message": msg()})
    return str(got["result"]["task"]["id"])


@pytest.mark.parametrize("binding", BINDINGS)
async def test_config_crud(http: httpx.AsyncClient, binding: str, receiver: Receiver) -> None:
    """Create (an id minted when none is given), get, list, delete (twice: idempotent); a deleted or unknown
    config and an unknown task are errors; the card says pushNotifications."""
    card = (await http.get("/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True
    task_id = await completed_task(http, binding)
    created = await call(
        http, binding, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": receiver.url, "token": "t-1"}
    )
    config = created["result"]
    assert config["taskId"] == task_id
    assert config["url"] == receiver.url
    assert config["token"] == "t-1"
    assert config["id"]
    named = await call(
        http, binding, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "second", "url": receiver.url}
    )
    assert named["result"]["id"] == "second"
    got = await call(http, binding, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config["id"]})
    assert got["result"] == config
    listed = await call(http, binding, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert sorted(c["id"] for c in listed["result"]["configs"]) == sorted([config["id"], "second"])
    for _ in range(2):
        gone = await call(http, binding, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "second"})
        assert "error" not in gone, gone
    missing = await call(http, binding, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "second"})
    assert "second" in missing["error"]["message"], missing
    listed = await call(http, binding, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert [c["id"] for c in listed["result"]["configs"]] == [config["id"]]
    unknown = await call(http, binding, "CreateTaskPushNotificationConfig", {"taskId": "no-such", "url": receiver.url})
    assert unknown["error"].get("code", -32001) == -32001, unknown
    assert unknown["error"].get("status", 404) == 404, unknown


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/hook", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("http:///hook", "has no host"),
        ("http://10.1.2.3/hook", "non-public address 10.1.2.3"),
        ("http://169.254.169.254/latest", "non-public address 169.254.169.254"),
    ],
)
async def test_bad_webhooks_are_refused(worker: Worker, gateway: Any, binding: str, url: str, problem: str) -> None:
    """A non-http(s) URL, one without a host, and (on a gateway that does not allow private targets) a private
    or link-local address are InvalidParams naming the problem, inline and as a config; nothing is stored."""
    base = await gateway(push_allow_private=False)
    async with httpx.AsyncClient(base_url=f"{base}/agents/pushy", timeout=20) as http:
        task_id = await completed_task(http, binding)
        refused = await call(http, binding, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url})
        assert problem in refused["error"]["message"], refused
        assert refused["error"].get("code", -32602) == -32602, refused
        assert refused["error"].get("status", 400) == 400, refused
        inline = {"message": msg(), "configuration": {"taskPushNotificationConfig": {"url": url}}}
        refused = await call(http, binding, "SendMessage", inline)
        assert problem in refused["error"]["message"], refused
        listed = await call(http, binding, "ListTaskPushNotificationConfigs", {"taskId": task_id})
        assert listed["result"].get("configs", []) == []


@pytest.mark.parametrize("binding", BINDINGS)
async def test_inline_config_delivers_each_update_with_its_headers(
    http: httpx.AsyncClient, binding: str, receiver: Receiver
) -> None:
    """A config sent with SendMessage hears the task's updates as StreamResponse JSON, the final one completed,
    with the token and the Authorization header; a task continued after input-required is delivered too."""
    config = {
        "url": receiver.url,
        "token": "secret-token",
        "authentication": {"scheme": "Bearer", "credentials": "hook-credentials"},
    }
    send = {"message": msg({"ask": True}), "configuration": {"taskPushNotificationConfig": config}}
    got = await call(http, binding, "SendMessage", send)
    task_id = got["result"]["task"]["id"]
    await eventually(
        lambda: "TASK_STATE_INPUT_REQUIRED" in receiver.states(), timeout=15, what="the input-required update"
    )
    got = await call(http, binding, "SendMessage", {"message": msg({"go": 1}, taskId=task_id)})
    assert got["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", got
    await eventually(lambda: "TASK_STATE_COMPLETED" in receiver.states(), timeout=15, what="the completed update")
    assert receiver.states()[-1] == "TASK_STATE_COMPLETED"
    for hook in receiver.hooks:
        assert hook.headers["x-a2a-notification-token"] == "secret-token"
        assert hook.headers["authorization"] == "Bearer hook-credentials"
        assert hook.headers["content-type"] == "application/json"
        [kind] = hook.body  # a StreamResponse holds exactly one of its fields
        assert kind in ("task", "statusUpdate", "artifactUpdate"), hook.body
        assert (hook.body[kind].get("taskId") or hook.body[kind].get("id")) == task_id


async def test_delivery_is_retried_until_the_receiver_accepts(http: httpx.AsyncClient, receiver: Receiver) -> None:
    """The receiver answers 503 twice: the update is sent again, with backoff, until it is taken."""
    receiver.failures = 2
    send = {"message": msg(), "configuration": {"taskPushNotificationConfig": {"url": receiver.url}}}
    got = await call(http, "JSONRPC", "SendMessage", send)
    assert got["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await eventually(lambda: "TASK_STATE_COMPLETED" in receiver.states(), timeout=20, what="the retried delivery")
    assert receiver.answered[:3] == [503, 503, 200], receiver.answered


@pytest.mark.parametrize("binding", BINDINGS)
async def test_config_on_a_running_task_hears_its_end(
    http: httpx.AsyncClient, worker: Worker, binding: str, receiver: Receiver
) -> None:
    """A config created while the task runs (returnImmediately) is followed by the gateway: the webhook hears
    the task complete."""
    send = {"message": msg({"wait": True}), "configuration": {"returnImmediately": True}}
    got = await call(http, binding, "SendMessage", send)
    task_id = got["result"]["task"]["id"]
    await within(worker.started.wait(), 15, "the task to start")
    created = await call(http, binding, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": receiver.url})
    assert "error" not in created, created
    worker.release.set()
    await eventually(lambda: "TASK_STATE_COMPLETED" in receiver.states(), timeout=15, what="the completed update")


async def test_stream_client_leaving_early_does_not_stop_delivery(
    http: httpx.AsyncClient, worker: Worker, receiver: Receiver
) -> None:
    """A SendStreamingMessage with a webhook whose client goes away after the first event: the gateway follows
    the task for the webhook, which hears it complete."""
    config = {"url": receiver.url}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": msg({"wait": True}), "configuration": {"taskPushNotificationConfig": config}},
    }
    async with http.stream("POST", "/", json=body, headers=V) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                break  # the first event: then the client leaves
    await within(worker.started.wait(), 15, "the task to start")
    worker.release.set()
    await eventually(lambda: "TASK_STATE_COMPLETED" in receiver.states(), timeout=15, what="the completed update")
