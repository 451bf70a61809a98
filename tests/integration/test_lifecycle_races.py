"""The lifecycle's promises in the windows between its steps (docs/lifecycle.md).

A CANCELED answered to a canceller is stored before it is answered, and nothing after it moves the task on: a
task paused for input (an agent's question, a workflow's review) canceled at once stays canceled, a second
cancel is TaskNotCancelable and a message continuing it is UnsupportedOperation. An exact resend of a request
(same messageId, a new Nats-Msg-Id, JSON-RPC id and reply subject: what a client does after a timeout) is
answered whenever it arrives, with its own JSON-RPC id. Races are tried many times at once, bounded.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.client import Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import InputRequired, RpcError
from a2amesh.ids import nuid, task_id_for
from a2amesh.protocol import ListTasksRequest, SendMessageRequest, TaskState, codes
from a2amesh.rpc import encode_request
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import Subscriber, TaskStore
from tests.integration.gateway.test_gateway_conformance import BINDINGS, REST_CODES, V, message, reason, rpc, send
from tests.support.cancelling import cancel_at_once, canceled_once_at_least
from tests.support.inbox import Inbox, publish_request
from tests.support.processes import Proc, ProcessFactory
from tests.support.waiting import eventually, within

FIRST_REVIEW = """
name: lc_review
nodes:
  - {id: check, type: human_review, prompt: "Go on with {{workflow.input.n}}?", data: "{{workflow.input}}"}
output_mapping: "{{check.output}}"
"""

REVIEW_THEN_STEP = """
name: lc_then
nodes:
  - {id: check, type: human_review, prompt: "Go on?", data: "{{workflow.input}}"}
  - {id: a, type: agent, agent_name: lc_gate, depends_on: [check], input: "{{workflow.input}}"}
output_mapping: "{{a.output}}"
"""

ONE_STEP = """
name: lc_flow
nodes:
  - {id: a, type: agent, agent_name: lc_echo, input: "{{workflow.input}}"}
output_mapping: "{{a.output}}"
"""


async def ask(input: Any, ctx: Any) -> Any:
    """Asks for input unless the message answers (``{"answer": ...}``)."""
    if isinstance(input, dict) and "answer" in input:
        return {"got": input["answer"]}
    raise InputRequired("more input, please")


class Echo:
    """Echoes its input after ``delay`` seconds; counts the runs of each input ``n``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.runs: dict[Any, int] = {}

    async def __call__(self, input: Any, ctx: Any) -> Any:
        n = input.get("n") if isinstance(input, dict) else None
        self.runs[n] = self.runs.get(n, 0) + 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return {"echo": input}


# 1. a canceled agent task that waits for input


@pytest.mark.parametrize("replicas", [1, 2])
async def test_canceled_input_required_agent_task_stays_canceled(
    replicas: int, agent_host: Any, client: Client
) -> None:
    """CancelTask of an agent task in INPUT_REQUIRED stores CANCELED before answering it: GetTask and ListTasks say
    CANCELED, a second cancel is -32002 and a message continuing the task is -32004 (12 tasks at once; with two
    replicas, both answer each CancelTask alike)."""
    for _ in range(replicas):
        await agent_host("lc_ask", ask)
    await client.registry.wait_for("lc_ask", 5)

    async def one(i: int) -> str:
        paused = await within(client.send("lc_ask", {"n": i}), 15, "the paused task")
        assert paused.status.state == TaskState.INPUT_REQUIRED, paused.status
        canceled = await within(client.cancel_task("lc_ask", paused.id), 15, "CancelTask")
        assert canceled.status.state == TaskState.CANCELED
        got = await client.get_task("lc_ask", paused.id)
        assert got.status.state == TaskState.CANCELED, f"GetTask after an answered CANCELED: {got.status.state}"
        with pytest.raises(RpcError) as again:
            await client.cancel_task("lc_ask", paused.id)
        assert again.value.code == codes.TASK_NOT_CANCELABLE
        follow = make_message(data={"answer": 1}, task_id=paused.id)
        with pytest.raises(RpcError) as refused:
            await within(client.send("lc_ask", follow), 15, "the continuation's answer")
        assert refused.value.code == codes.UNSUPPORTED_OPERATION, refused.value
        return paused.id

    ids = await asyncio.gather(*(one(i) for i in range(12)))
    listed = await client.list_tasks("lc_ask", ListTasksRequest(page_size=100))
    states = {t.id: t.status.state for t in listed.tasks}
    assert all(states.get(i) == TaskState.CANCELED for i in ids), states


