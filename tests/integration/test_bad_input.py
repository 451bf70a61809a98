"""Bad input on the wire: each gets a precise JSON-RPC error and the agent keeps serving."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import RpcError, TransportError
from a2amesh.ids import nuid
from a2amesh.protocol import SendMessageRequest, TaskState, codes
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within


async def echo(input: Any, ctx: Any) -> Any:
    return input


def good_body(text: str = "hi") -> bytes:
    params = SendMessageRequest(message=make_message(text)).to_json_dict()
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params}).encode()


async def send_raw(bus: Bus, agent: str, body: bytes, inbox: Inbox, **headers: str) -> None:
    hdrs = {h.VERSION: "1.0", h.REPLY_TO: inbox.subject, h.MSG_ID: nuid()}
    hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
    hdrs = {k: v for k, v in hdrs.items() if v != ""}
    await bus.js_publish(bus.subjects.request(agent), body, hdrs)


async def still_serves(client: Client) -> None:
    task = await within(client.send("echo", {"ok": True}), 10, "a good request after the bad one")
    assert task.status.state == TaskState.COMPLETED
    assert task.output() == {"ok": True}


async def no_pending_acks(bus: Bus, agent: str) -> Any:
    async def check() -> Any:
        info = await bus.jsm.consumer_info(bus.subjects.tasks_stream, agent)
        return info if info.num_ack_pending == 0 else None

    return await eventually(check, timeout=5, what="every request to be acked or terminated")


def error_of(resp: dict[str, Any]) -> dict[str, Any]:
    assert "error" in resp, f"expected an error response, got {resp}"
    return resp["error"]  # type: ignore[no-any-return]


CASES = [
    ("malformed JSON", b'{"jsonrpc": "2.0", "id": 1, "method": ', {}, codes.PARSE_ERROR, "not valid JSON"),
    (
        "wrong jsonrpc",
        json.dumps({"jsonrpc": "1.0", "id": 1, "method": "SendMessage", "params": {}}).encode(),
        {},
        codes.INVALID_REQUEST,
        "request.jsonrpc",
    ),
    (
        "unknown method",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "DoMagic", "params": {}}).encode(),
        {},
        codes.METHOD_NOT_FOUND,
        "DoMagic",
    ),
    ("missing A2A-Version", None, {"A2A_Version": ""}, codes.VERSION_NOT_SUPPORTED, "missing"),
    ("unsupported A2A-Version", None, {"A2A_Version": "0.3"}, codes.VERSION_NOT_SUPPORTED, "'0.3'"),
    (
        "message with no parts",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
            }
        ).encode(),
        {},
        codes.INVALID_PARAMS,
        "parts",
    ),
    (
        "wrong enum string",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}},
            }
        ).encode(),
        {},
        codes.INVALID_PARAMS,
        "params.message.role",
    ),
]


@pytest.mark.parametrize(("case", "body", "headers", "code", "says"), CASES, ids=[c[0] for c in CASES])
async def test_bad_request_gets_precise_error(
    agent_host: Any,
    client: Client,
    bus: Bus,
    case: str,
    body: bytes | None,
    headers: dict[str, str],
    code: int,
    says: str,
) -> None:
    """Each kind of malformed request is answered with its JSON-RPC code and a message naming the problem."""
    await agent_host("echo", echo)
    inbox = await Inbox(bus).start()
    await send_raw(bus, "echo", body or good_body(), inbox, **headers)
    resp, hdrs = await inbox.next(f"the error reply to {case}")
    err = error_of(resp)
    assert err["code"] == code
    assert says in err["message"]
    assert hdrs[h.FINAL] == "true"
    assert hdrs[h.AGENT] == "echo"
    if code == codes.VERSION_NOT_SUPPORTED:
        assert "1.0" in err["message"], "the error must say which versions are served"
    await still_serves(client)


async def test_expired_deadline_answered_and_acked(agent_host: Any, client: Client, bus: Bus) -> None:
    """A request already past its A2A-Deadline is answered DEADLINE_EXCEEDED (not run) and acked."""
    ran: list[Any] = []

    async def record(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return input

    await agent_host("echo", record)
    inbox = await Inbox(bus).start()
    past = str(int((time.time() - 60) * 1000))
    await send_raw(bus, "echo", good_body(), inbox, A2A_Deadline=past)
    resp, _ = await inbox.next("the deadline error")
    err = error_of(resp)
    assert err["code"] == codes.TRANSPORT_ERROR
    assert err["data"][0]["reason"] == codes.DEADLINE_EXCEEDED
    assert err["data"][0]["domain"] == "a2amesh"
    assert ran == []
    await still_serves(client)
    await no_pending_acks(bus, "echo")


async def test_oversized_request_rejected(agent_host: Any, client: Client, bus: Bus, settings: Settings) -> None:
    """A request above the agent's max_request_bytes is answered PAYLOAD_TOO_LARGE; the agent keeps serving."""
    await agent_host("echo", echo)
    inbox = await Inbox(bus).start()
    big = good_body("x" * (settings.max_request_bytes + 10))
    await send_raw(bus, "echo", big, inbox)
    resp, _ = await inbox.next("the payload error")
    err = error_of(resp)
    assert err["data"][0]["reason"] == codes.PAYLOAD_TOO_LARGE
    assert str(settings.max_request_bytes) in err["message"]
    await still_serves(client)


async def test_client_refuses_payload_above_server_max(agent_host: Any, client: Client, bus: Bus) -> None:
    """The client refuses a request above the server's max_payload before publishing it."""
    await agent_host("echo", echo)
    with pytest.raises(TransportError) as e:
        await client.send("echo", "x" * (bus.max_payload + 1))
    assert e.value.reason == codes.PAYLOAD_TOO_LARGE
    await still_serves(client)


async def test_request_without_reply_to_is_terminated(agent_host: Any, client: Client, bus: Bus) -> None:
    """A work request without A2A-Reply-To is answered nowhere and terminated; the agent serves on."""
    ran: list[Any] = []

    async def record(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return input

    await agent_host("echo", record)
    inbox = await Inbox(bus).start()
    await send_raw(bus, "echo", good_body(), inbox, A2A_Reply_To="")
    await still_serves(client)
    assert ran == [{"ok": True}]
    info = await no_pending_acks(bus, "echo")
    assert info.num_redelivered == 0


async def test_unknown_task_id_is_task_not_found(agent_host: Any, client: Client) -> None:
    """A message continuing an unknown taskId is answered -32001 TaskNotFound."""
    await agent_host("echo", echo)
    with pytest.raises(RpcError) as e:
        await client.send("echo", make_message("more", task_id="no-such-task"))
    assert e.value.code == codes.TASK_NOT_FOUND
    await still_serves(client)


async def test_bad_control_request(agent_host: Any, client: Client, bus: Bus) -> None:
    """A malformed control request gets a precise error on its reply inbox; the agent keeps serving."""
    await agent_host("echo", echo)
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"nope": 1}}).encode()
    msg = await bus.request(bus.subjects.control("echo"), body, {h.VERSION: "1.0"}, 5)
    err = error_of(json.loads(msg.data))
    assert err["code"] == codes.INVALID_PARAMS
    assert "params.id" in err["message"]
    msg = await bus.request(bus.subjects.control("echo"), b"{", {h.VERSION: "1.0"}, 5)
    assert error_of(json.loads(msg.data))["code"] == codes.PARSE_ERROR
    await still_serves(client)
