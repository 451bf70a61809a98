"""A2A 1.0 MUST behaviours the TCK checks, kept in CI without the TCK (docs/gateway.md "Conformance").

CancelTask and SubscribeToTask of an unknown task are TaskNotFoundError (CORE-CANCEL-003, STREAM-SUB-004),
SubscribeToTask of a finished task is UnsupportedOperationError (STREAM-SUB-003), and a JSON-RPC request with
the wrong Content-Type is ContentTypeNotSupportedError -32005 with HTTP 415 (JSONRPC-SSE-002).

Over both transports, for an agent and a workflow: a message to a terminal task is refused, and so is its exact
resend (CORE-SEND-002); a taskId with another contextId is refused (CORE-MULTI-006); a messageId reused for a
different message starts a new task while an exact resend gets the first task; a workflow's task keeps its
history like an agent's; integers in data parts stay integers both ways.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.errors import InputRequired

V = {"A2A-Version": "1.0"}


FLOW = """
name: conf_flow
nodes:
  - {id: a, type: agent, agent_name: conf, input: "{{workflow.input}}"}
output_mapping: "{{a.output}}"
"""

REVIEW_FLOW = """
name: conf_review
nodes:
  - {id: a, type: agent, agent_name: conf, input: "{{workflow.input}}"}
  - {id: check, type: human_review, depends_on: [a], prompt: "ok?", data: "{{a.output}}"}