# 2. a workflow cancel right after INPUT_REQUIRED


@pytest.mark.parametrize("replicas", [1, 2])
async def test_cancel_right_after_a_review_pause_is_never_lost(
    replicas: int, executor: Any, bus: Bus, settings: Settings
) -> None:
    """A workflow whose first node is a review, canceled the moment its caller gets INPUT_REQUIRED, by three
    callers at once (60 tries): every CancelTask answers CANCELED, and the task stays CANCELED (with one executor
    replica, and with two)."""
    for _ in range(replicas):
        await executor({"lc_review": FIRST_REVIEW})
    clients = [Client(bus, settings) for _ in range(3)]
    for c in clients:
        await c.start()
    try:
        await clients[0].registry.wait_for("lc_review", 5)
        for c in clients[1:]:
            await c.registry.wait_for("lc_review", 5)

        async def one(c: Client, i: int) -> tuple[str, TaskState, TaskState]:
            paused = await within(c.send("lc_review", {"n": i}), 20, "the paused task")
            assert paused.status.state == TaskState.INPUT_REQUIRED, paused.status
            canceled = await within(c.cancel_task("lc_review", paused.id, timeout=15), 20, "CancelTask")
            stored = await c.get_task("lc_review", paused.id)
            return paused.id, canceled.status.state, stored.status.state

        results = await asyncio.gather(*(one(clients[i % 3], i) for i in range(60)))
        lost = [r for r in results if r[1] != TaskState.CANCELED or r[2] != TaskState.CANCELED]
        assert not lost, f"{len(lost)} of 60 cancels answered or stored something else: {lost[:5]}"
        c = clients[0]
        for task_id, _, _ in results[:10]:
            with pytest.raises(RpcError) as again:
                await c.cancel_task("lc_review", task_id)
            assert again.value.code == codes.TASK_NOT_CANCELABLE
            follow = make_message(data={"decision": "approve", "data": None}, task_id=task_id)
            with pytest.raises(RpcError) as refused:
                await within(c.send("lc_review", follow), 15, "the refused resume")
            assert refused.value.code == codes.UNSUPPORTED_OPERATION
    finally:
        for c in clients:
            await c.close()


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("name", ["lc_ask", "lc_review"])
async def test_cancel_and_continue_at_once_agree(
    name: str, replicas: int, agent_host: Any, executor: Any, client: Client
) -> None:
    """A CancelTask and a message continuing a paused task (an agent's question, a workflow's review) sent at once
    (30 tries): one of them wins, and every answer agrees with what is stored. A CANCELED answer means the task
    stays CANCELED and the continuation was refused (-32004) or answered CANCELED; a continuation that completed
    the task means the cancel was TaskNotCancelable."""
    for _ in range(replicas):
        if name == "lc_ask":
            await agent_host("lc_ask", ask)
        else:
            await executor({"lc_review": FIRST_REVIEW})
    await client.registry.wait_for(name, 5)
    answer = {"answer": 1} if name == "lc_ask" else {"decision": "approve", "data": None}

    async def one(i: int) -> tuple[str, str, str]:
        paused = await within(client.send(name, {"n": i}), 20, "the paused task")
        follow = make_message(data=answer, task_id=paused.id)

        async def cancel() -> str:
            try:
                return (await client.cancel_task(name, paused.id, timeout=15)).status.state.value
            except RpcError as e:
                return str(e.code)

        async def resume() -> str:
            try:
                return (await client.send(name, follow, timeout=15)).status.state.value
            except RpcError as e:
                return str(e.code)

        canceled, resumed = await within(asyncio.gather(cancel(), resume()), 30, "the cancel and the continuation")
        stored = (await client.get_task(name, paused.id)).status.state.value
        return canceled, resumed, stored

    results = await asyncio.gather(*(one(i) for i in range(30)))
    c, done, not_cancelable, unsupported = (
        TaskState.CANCELED.value,
        TaskState.COMPLETED.value,
        str(codes.TASK_NOT_CANCELABLE),
        str(codes.UNSUPPORTED_OPERATION),
    )
    allowed = {(c, unsupported, c), (c, c, c), (not_cancelable, done, done)}
    wrong = [r for r in results if r not in allowed]
    assert not wrong, f"answers that disagree with the stored task: {wrong[:5]}"


