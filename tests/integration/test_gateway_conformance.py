"""A2A 1.0 MUST behaviours the TCK checks, kept in CI without the TCK (docs/gateway.md "Conformance").

CancelTask and SubscribeToTask of an unknown task are TaskNotFoundError (CORE-CANCEL-003, STREAM-SUB-004),
SubscribeToTask of a finished task is UnsupportedOperationError (STREAM-SUB-003), and a JSON-RPC request with
the wrong Content-Type is ContentTypeNotSupportedError -32005 with HTTP 415 (JSONRPC-SSE-002).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from a2amesh.client import Client

V = {"A2A-Version": "1.0"}


async def answer(input: Any, ctx: Any) -> str:
    return "done"


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message() -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}


def reason(body: dict[str, Any]) -> str:
    details = body["error"].get("data") or body["error"].get("details")
    return str(details[0]["reason"])


@pytest.fixture
async def http(agent_host: Any, gateway: Any, client: Client) -> Any:
    await agent_host("conf", answer)
    url = await gateway()
    async with httpx.AsyncClient(base_url=url, timeout=20) as h:
        yield h


async def finished_task(http: httpx.AsyncClient) -> str:
    r = await http.post("/agents/conf/message:send", json=message(), headers=V)
    task = r.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", r.text
    return str(task["id"])


async def test_cancel_unknown_task_is_task_not_found(http: httpx.AsyncClient) -> None:
    """CORE-CANCEL-003 over JSON-RPC (-32001) and HTTP+JSON (404)."""
    r = await http.post("/agents/conf/", json=rpc("CancelTask", {"id": "no-such-task"}), headers=V)
    assert r.json()["error"]["code"] == -32001, r.text
    r = await http.post("/agents/conf/tasks/no-such-task:cancel", headers=V)
    assert r.status_code == 404, r.text
    assert reason(r.json()) == "TASK_NOT_FOUND"


async def test_subscribe_unknown_task_is_task_not_found(http: httpx.AsyncClient) -> None:
    """STREAM-SUB-004 over JSON-RPC (-32001, in the stream) and HTTP+JSON (404)."""
    r = await http.post("/agents/conf/", json=rpc("SubscribeToTask", {"id": "no-such-task"}), headers=V)
    assert '"code":-32001' in r.text.replace(" ", ""), r.text
    r = await http.post("/agents/conf/tasks/no-such-task:subscribe", headers=V)
    assert r.status_code == 404, r.text


async def test_subscribe_finished_task_is_unsupported(http: httpx.AsyncClient) -> None:
    """STREAM-SUB-003: a task in a terminal state has nothing to stream (-32004 / 400)."""
    task_id = await finished_task(http)
    r = await http.post("/agents/conf/", json=rpc("SubscribeToTask", {"id": task_id}), headers=V)
    assert '"code":-32004' in r.text.replace(" ", ""), r.text
    r = await http.post(f"/agents/conf/tasks/{task_id}:subscribe", headers=V)
    assert r.status_code == 400, r.text
    assert reason(r.json()) == "UNSUPPORTED_OPERATION"


async def test_cancel_finished_task_is_not_cancelable(http: httpx.AsyncClient) -> None:
    """CORE-CANCEL-002: a known task in a terminal state is TaskNotCancelableError, not TaskNotFound."""
    task_id = await finished_task(http)
    r = await http.post("/agents/conf/", json=rpc("CancelTask", {"id": task_id}), headers=V)
    assert r.json()["error"]["code"] == -32002, r.text


async def test_wrong_content_type_is_content_type_not_supported(http: httpx.AsyncClient) -> None:
    """JSONRPC-SSE-002: a JSON-RPC body sent as text/plain is -32005 with HTTP 415."""
    body = str(rpc("SendMessage", message())).encode()
    r = await http.post("/agents/conf/", content=body, headers={**V, "Content-Type": "text/plain"})
    assert r.status_code == 415
    assert r.json()["error"]["code"] == -32005, r.text
