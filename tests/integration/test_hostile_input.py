"""Hostile input on the wire (issue 28): each defect the fuzz run found, sent raw as an outside caller would.

Every message is answered precisely (or, without a usable reply subject, terminated unanswered), settled
once, and the agent or workflow keeps serving.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import RpcError, TransportError
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.ids import nuid, task_id_for
from a2amesh.protocol import Message, Part, Role, SendMessageRequest, Task, TaskState, TaskStatus, codes
from a2amesh.protocol.vocabulary import SUMMARY_KEY
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import TaskStore
from tests.integration.test_bad_input import error_of, no_pending_acks, send_raw
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within

WORKFLOW = """
name: wecho
description: passes its input through the echo agent
nodes:
  - {id: a, type: agent, agent_name: echo, input: "{{workflow.input}}"}
output_mapping: {echoed: "{{a.output}}"}
"""


@dataclass
class Target:
    kind: str
    name: str
    ran: list[Any]
    executor: WorkflowExecutor | None = None


@pytest.fixture(params=["agent", "workflow"])
async def target(request: pytest.FixtureRequest, agent_host: Any, executor: Any, client: Client) -> Target:
    ran: list[Any] = []

    async def echo(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return input

    await agent_host("echo", echo)
    t = Target(request.param, "echo", ran)
    if t.kind == "workflow":
        t.name = "wecho"
        t.executor = await executor({"wecho": WORKFLOW})
    await client.registry.wait_for(t.name, 5)
    return t


def envelope(params: Any, method: str = "SendMessage", request_id: Any = 7) -> bytes:
    """A JSON-RPC request; strings with lone surrogates are written as ``\\udXXX`` escapes (ensure_ascii)."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def message_params(**message: Any) -> dict[str, Any]:
    base = {"messageId": nuid(), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    return {"message": {**base, **message}}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def answered(bus: Bus, target: Target, body: bytes, what: str, **headers: str) -> dict[str, Any]:
    """Send ``body`` raw to the target's work subject; its one answer (an error expected), checked final."""
    inbox = await Inbox(bus).start()
    await send_raw(bus, target.name, body, inbox, **headers)
    resp, hdrs = await inbox.next(what)
    assert hdrs[h.FINAL] == "true"
    assert hdrs[h.AGENT] == target.name
    return error_of(resp)


async def serves(client: Client, target: Target) -> None:
    task = await within(client.send(target.name, {"ok": True}), 15, "a good request after the bad ones")
    assert task.status.state == TaskState.COMPLETED, task.status


async def drained(bus: Bus, target: Target) -> None:
    info = await no_pending_acks(bus, target.name)
    assert info.num_redelivered == 0, "a bad request must be settled at once, not redelivered"


# defect 1: deep nesting


async def test_deeply_nested_body_is_a_parse_error(target: Target, bus: Bus, client: Client) -> None:
    """2,000 nested arrays (past orjson's and the standard parser's limits) are -32700, terminated at once."""
    body = b'{"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": ' + nested(2000).encode() + b"}"
    err = await answered(bus, target, body, "the parse error")
    assert err["code"] == codes.PARSE_ERROR
    assert "nested deeper than 100" in err["message"]
    await drained(bus, target)
    await serves(client, target)


async def test_deep_data_part_is_a_parse_error_not_internal(target: Target, bus: Bus, client: Client) -> None:
    """A data part nested 600 deep is refused before it reaches a store or encoder (-32700, not -32603)."""
    body = envelope(message_params(parts=[{"data": json.loads(nested(600))}]))
    err = await answered(bus, target, body, "the parse error")
    assert err["code"] == codes.PARSE_ERROR
    assert err["message"].count("nested deeper") == 1
    await drained(bus, target)
    await serves(client, target)


async def test_deeply_nested_control_requests(target: Target, bus: Bus, client: Client) -> None:
    """Deep control requests are -32700 on the NATS reply inbox, and on A2A-Reply-To when published."""
    body = b'{"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": ' + nested(2000).encode() + b"}"
    msg = await bus.request(bus.subjects.control(target.name), body, {h.VERSION: "1.0"}, 5)
    assert error_of(json.loads(msg.data))["code"] == codes.PARSE_ERROR
    inbox = await Inbox(bus).start()
    body = body.replace(b"GetTask", b"SubscribeToTask")
    await bus.publish(bus.subjects.control(target.name), body, {h.VERSION: "1.0", h.REPLY_TO: inbox.subject})
    resp, _ = await inbox.next("the subscribe's parse error")
    assert error_of(resp)["code"] == codes.PARSE_ERROR
    await serves(client, target)


# defect 3: lone surrogates, numeric headers, artifact URLs

SURROGATES = [
    ("text part", message_params(parts=[{"text": "a\ud800b"}]), "params.message.parts[0].text"),
    ("data key", message_params(parts=[{"data": {"k\udc00": 1}}]), "params.message.parts[0].data"),
    ("data value", message_params(parts=[{"data": {"k": ["\ud800"]}}]), "params.message.parts[0].data.k[0]"),
    ("messageId", message_params(messageId="m\ud800"), "params.message.messageId"),
]


@pytest.mark.parametrize(("case", "params", "where"), SURROGATES, ids=[c[0] for c in SURROGATES])
async def test_lone_surrogate_is_invalid_params(
    target: Target, bus: Bus, client: Client, case: str, params: dict[str, Any], where: str
) -> None:
    """An escaped lone surrogate is -32602 naming the field, never a crash in a store or id function."""
    err = await answered(bus, target, envelope(params), f"the error for a surrogate in the {case}")
    assert err["code"] == codes.INVALID_PARAMS
    assert where in err["message"]
    assert target.ran == []
    await drained(bus, target)
    await serves(client, target)


async def test_lone_surrogate_task_id_in_get_task(target: Target, bus: Bus) -> None:
    """GetTask of an id holding a lone surrogate is -32602 naming params.id."""
    body = envelope({"id": "t\ud800"}, method="GetTask")
    msg = await bus.request(bus.subjects.control(target.name), body, {h.VERSION: "1.0"}, 5)
    err = error_of(json.loads(msg.data))
    assert err["code"] == codes.INVALID_PARAMS
    assert "params.id" in err["message"]


HEADERS = [
    ("320-digit deadline", {"A2A_Deadline": "9" * 320}, h.DEADLINE),
    ("deadline past year 9999", {"A2A_Deadline": "9" * 16}, h.DEADLINE),
    ("negative deadline", {"A2A_Deadline": "-5"}, h.DEADLINE),
    ("unicode-digit call depth", {"A2A_Call_Depth": "\u00b2"}, h.CALL_DEPTH),
    ("40-digit call depth", {"A2A_Call_Depth": "1" * 40}, h.CALL_DEPTH),
]


@pytest.mark.parametrize(("case", "headers", "name"), HEADERS, ids=[c[0] for c in HEADERS])
async def test_numeric_headers_are_range_checked(
    target: Target, bus: Bus, client: Client, case: str, headers: dict[str, str], name: str
) -> None:
    """Numeric headers out of range are -32600 naming the header (no OverflowError, no -32603)."""
    body = SendMessageRequest(message=make_message("hi")).to_json_dict()
    err = await answered(bus, target, envelope(body), f"the error for a {case}", **headers)
    assert err["code"] == codes.INVALID_REQUEST
    assert name in err["message"]
    await drained(bus, target)
    await serves(client, target)


async def test_artifact_url_naming_nothing(target: Target, bus: Bus, client: Client, settings: Settings) -> None:
    """An artifact:// URL input that names nothing: the workflow answers -32602 naming the part; an agent
    fails the task saying so. Never -32603."""
    url = f"artifact://{settings.namespace}/ctx/task/nothing?version=3"
    message = make_message(parts=[Part(url=url)])
    if target.kind == "workflow":
        err = await answered(bus, target, envelope(SendMessageRequest(message=message).to_json_dict()), "the error")
        assert err["code"] == codes.INVALID_PARAMS
        assert "params.message.parts[0].url" in err["message"]
        assert "nothing" in err["message"]
    else:
        task = await within(client.send(target.name, message), 10, "the agent's answer")
        assert task.status.state == TaskState.FAILED
        assert task.status.message is not None
        assert "cannot load the input artifact" in task.status.message.text()
    await drained(bus, target)
    await serves(client, target)


# defect 2: reply subjects that cannot be published to

BAD_REPLY_TOKENS = [
    "inst.agent.",
    ".agent.call",
    "in st.agent.call",
    "inst.agent.ca ll",
    "inst.agent.*",
    "inst.agent.>",
    "*.agent.call",
    "inst.call",
    "a.b.c.d.e",
    "inst.agent.c\u00e9",
]


async def test_unpublishable_reply_subjects_are_terminated(target: Target, bus: Bus, client: Client) -> None:
    """Reply subjects outside the grammar (empty token, space, wildcard, no callee, a token beyond
    scope.instance.callee.call, non-ASCII) are never run nor answered: the request is terminated at once,
    and nothing retries a publish."""
    prefix = bus.subjects.reply_prefix()
    body = envelope(SendMessageRequest(message=make_message("hi")).to_json_dict())
    for tokens in BAD_REPLY_TOKENS:
        inbox = Inbox(bus)
        await send_raw(bus, target.name, body, inbox, A2A_Reply_To=prefix + tokens)
    await drained(bus, target)
    assert target.ran == []
    await serves(client, target)


async def test_final_that_cannot_be_published_is_given_up(
    target: Target,
    bus: Bus,
    client: Client,
    redis: Redis,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A final the replies stream never takes: bounded tries, one give-up line, the task stays right in Redis
    (GetTask answers it), and nothing retries it for ever."""
    inbox = await Inbox(bus).start()
    real = bus.js_publish
    refused: list[str] = []

    async def js_publish(subject: str, data: bytes, headers: Any = None, timeout: float = 5) -> Any:
        if subject == inbox.subject:
            refused.append(subject)
            raise TransportError(codes.UNAVAILABLE, f"cannot publish {subject}: refused by the test")
        return await real(subject, data, headers, timeout)

    monkeypatch.setattr(bus, "js_publish", js_publish)
    if target.executor is not None:
        target.executor.takeover.final_reply_tries = 3
        target.executor.takeover.final_reply_backoff = 0.2
    message = make_message(data={"v": 1})
    await send_raw(bus, target.name, envelope(SendMessageRequest(message=message).to_json_dict()), inbox)
    task_id = task_id_for(target.name, message.message_id)

    async def final() -> Task | None:
        try:
            task = await client.get_task(target.name, task_id)
        except RpcError:  # not claimed yet
            return None
        return task if task.status.state == TaskState.COMPLETED else None

    await eventually(final, timeout=10, what="GetTask to answer the completed task")
    if target.executor is not None:
        store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=2)

        async def given_up() -> bool:
            record = await store.record(task_id) or {}
            return record.get("final_published") == "1" and task_id not in await store.orphaned()

        await eventually(given_up, timeout=30, what="the executor to give the final up")
        assert capsys.readouterr().out.count("execution.final_undeliverable") == 1
    await no_pending_acks(bus, target.name)
    tries = len(refused)
    assert 0 < tries <= 3 * 6, f"{tries} publishes of one final"
    await serves(client, target)


# ListTasks bounded by max_payload


def big_task(agent: str, size: int) -> Task:
    text = "x" * size
    message = Message(message_id=nuid(), role=Role.USER, parts=[Part.of_text(text)])
    return Task(id=nuid(), context_id="big", status=TaskStatus(state=TaskState.COMPLETED), history=[message])


async def test_list_tasks_summarises_tasks_near_max_payload(
    target: Target, bus: Bus, client: Client, redis: Redis, settings: Settings
) -> None:
    """Tasks near max_payload are summarised in a ListTasks page (GetTask has them whole); the answer fits."""
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    big = [big_task(target.name, bus.max_payload - 2000) for _ in range(3)]
    for task in big:
        await tasks.write(task, target.name, "test", release=True)
    msg = await bus.request(
        bus.subjects.control(target.name), envelope({"contextId": "big"}, method="ListTasks"), {h.VERSION: "1.0"}, 5
    )
    assert len(msg.data) <= bus.max_payload
    page = json.loads(msg.data)["result"]
    assert {t["id"] for t in page["tasks"]} == {t.id for t in big}
    assert all(t["metadata"][SUMMARY_KEY] is True for t in page["tasks"])
    whole = await client.get_task(target.name, big[0].id)
    assert whole.history is not None
    assert len(whole.history[0].parts[0].text or "") == bus.max_payload - 2000


async def test_list_tasks_pages_fit_max_payload(
    target: Target, bus: Bus, client: Client, redis: Redis, settings: Settings
) -> None:
    """A page of tasks that would exceed max_payload carries fewer items and a next page token; paging on
    reaches every task."""
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    size = bus.max_payload // 12
    written = [big_task(target.name, size) for _ in range(20)]
    for task in written:
        await tasks.write(task, target.name, "test", release=True)
    seen: list[str] = []
    token = ""
    for _ in range(20):
        params: dict[str, Any] = {"contextId": "big", "pageSize": 100, "historyLength": 1}
        if token:
            params["pageToken"] = token
        msg = await bus.request(
            bus.subjects.control(target.name), envelope(params, method="ListTasks"), {h.VERSION: "1.0"}, 5
        )
        assert len(msg.data) <= bus.max_payload
        page = json.loads(msg.data)["result"]
        assert 0 < len(page["tasks"]) < 20
        assert page["totalSize"] == 20
        seen.extend(t["id"] for t in page["tasks"])
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert sorted(seen) == sorted(t.id for t in written)