@pytest.fixture
async def http(agent_host: Any, executor: Any, gateway: Any, client: Client) -> Any:
    await agent_host("lc_ask", ask)
    await executor({"lc_review": FIRST_REVIEW})
    await client.registry.wait_for("lc_ask", 5)
    await client.registry.wait_for("lc_review", 5)
    url = await gateway()
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        yield c


async def _cancel_over(http: httpx.AsyncClient, binding: str, agent: str, task_id: str) -> dict[str, Any]:
    """CancelTask over ``binding``: the task, or ``{"error": {"code"}}``."""
    if binding == "JSONRPC":
        data = (await http.post(f"/agents/{agent}/", json=rpc("CancelTask", {"id": task_id}), headers=V)).json()
        return dict(data["result"]) if "result" in data else {"error": data["error"]}
    r = await http.post(f"/agents/{agent}/tasks/{task_id}:cancel", headers=V)
    if r.status_code == 200:
        return dict(r.json())
    return {"error": {"code": -32002 if reason(r.json()) == "TASK_NOT_CANCELABLE" else r.status_code}}


async def _get_over(http: httpx.AsyncClient, binding: str, agent: str, task_id: str) -> dict[str, Any]:
    if binding == "JSONRPC":
        data = (await http.post(f"/agents/{agent}/", json=rpc("GetTask", {"id": task_id}), headers=V)).json()
        return dict(data["result"])
    return dict((await http.get(f"/agents/{agent}/tasks/{task_id}", headers=V)).json())


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("agent", ["lc_ask", "lc_review"])
async def test_cancel_of_a_paused_task_over_http(http: httpx.AsyncClient, binding: str, agent: str) -> None:
    """Through the gateway, 30 tasks at once: paused, canceled at once (CANCELED), GetTask CANCELED, a second cancel
    TaskNotCancelable, a message continuing the task UnsupportedOperation."""

    async def one(i: int) -> None:
        body = message(parts=[{"data": {"n": i}}])
        paused = await send(http, binding, agent, body)
        assert paused.get("task", {}).get("status", {}).get("state") == "TASK_STATE_INPUT_REQUIRED", paused
        task_id = paused["task"]["id"]
        canceled = await _cancel_over(http, binding, agent, task_id)
        assert canceled.get("status", {}).get("state") == "TASK_STATE_CANCELED", canceled
        stored = await _get_over(http, binding, agent, task_id)
        assert stored["status"]["state"] == "TASK_STATE_CANCELED", stored
        again = await _cancel_over(http, binding, agent, task_id)
        assert again.get("error", {}).get("code") == -32002, again
        answer = {"answer": 1} if agent == "lc_ask" else {"decision": "approve", "data": None}
        follow = await send(http, binding, agent, message(taskId=task_id, parts=[{"data": answer}]))
        assert follow.get("error", {}).get("code") == REST_CODES["UNSUPPORTED_OPERATION"], follow

    await asyncio.gather(*(one(i) for i in range(30)))


# 3. an exact resend with a new Nats-Msg-Id


async def _final(inbox: Inbox, what: str) -> dict[str, Any]:
    replies = await inbox.until_final(what, timeout=15)
    return replies[-1][0]