output_mapping: "{{check.output}}"
"""

TARGETS = ["conf", "conf_flow"]


async def answer(input: Any, ctx: Any) -> Any:
    """``"done"`` for text; for data, asks for input when told to, else echoes it with the Python type of each
    value as the agent received it."""
    if not isinstance(input, dict):
        return "done"
    if input.get("ask"):
        raise InputRequired("more input, please")
    return {"echo": input, "types": {k: type(v).__name__ for k, v in input.items()}}


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(**fields: Any) -> dict[str, Any]:
    """A SendMessage body: text ``hi`` unless ``parts`` are given; other fields go into the message."""
    msg = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}], **fields}
    return {"message": msg}


async def send(http: httpx.AsyncClient, binding: str, agent: str, body: dict[str, Any]) -> dict[str, Any]:
    """SendMessage over ``binding``: ``{"task": ...}`` or ``{"error": {"code": ...}}`` (the HTTP+JSON error's
    reason mapped to its JSON-RPC code)."""
    if binding == "JSONRPC":
        r = await http.post(f"/agents/{agent}/", json=rpc("SendMessage", body), headers=V)
        data = r.json()
        return {"task": data["result"]["task"]} if "result" in data else {"error": data["error"]}
    r = await http.post(f"/agents/{agent}/message:send", json=body, headers=V)
    data = r.json()
    if r.status_code == 200:
        return {"task": data["task"]}
    return {"error": {"code": REST_CODES[reason(data)], "status": r.status_code, "message": data["error"]["message"]}}


REST_CODES = {"UNSUPPORTED_OPERATION": -32004, "INVALID_PARAMS": -32602, "TASK_NOT_FOUND": -32001}
BINDINGS = ["JSONRPC", "HTTP+JSON"]


def reason(body: dict[str, Any]) -> str:
    details = body["error"].get("data") or body["error"].get("details")
    return str(details[0]["reason"])


@pytest.fixture
async def http(agent_host: Any, executor: Any, gateway: Any, client: Client) -> Any:
    await agent_host("conf", answer)
    await executor({"conf_flow": FLOW, "conf_review": REVIEW_FLOW})
    await client.registry.wait_for("conf_flow", 5)
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


async def completed(http: httpx.AsyncClient, binding: str, agent: str, **fields: Any) -> dict[str, Any]:
    got = await send(http, binding, agent, message(**fields))
    assert "task" in got, got
    assert got["task"]["status"]["state"] == "TASK_STATE_COMPLETED", got
    return dict(got["task"])


async def paused(http: httpx.AsyncClient, binding: str, agent: str) -> dict[str, Any]:
    got = await send(http, binding, agent, message(parts=[{"data": {"ask": True}}]))
    assert got["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", got
    return dict(got["task"])


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_terminal_task_refuses_a_message_and_its_resend(
    http: httpx.AsyncClient, binding: str, agent: str
) -> None:
    """CORE-SEND-002: a message to a terminal task is UnsupportedOperationError, and its exact resend is too
    (before, the resend was a JetStream duplicate and was answered with the finished task)."""
    task = await completed(http, binding, agent)
    follow_up = message(taskId=task["id"])
    for attempt in ("first", "resend"):
        got = await send(http, binding, agent, follow_up)
        assert got.get("error", {}).get("code") == -32004, f"{attempt}: {got}"


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_task_with_another_context_is_refused(http: httpx.AsyncClient, binding: str, agent: str) -> None:
    """CORE-MULTI-006: a taskId with a contextId that is not the task's is InvalidParams, naming both; the task
    still waits for its input."""
    task = await paused(http, binding, agent)
    got = await send(http, binding, agent, message(taskId=task["id"], contextId="some-other-context"))
    assert got.get("error", {}).get("code") == -32602, got
    assert "some-other-context" in got["error"]["message"], got
    assert task["contextId"] in got["error"]["message"], got
    r = await http.get(f"/agents/{agent}/tasks/{task['id']}", headers=V)
    assert r.json()["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", r.text


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_reused_message_id_with_other_content_is_a_new_task(
    http: httpx.AsyncClient, binding: str, agent: str
) -> None:
    """A messageId reused for a different message is a new request (its task's history shows the messageId with
    a digest of its parts); an exact resend of either is de-duplicated to its task."""
    message_id = uuid.uuid4().hex
    first = await completed(http, binding, agent, messageId=message_id, parts=[{"data": {"n": 1}}])
    other = await completed(http, binding, agent, messageId=message_id, parts=[{"data": {"n": 2}}])
    assert other["id"] != first["id"]
    assert other["artifacts"][0]["parts"][0]["data"]["echo"] == {"n": 2}, other
    again = await completed(http, binding, agent, messageId=message_id, parts=[{"data": {"n": 1}}])
    assert again["id"] == first["id"]
    again_other = await completed(http, binding, agent, messageId=message_id, parts=[{"data": {"n": 2}}])
    assert again_other["id"] == other["id"]
    r = await http.get(f"/agents/{agent}/tasks/{other['id']}", headers=V)
    [sent] = r.json()["history"]
    assert sent["messageId"].startswith(message_id + "~"), sent


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_task_history_holds_the_callers_messages(http: httpx.AsyncClient, binding: str, agent: str) -> None:
    """GetTask's history holds the message that started the task and the one that continued it, for a workflow
    as for an agent (a workflow's answer to input-required is its review body); historyLength=1 keeps the last."""
    task = await paused(http, binding, agent)
    cont = {"data": {"decision": "approve", "data": None}} if agent == "conf_flow" else {"data": {"go": 1}}
    got = await send(http, binding, agent, message(taskId=task["id"], parts=[cont]))
    assert got["task"]["status"]["state"] == "TASK_STATE_COMPLETED", got
    r = await http.get(f"/agents/{agent}/tasks/{task['id']}", headers=V)
    history = r.json()["history"]
    assert [m["parts"][0]["data"] for m in history] == [{"ask": True}, cont["data"]], history
    r = await http.get(f"/agents/{agent}/tasks/{task['id']}?historyLength=1", headers=V)
    assert [m["parts"][0]["data"] for m in r.json()["history"]] == [cont["data"]], r.text


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_integers_in_data_parts_stay_integers(http: httpx.AsyncClient, binding: str, agent: str) -> None:
    """protobuf's Struct holds numbers as doubles: an integer reaches the agent as an int and the client as an
    integer, a fraction stays a float (gateway/conversion.py)."""
    data = {"n": 2, "big": 2**40, "ratio": 2.5, "nested": [1, {"k": 3}]}
    got = await send(http, binding, agent, message(parts=[{"data": data}]))
    result = got["task"]["artifacts"][0]["parts"][0]["data"]
    assert result["types"] == {"n": "int", "big": "int", "ratio": "float", "nested": "list"}, result
    assert result["echo"] == data
    assert all(type(result["echo"][k]) is type(v) for k, v in data.items()), result["echo"]
    assert type(result["echo"]["nested"][1]["k"]) is int


@pytest.mark.parametrize("agent", TARGETS)
async def test_card_for_a2a_1_has_no_0_3_fields(http: httpx.AsyncClient, agent: str) -> None:
    """CARD-STRUCT-001 for a client that says ``A2A-Version: 1.0``: the 1.0 card alone; without the header (a
    0.3 client sends none) the 0.3 fields and interfaces are there too; the card varies on A2A-Version."""
    path = f"/agents/{agent}/.well-known/agent-card.json"
    compat = await http.get(path)
    strict = await http.get(path, headers=V)
    legacy = {"url", "preferredTransport", "protocolVersion", "additionalInterfaces"}
    assert legacy <= set(compat.json()), compat.json()
    assert not legacy & set(strict.json()), strict.json()
    assert {i["protocolVersion"] for i in compat.json()["supportedInterfaces"][:4]} == {"1.0", "0.3"}
    assert [i["protocolVersion"] for i in strict.json()["supportedInterfaces"][:2]] == ["1.0", "1.0"]
    assert all(i["protocolVersion"] != "0.3" for i in strict.json()["supportedInterfaces"])
    assert strict.headers["vary"] == compat.headers["vary"] == "A2A-Version"
    assert strict.headers["etag"] != compat.headers["etag"]


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", TARGETS)
async def test_resend_of_an_accepted_continuation_gets_the_task(
    http: httpx.AsyncClient, binding: str, agent: str
) -> None:
    """An exact resend of the message that continued (and finished) a task is the same request: it gets the
    finished task, not the refusal a new message to a finished task gets."""
    task = await paused(http, binding, agent)
    cont = {"data": {"decision": "approve", "data": None}} if agent == "conf_flow" else {"data": {"go": 1}}
    follow_up = message(taskId=task["id"], parts=[cont])
    first = await send(http, binding, agent, follow_up)
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
    again = await send(http, binding, agent, follow_up)
    assert again.get("task", {}).get("id") == task["id"], again
    assert again["task"]["status"]["state"] == "TASK_STATE_COMPLETED", again


@pytest.mark.parametrize("binding", BINDINGS)
async def test_any_message_answers_an_agents_question_in_a_workflow(http: httpx.AsyncClient, binding: str) -> None:
    """A workflow paused because its agent asked for input is continued by a plain message, as the agent would be
    (its input reaches the agent as the approved data); a human review still takes a review answer only."""
    task = await paused(http, binding, "conf_flow")
    assert task["status"]["message"]["parts"][1]["data"]["free_answer"] is True, task["status"]
    got = await send(http, binding, "conf_flow", message(taskId=task["id"], parts=[{"text": "more"}]))
    assert got["task"]["status"]["state"] == "TASK_STATE_COMPLETED", got
    assert got["task"]["artifacts"][0]["parts"][0]["data"]["echo"] == {
        "decision": "approve",
        "data": {"text": "more"},
    }, got

    got = await send(http, binding, "conf_review", message(parts=[{"data": {"n": 1}}]))
    review = got["task"]
    assert review["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", got
    refused = await send(http, binding, "conf_review", message(taskId=review["id"], parts=[{"text": "yes"}]))
    assert refused.get("error", {}).get("code") == -32602, refused
    assert '"decision"' in refused["error"]["message"], refused
    answer = {"data": {"decision": "approve", "data": None}}
    got = await send(http, binding, "conf_review", message(taskId=review["id"], parts=[answer]))
    assert got["task"]["status"]["state"] == "TASK_STATE_COMPLETED", got
