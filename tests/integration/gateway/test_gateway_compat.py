"""Older clients (A2A 0.3) and human review over HTTP, through the gateway."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from a2a.types import a2a_pb2 as pb

from a2amesh.client import Client
from tests.support.gateway import sdk_client
from tests.support.refund import REFUND, pay, propose
from tests.support.waiting import within


async def echo(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"got": input}


async def test_v0_3_jsonrpc_request(agent_host: Any, gateway: Any) -> None:
    """A 0.3 ``message/send`` (kind-tagged parts, no A2A-Version header) is served and answered in 0.3 shape."""
    await agent_host("echo", echo)
    url = await gateway()
    body = {
        "jsonrpc": "2.0",
        "id": "old-1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": uuid.uuid4().hex,
                "role": "user",
                "parts": [{"kind": "data", "data": {"v": 3}}],
            }
        },
    }
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/agents/echo/", json=body)
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        assert r.json()["id"] == "old-1"
        assert result["kind"] == "task"
        assert result["status"]["state"] == "completed"
        card = (await http.get("/agents/echo/.well-known/agent-card.json")).json()
        assert card["url"] == f"{url}/agents/echo/"  # the 0.3 fields a 0.3 client reads


async def test_human_review_paused_and_resumed_over_http(
    agent_host: Any, executor: Any, client: Client, gateway: Any
) -> None:
    """A review pauses the task (INPUT_REQUIRED); a SendMessage with its task id over HTTP resumes it."""
    await agent_host("propose", propose)
    await agent_host("pay", pay)
    await executor({"refund": REFUND})
    await client.registry.wait_for("refund", 5)
    url = await gateway()
    async with sdk_client(f"{url}/agents/refund", "HTTP+JSON", streaming=False) as c:
        msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
        msg.parts.add().data.struct_value.update({"amount": 30})
        [paused] = [e async for e in c.send_message(pb.SendMessageRequest(message=msg))]
        assert paused.task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        answer = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, task_id=paused.task.id)
        answer.parts.add().data.struct_value.update({"decision": "edit", "data": {"amount": 20}})
        events = await within(_collect(c.send_message(pb.SendMessageRequest(message=answer))), 15, "the resumed run")
        done = events[-1].task
        assert done.id == paused.task.id
        assert done.status.state == pb.TASK_STATE_COMPLETED, done.status


async def _collect(stream: Any) -> list[pb.StreamResponse]:
    return [e async for e in stream]