async def _resend_race(bus: Bus, agent: str, tries: int) -> list[tuple[Any, Any, Any, Any]]:
    """``tries`` requests, each re-sent once as a client does after a timeout (same messageId, its own Nats-Msg-Id,
    JSON-RPC id and reply subject): half at growing offsets from the first copy, half the moment the first
    answer arrives. Returns (request id, answered id) of both copies of each."""

    async def one(i: int) -> tuple[Any, Any, Any, Any]:
        msg = make_message(data={"n": i})
        first, second = await Inbox(bus, agent).start(), await Inbox(bus, agent).start()
        first_id, second_id = f"first-{i}", f"second-{i}"
        await publish_request(
            bus,
            agent,
            encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=msg), first_id),
            f"{agent}:{msg.message_id}",
            first.subject,
        )
        answer_first = asyncio.create_task(_final(first, f"the first copy's answer ({i})"))
        if i % 2:
            await asyncio.sleep(random.uniform(0, 0.06))
        else:
            await asyncio.wait({answer_first}, timeout=15)
        await publish_request(
            bus,
            agent,
            encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=msg), second_id),
            f"{agent}:{msg.message_id}:resend",
            second.subject,
        )
        a = await answer_first
        b = await _final(second, f"the resend's answer ({i}, {'at an offset' if i % 2 else 'after the answer'})")
        task_id = task_id_for(agent, msg.message_id)
        assert a["result"]["task"]["id"] == b["result"]["task"]["id"] == task_id, (a, b)
        assert b["result"]["task"]["status"]["state"] == TaskState.COMPLETED.value, b
        return first_id, a["id"], second_id, b["id"]

    return await asyncio.gather(*(one(i) for i in range(tries)))


@pytest.mark.parametrize("kind", ["agent", "workflow"])
async def test_exact_resend_is_answered_with_its_own_id(
    kind: str, agent_host: Any, executor: Any, client: Client, bus: Bus
) -> None:
    """Every copy of a request re-sent with a new Nats-Msg-Id, just before, during or right after the first copy's
    answer, gets its final, with its own JSON-RPC id; the work runs once per request (40 requests)."""
    echo = Echo(delay=0.03)
    await agent_host("lc_echo", echo)
    name = "lc_echo"
    if kind == "workflow":
        await executor({"lc_flow": ONE_STEP})
        name = "lc_flow"
    await client.registry.wait_for(name, 5)
    results = await _resend_race(bus, name, 40)
    wrong = [r for r in results if r[0] != r[1] or r[2] != r[3]]
    assert not wrong, f"answers with another caller's id: {wrong[:5]}"
    assert all(count == 1 for count in echo.runs.values()), {n: c for n, c in echo.runs.items() if c != 1}
    # a client's resend with the same Nats-Msg-Id (a JetStream duplicate: it follows by SubscribeToTask)
    msg = make_message(data={"n": "client"})
    first = await client.dispatch(name, msg, request_id="c-one")
    call_id = nuid()
    wire: asyncio.Queue[Received] = asyncio.Queue()  # what reaches the duplicate's reply subject
    await bus.subscribe(bus.subjects.reply(client.instance, name, call_id), wire.put)
    second = await client.dispatch(name, msg, request_id="c-two", call_id=call_id)
    a, b = await within(first.result(), 15, "the first call"), await within(second.result(), 15, "the duplicate")
    assert a.id == b.id
    while (last := await within(wire.get(), 5, "the duplicate's final on the wire")).headers.get(h.FINAL) != "true":
        pass
    assert json.loads(last.data)["id"] == "c-two"


async def test_resend_while_running_on_the_same_replica_runs_once(
    agent_host: Any, client: Client, bus: Bus, redis: Redis, settings: Settings
) -> None:
    """A resend (new Nats-Msg-Id) reaching the one replica that runs the first copy follows that run: the handler
    runs once, and both copies are answered with their own id."""
    gate = asyncio.Event()
    started = asyncio.Event()
    runs = 0

    async def held(input: Any, ctx: Any) -> Any:
        nonlocal runs
        runs += 1
        started.set()
        await gate.wait()
        return {"ok": True}

    await agent_host("lc_held", held)
    await client.registry.wait_for("lc_held", 5)
    msg = make_message(data={"x": 1})
    first, second = await Inbox(bus, "lc_held").start(), await Inbox(bus, "lc_held").start()
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=msg), "one")
    await publish_request(bus, "lc_held", body, f"lc_held:{msg.message_id}", first.subject)
    await within(started.wait(), 10, "the first copy to run")
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=msg), "two")
    await publish_request(bus, "lc_held", body, f"lc_held:{msg.message_id}:again", second.subject)
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    task_id = task_id_for("lc_held", msg.message_id)

    async def reached() -> bool:
        return runs >= 2 or bool(await tasks.subscribers(task_id))

    await eventually(reached, timeout=10, what="the resend to reach the agent")
    gate.set()
    a, b = await _final(first, "the first answer"), await _final(second, "the resend's answer")
    assert (a["id"], b["id"]) == ("one", "two")
    assert runs == 1


