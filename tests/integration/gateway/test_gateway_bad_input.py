"""The gateway answers bad input precisely (JSON-RPC codes, HTTP statuses, A2A error bodies) and keeps serving."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from tests.support.waiting import eventually, within

V = {"A2A-Version": "1.0"}


async def echo(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await ctx.emit_status("working")
    return {"input": input, "user": ctx.user, "traceparent": ctx.headers.get("traceparent")}


def send(params: dict[str, Any] | None = None, method: str = "SendMessage", rid: Any = 1) -> dict[str, Any]:
    if params is None:
        params = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": {"x": 1}}]}}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def reason(body: dict[str, Any]) -> str:
    details = body["error"].get("data") or body["error"].get("details")
    return str(details[0]["reason"])


@pytest.fixture
async def http(agent_host: Any, gateway: Any, client: Client) -> Any:
    await agent_host("echo", echo)
    url = await gateway(max_body_bytes=4096)
    async with httpx.AsyncClient(base_url=url, timeout=20) as h:
        yield h


async def still_serving(http: httpx.AsyncClient) -> None:
    r = await http.post("/agents/echo/", json=send(), headers=V)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text


async def test_jsonrpc_errors(http: httpx.AsyncClient) -> None:
    """Parse error, unknown method, bad params, wrong or missing version, unknown task: each its code."""
    r = await http.post("/agents/echo/", content=b"{not json", headers={**V, "Content-Type": "application/json"})
    assert r.json()["error"]["code"] == -32700
    assert (await http.post("/agents/echo/", json=send(method="Nope"), headers=V)).json()["error"]["code"] == -32601
    bad = await http.post("/agents/echo/", json=send({"message": "x"}), headers=V)
    assert bad.json()["error"]["code"] == -32602
    empty = send({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}})
    r = await http.post("/agents/echo/", json=empty, headers=V)
    assert r.json()["error"]["code"] == -32602
    assert "parts" in r.json()["error"]["message"]
    r = await http.post("/agents/echo/", json=send(), headers={"A2A-Version": "2.0"})
    assert r.json()["error"]["code"] == -32009
    assert (await http.post("/agents/echo/", json=send())).json()["error"]["code"] == -32009
    r = await http.post("/agents/echo/", json=send({"id": "nope"}, method="GetTask", rid="q"), headers=V)
    assert r.json()["error"]["code"] == -32001
    assert r.json()["id"] == "q"
    await still_serving(http)


async def test_http_errors(http: httpx.AsyncClient) -> None:
    """Unknown agent 404 (JSON-RPC and REST bodies), unknown task 404, body too large 413, wrong type 415."""
    r = await http.post("/agents/ghost/", json=send(), headers=V)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == -32000
    assert reason(r.json()) == "AGENT_NOT_FOUND"
    r = await http.get("/agents/ghost/tasks/x", headers=V)
    assert r.status_code == 404
    assert reason(r.json()) == "AGENT_NOT_FOUND"
    assert (await http.get("/agents/ghost/.well-known/agent-card.json")).status_code == 404
    r = await http.get("/agents/echo/tasks/nope", headers=V)
    assert r.status_code == 404
    assert reason(r.json()) == "TASK_NOT_FOUND"
    big = send({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x" * 5000}]}})
    r = await http.post("/agents/echo/", json=big, headers=V)
    assert r.status_code == 413
    assert reason(r.json()) == "PAYLOAD_TOO_LARGE"
    r = await http.post("/agents/echo/", content=json.dumps(send()), headers={**V, "Content-Type": "text/plain"})
    assert r.status_code == 415
    assert (await http.get("/agents/echo/no/such/path", headers=V)).status_code == 404
    await still_serving(http)


async def test_rest_binding_send_and_unknown_method(http: httpx.AsyncClient) -> None:
    """HTTP+JSON SendMessage answers the task; traceparent reaches the agent."""
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = send()["params"]
    r = await http.post("/agents/echo/message:send", json=body, headers={**V, "traceparent": tp})
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["artifacts"][0]["parts"][0]["data"]["traceparent"] == tp


async def test_client_disconnect_mid_stream_does_not_cancel(http: httpx.AsyncClient, client: Client) -> None:
    """An SSE client that goes away after the first event leaves the task running to completion."""
    params = send(method="SendStreamingMessage")
    async with http.stream("POST", "/agents/echo/", json=params, headers=V) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                task_id = json.loads(line[5:])["result"]["task"]["id"]
                break
    done = await eventually(lambda: _state(client, task_id), timeout=10, what="the abandoned stream's task to complete")
    assert done == "TASK_STATE_COMPLETED"


async def _state(client: Client, task_id: str) -> str | None:
    task = await client.get_task("echo", task_id)
    return task.status.state.value if task.status.state.value == "TASK_STATE_COMPLETED" else None


async def test_200_concurrent_streams(http: httpx.AsyncClient) -> None:
    """200 SSE streams at once through one gateway all end with their final event."""

    async def one(many: httpx.AsyncClient, i: int) -> str:
        last = ""
        async with many.stream(
            "POST", "/agents/echo/", json=send(method="SendStreamingMessage", rid=i), headers=V
        ) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    last = line
        return str(json.loads(last[5:])["result"]["statusUpdate"]["status"]["state"])

    limits = httpx.Limits(max_connections=250)
    async with httpx.AsyncClient(base_url=str(http.base_url), timeout=60, limits=limits) as many:
        states = await within(asyncio.gather(*(one(many, i) for i in range(200))), 90, "200 concurrent streams")
    assert states == ["TASK_STATE_COMPLETED"] * 200


async def test_auth_keys_allow_list_user_and_rate_limit(agent_host: Any, gateway: Any) -> None:
    """401 without or with a wrong key, 403 for a key not allowed, the key id as A2A-User, 429 past the rate."""
    await agent_host("echo", echo)
    await agent_host("other", echo)
    keys = parse_api_keys("alice=s3cret-a@echo,bob=sha256:" + hashlib.sha256(b"s3cret-b").hexdigest())
    url = await gateway(api_keys=keys, rate_limit=1.0, rate_burst=3)
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        card = (await http.get("/agents/echo/.well-known/agent-card.json")).json()
        assert set(card["securitySchemes"]) == {"bearer", "apiKey"}
        r = await http.post("/agents/echo/", json=send(), headers=V)
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        r = await http.post("/agents/echo/", json=send(), headers={**V, "Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = await http.post("/agents/other/", json=send(), headers={**V, "Authorization": "Bearer s3cret-a"})
        assert r.status_code == 403
        assert "alice" in r.json()["error"]["message"]
        r = await http.post("/agents/echo/", json=send(), headers={**V, "X-API-Key": "s3cret-a"})
        assert r.json()["result"]["task"]["artifacts"][0]["parts"][0]["data"]["user"] == "alice"
        r = await http.post("/agents/other/", json=send(), headers={**V, "Authorization": "Bearer s3cret-b"})
        assert r.json()["result"]["task"]["artifacts"][0]["parts"][0]["data"]["user"] == "bob"
        statuses = [
            (await http.post("/agents/echo/", json=send(), headers={**V, "X-API-Key": "s3cret-a"})).status_code
            for _ in range(4)
        ]
        assert 429 in statuses