def test_subscriber_members_keep_the_request_id() -> None:
    """A subscriber is stored with its request's JSON-RPC id (any JSON-RPC id); a member stored as a subject alone
    (before ids were kept) is answered with the task id."""
    for request_id in ("abc def", 7, 1.5, None):
        member = Subscriber("ns.a2a.v1.reply.i.a.c", request_id).member()
        assert Subscriber.parse(member).answer_id("task") == request_id
    assert Subscriber.parse("ns.a2a.v1.reply.i.a.c").answer_id("task") == "task"


async def test_a_running_continuation_is_working_and_its_resend_follows_it(
    agent_host: Any, client: Client, bus: Bus, redis: Redis, settings: Settings
) -> None:
    """While a message continuing an interrupted agent task runs, GetTask says WORKING, and a resend of that message
    (a new Nats-Msg-Id) gets the continuation's final with its own id, not the interrupted task it continued."""
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        if isinstance(input, dict) and "answer" in input:
            started.set()
            await gate.wait()
            return {"got": input["answer"]}
        raise InputRequired("more input, please")

    await agent_host("lc_slow", slow)
    await client.registry.wait_for("lc_slow", 5)
    paused = await within(client.send("lc_slow", {"n": 1}), 15, "the paused task")
    follow = make_message(data={"answer": 2}, task_id=paused.id)
    first, second = await Inbox(bus, "lc_slow").start(), await Inbox(bus, "lc_slow").start()
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=follow), "one")
    await publish_request(bus, "lc_slow", body, f"lc_slow:{follow.message_id}:{paused.id}", first.subject)
    await within(started.wait(), 10, "the continuation to run")
    assert (await client.get_task("lc_slow", paused.id)).status.state == TaskState.WORKING
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=follow), "two")
    await publish_request(bus, "lc_slow", body, f"lc_slow:{follow.message_id}:again", second.subject)
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)

    async def following() -> bool:
        return bool(await tasks.subscribers(paused.id)) or not second.queue.empty()

    await eventually(following, timeout=10, what="the resend to follow the continuation")
    assert second.queue.empty(), "the resend was answered before the continuation finished"
    gate.set()
    a, b = await _final(first, "the continuation's answer"), await _final(second, "the resend's answer")
    assert (a["id"], b["id"]) == ("one", "two")
    assert a["result"]["task"]["status"]["state"] == b["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("kind", ["agent", "workflow"])
async def test_resend_of_a_continuation_follows_the_task(
    kind: str, agent_host: Any, executor: Any, client: Client, bus: Bus, redis: Redis, settings: Settings
) -> None:
    """A message continuing a paused task, re-sent with a new Nats-Msg-Id while the task runs on it and again after
    it finished, is not applied twice: each copy gets the task's final with its own id (before, a workflow's
    resend was refused as the task was no longer paused, and GetTask kept INPUT_REQUIRED while it ran)."""
    gate = asyncio.Event()
    runs = 0

    async def held(input: Any, ctx: Any) -> Any:
        nonlocal runs
        if isinstance(input, dict) and "ask" in input:
            raise InputRequired("more input, please")
        runs += 1
        await gate.wait()
        return {"ok": True}

    await agent_host("lc_gate", held)
    name = "lc_gate"
    start: dict[str, Any] = {"ask": True}
    answer: dict[str, Any] = {"answer": 1}
    if kind == "workflow":
        await executor({"lc_then": REVIEW_THEN_STEP})
        name, start, answer = "lc_then", {"n": 1}, {"decision": "approve", "data": {"n": 1}}
    await client.registry.wait_for(name, 5)
    paused = await within(client.send(name, start), 15, "the paused task")
    assert paused.status.state == TaskState.INPUT_REQUIRED
    follow = make_message(data=answer, task_id=paused.id)
    inboxes = [await Inbox(bus, name).start() for _ in range(3)]
    for n in range(2):
        body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=follow), f"copy-{n}")
        await publish_request(bus, name, body, f"{name}:{follow.message_id}:{paused.id}:{n}", inboxes[n].subject)
        await eventually(lambda: runs >= 1, timeout=10, what="the continuation to run")
        assert (await client.get_task(name, paused.id)).status.state == TaskState.WORKING

    async def following() -> bool:
        return bool(await tasks.subscribers(paused.id)) or not inboxes[1].queue.empty()

    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    await eventually(following, timeout=10, what="the resend to reach the task")
    gate.set()
    answers = [await _final(inboxes[n], f"copy {n}'s answer") for n in range(2)]
    body = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=follow), "copy-2")
    await publish_request(bus, name, body, f"{name}:{follow.message_id}:{paused.id}:2", inboxes[2].subject)
    answers.append(await _final(inboxes[2], "the late copy's answer"))
    assert [a["id"] for a in answers] == ["copy-0", "copy-1", "copy-2"], answers
    assert {a.get("result", {}).get("task", {}).get("status", {}).get("state") for a in answers} == {
        "TASK_STATE_COMPLETED"
    }, answers
    assert runs == 1


@pytest.mark.parametrize("name", ["lc_ask", "lc_review"])
async def test_a_continuation_sent_the_moment_the_task_pauses_is_applied(
    name: str, agent_host: Any, executor: Any, client: Client
) -> None:
    """A message continuing a task, sent the moment its INPUT_REQUIRED arrives (while the replica is still ending
    that run), continues it: 30 tasks at once all complete."""
    if name == "lc_ask":
        await agent_host("lc_ask", ask)
    else:
        await executor({"lc_review": FIRST_REVIEW})
    await client.registry.wait_for(name, 5)
    answer = {"answer": 1} if name == "lc_ask" else {"decision": "approve", "data": {"n": 1}}

    async def one(i: int) -> str:
        paused = await within(client.send(name, {"n": i}), 20, "the paused task")
        done = await within(client.send(name, make_message(data=answer, task_id=paused.id)), 20, "the continuation")
        return done.status.state.value

    states = await asyncio.gather(*(one(i) for i in range(30)))
    assert set(states) == {TaskState.COMPLETED.value}, states


@pytest.mark.parametrize("how", ["raw", "client", "gateway"])
@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_resend_racing_the_first_call_of_a_review_is_answered(
    http: httpx.AsyncClient, binding: str, how: str, bus: Bus, client: Client
) -> None:
    """The first call of a workflow whose first node is a review goes through the gateway, its exact resend over
    NATS at a small offset (``raw``: a new Nats-Msg-Id, JSON-RPC id and reply subject; ``client``: the mesh
    client's, a JetStream duplicate that follows the task): both are answered, with the same task paused for the
    review, the resend with its own JSON-RPC id (30 at once; the lifecycle model found one unanswered)."""

    async def one(i: int) -> tuple[str, str, str]:
        body = message(parts=[{"data": {"n": i}}])
        msg = SendMessageRequest.from_json_dict(body).message
        request_id = f"resend-{i}"

        async def resend() -> tuple[str, str, str]:
            await asyncio.sleep(random.choice([0.0, 0.005, 0.01, 0.03, 0.06]))
            if how == "gateway":
                again = await send(http, binding, "lc_review", body)
                task = again.get("task", {})
                return request_id, task.get("id"), task.get("status", {}).get("state")
            if how == "client":
                call = await client.dispatch("lc_review", msg, request_id=request_id, timeout=20)
                task = await within(call.result(), 20, f"the resend's answer ({i})")
                return request_id, task.id, task.status.state.value
            inbox = await Inbox(bus, "lc_review").start()
            encoded = encode_request(codes.SEND_MESSAGE, SendMessageRequest(message=msg), request_id)
            await publish_request(bus, "lc_review", encoded, f"lc_review:{msg.message_id}:resend-{i}", inbox.subject)
            again = await _final(inbox, f"the resend's answer ({i})")
            task = again.get("result", {}).get("task", {})
            return again["id"], task.get("id"), task.get("status", {}).get("state")

        first, again = await asyncio.gather(
            within(send(http, binding, "lc_review", body), 20, f"the first call's answer ({i})"), resend()
        )
        task_id = task_id_for("lc_review", msg.message_id)
        assert first.get("task", {}).get("id") == task_id, first
        assert first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", first
        assert again[1] == task_id, again
        return again[0], again[2] or "", request_id

    results = await asyncio.gather(*(one(i) for i in range(15)))  # at once, then one by one
    results += [await one(i) for i in range(15, 45)]
    wrong = [r for r in results if r[0] != r[2] or r[1] != "TASK_STATE_INPUT_REQUIRED"]
    assert not wrong, f"resends answered wrongly: {wrong[:5]}"


@pytest.mark.parametrize("when", ["a replica ready before the kill", "the agent restarted after the kill"])
async def test_cancel_of_a_task_whose_agent_was_sigkilled_is_answered(
    when: str, processes: ProcessFactory, client: Client, redis: Redis, settings: Settings, tmp_path: Path
) -> None:
    """An agent process SIGKILLed while it runs a task, another replica up (started before the kill, or after
    it), then three CancelTasks at once: each is answered within its bound, CANCELED, and the task ends CANCELED. The
    replica that gets the cancel while the dead owner's claim lives leaves the cancel to that owner; the one
    that claims the redelivery stores the task CANCELED and answers it (the lifecycle model found the task
    CANCELED and its cancel never answered)."""
    path = tmp_path / "lc_killed.yaml"
    path.write_text(yaml.safe_dump({"name": "lc_killed", "handler": "tests.model.agents:slow"}))

    async def start() -> Proc:
        proc = await processes.start("agent", str(path))

        def ready() -> bool:
            assert proc.returncode is None, f"the agent exited: {proc.output()[-3000:]}"
            return '"agent.ready"' in proc.output()

        await eventually(ready, timeout=60, what="an agent replica to be ready")
        return proc

    first = await start()
    await client.registry.wait_for("lc_killed", 10)
    call = await client.dispatch("lc_killed", make_message(data={"seconds": 8.0}), timeout=60)
    claim = Keys(settings.namespace).claim(call.task_id)
    await eventually(lambda: redis.get(claim), timeout=20, what="the task to be claimed")
    if when == "a replica ready before the kill":
        await start()
    assert await redis.get(claim), "the task ended before the kill: make it longer"
    first.signal(signal.SIGKILL)
    await first.wait(20)
    if when != "a replica ready before the kill":
        await start()
    answers = await cancel_at_once(client, "lc_killed", call.task_id, 3, within_s=15)
    assert canceled_once_at_least(answers), answers
    final = await within(call.result(), 40, "the task's final")
    assert final.status.state == TaskState.CANCELED, final
    assert (await client.get_task("lc_killed", call.task_id)).status.state == TaskState.CANCELED


@pytest.mark.parametrize("kind", ["agent", "workflow"])
async def test_a_task_canceled_before_its_request_keeps_the_request_context(
    kind: str, agent_host: Any, executor: Any, client: Client
) -> None:
    """A CancelTask that reaches the task before its request (the model test's cancel racing a send) stores a
    CANCELED record that knows nothing of the request; the request, pulled then, is answered CANCELED and the
    record completed with the request's context and message, so ListTasks by that context lists the task
    GetTask shows (it did not: the record had no contextId)."""
    if kind == "agent":
        target = "lc_ask"
        await agent_host(target, ask)
    else:
        target = "lc_review"
        await executor({target: FIRST_REVIEW})
    await client.registry.wait_for(target, 5)
    context_id = "ctx-" + nuid()
    message = make_message(data={"n": 1}, context_id=context_id)
    task_id = task_id_for(target, message.message_id)
    canceled = await within(client.cancel_task(target, task_id), 15, "CancelTask before the request")
    assert canceled.status.state == TaskState.CANCELED
    answered = await within(client.send(target, message), 15, "the canceled request's answer")
    assert answered.status.state == TaskState.CANCELED, answered.status
    assert answered.context_id == context_id, answered
    got = await client.get_task(target, task_id)
    assert got.status.state == TaskState.CANCELED, got
    assert got.context_id == context_id, got
    assert [m.message_id for m in got.history or []][:1] == [message.message_id], got.history
    listed = await client.list_tasks(target, ListTasksRequest(context_id=context_id, page_size=10))
    assert [t.id for t in listed.tasks] == [task_id], listed
