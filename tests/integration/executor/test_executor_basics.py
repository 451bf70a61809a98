"""The workflow executor over real NATS + Valkey: workflows as agents, state in Redis, progress, errors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.errors import RpcError
from a2amesh.ids import task_id_for
from a2amesh.protocol import TaskState, codes
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.tasks import TaskStore
from tests.support.waiting import within


async def double(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"value": input["value"] * 2}


async def inc(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"value": input["value"] + 1}


SEQUENTIAL = """
name: seq
description: doubles then increments
input_schema: {type: object, properties: {value: {type: number}}, required: [value]}
output_schema: {type: object, required: [result]}
nodes:
  - {id: a, type: agent, agent_name: double, input: {value: "{{workflow.input.value}}"}}
  - {id: b, type: agent, agent_name: inc, depends_on: [a], input: {value: "{{a.output.value}}"}}
output_mapping: {result: "{{b.output.value}}"}
"""


async def test_workflow_is_an_agent(agent_host: Any, executor: Any, client: Client) -> None:
    """A workflow publishes a workflow card and answers SendMessage with its output as artifacts[0]."""
    await agent_host("double", double)
    await agent_host("inc", inc)
    await executor({"seq": SEQUENTIAL})
    card = await client.registry.wait_for("seq", 5)
    assert card.agent_type == "workflow"
    assert card.input_schema == {"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]}
    assert card.workflow_definition is not None
    assert card.workflow_definition["nodes"][0]["id"] == "a"
    task = await within(client.send("seq", {"value": 5}), 10, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.artifacts
    assert task.artifacts[0].name == "result"
    assert task.output() == {"result": 11}


async def test_streaming_progress_and_records(
    agent_host: Any, executor: Any, client: Client, redis: Any, settings: Any
) -> None:
    """A streaming caller sees the task, node start/finish events and the final; Redis keeps records and events."""
    await agent_host("double", double)
    await agent_host("inc", inc)
    await executor({"seq": SEQUENTIAL})
    await client.registry.wait_for("seq", 5)
    call = await client.dispatch("seq", make_message(data={"value": 1}), stream=True)
    events = [ev async for ev in call.events()]
    assert events[0].task is not None
    progress = [
        e.status_update.metadata["workflow_event"]
        for e in events
        if e.status_update is not None and e.status_update.metadata and "workflow_event" in e.status_update.metadata
    ]
    kinds = [(p["event"], p.get("path")) for p in progress]
    assert ("node.started", "a") in kinds
    assert ("node.completed", "b") in kinds
    assert kinds.index(("node.completed", "a")) < kinds.index(("node.started", "b"))
    assert call.task is not None
    assert call.task.status.state == TaskState.COMPLETED
    assert call.task.output() == {"result": 3}
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=2)
    record = await store.record(call.task_id)
    assert record is not None
    assert record["status"] == "completed"
    nodes = await store.nodes(call.task_id)
    assert nodes["a"]["status"] == "completed"
    assert nodes["a"]["output"] == {"value": 2}
    assert nodes["b"]["task_id"]
    assert nodes["b"]["attempt"] == 1
    log = await store.events(call.task_id)
    assert log[0]["event"] == "execution.started"
    assert log[-1]["event"] == "execution.completed"
    runs = await store.list(workflow="seq")
    assert [r["execution_id"] for r in runs] == [call.task_id]


async def test_bad_input_fails_before_any_node(agent_host: Any, executor: Any, client: Client) -> None:
    """Input failing input_schema fails the task with the JSON path and no node runs."""
    ran: list[Any] = []

    async def spy(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return {"value": 1}

    await agent_host("double", spy)
    await agent_host("inc", inc)
    await executor({"seq": SEQUENTIAL})
    await client.registry.wait_for("seq", 5)
    task = await within(client.send("seq", {"value": "x"}), 10, "the answer")
    assert task.status.state == TaskState.FAILED
    assert task.status.message is not None
    assert "$.value" in task.status.message.text()
    assert ran == []


async def test_jsonrpc_error_fails_node_at_once(executor: Any, client: Client, bus: Any) -> None:
    """A callee answering with a JSON-RPC error fails the node at once, not at its timeout."""
    from a2amesh.bus import headers as h
    from a2amesh.bus.setup import ensure_consumer
    from a2amesh.protocol import AgentCapabilities, AgentCard, AgentExtension
    from a2amesh.registry import CardPublisher
    from a2amesh.rpc import encode_error

    card = AgentCard(
        name="rude",
        capabilities=AgentCapabilities(extensions=[AgentExtension(uri=codes.EXT_AGENT_TYPE, params={"type": "agent"})]),
    )
    await CardPublisher(bus, card, instance="x", card_ttl=client.settings.card_ttl).publish()
    await ensure_consumer(bus, client.settings, "rude", max_ack_pending=10)
    consumer = await bus.pull_consumer(bus.subjects.tasks_stream, "rude")

    async def answer_with_error() -> None:
        while True:
            await consumer.want(1)
            msg = await consumer.next(1)
            if msg is None:
                continue
            err = RpcError(codes.INVALID_PARAMS, "I refuse")
            await bus.js_publish(
                msg.headers[h.REPLY_TO],
                encode_error(1, err),
                {h.AGENT: "rude", h.ATTEMPT: "1", h.SEQ: "1", h.FINAL: "true", h.MSG_ID: f"e{msg.stream_seq}"},
            )
            await msg.ack()

    server = asyncio.create_task(answer_with_error())
    try:
        await executor({"w": "name: w\nnodes:\n  - {id: a, type: agent, agent_name: rude, timeout: 30s}\n"})
        await client.registry.wait_for("w", 5)
        task = await within(client.send("w", {}), 5, "the failure")
        assert task.status.state == TaskState.FAILED
        assert task.status.message is not None
        assert "-32602" in task.status.message.text()
        assert "I refuse" in task.status.message.text()
    finally:
        server.cancel()
        await consumer.stop()


async def test_get_cancel_and_list_on_workflow(agent_host: Any, executor: Any, client: Client) -> None:
    """CancelTask on a running workflow cancels its running callee; GetTask and ListTasks answer."""
    started = asyncio.Event()
    stopped = asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {}

    await agent_host("slow", slow)
    await executor({"w": "name: w\nnodes:\n  - {id: a, type: agent, agent_name: slow}\n"})
    await client.registry.wait_for("w", 5)
    call = await client.dispatch("w", make_message(data={}))
    await within(started.wait(), 10, "the callee to start")
    got = await client.get_task("w", call.task_id)
    assert got.status.state == TaskState.WORKING
    canceled = await within(client.cancel_task("w", call.task_id), 5, "CancelTask")
    assert canceled.status.state == TaskState.CANCELED
    final = await within(call.result(), 5, "the final answer")
    assert final.status.state == TaskState.CANCELED
    listed = await client.list_tasks("w")
    assert [t.id for t in listed.tasks] == [call.task_id]
    with pytest.raises(RpcError) as e:
        await client.cancel_task("w", call.task_id)
    assert e.value.code == codes.TASK_NOT_CANCELABLE
    await within(stopped.wait(), 5, "the running callee's handler to be cancelled")


async def test_a_workflow_task_canceled_before_it_started_is_answered_canceled(
    agent_host: Any, executor: Any, client: Client, redis: Any, settings: Any
) -> None:
    """A cancel mark set before the request is taken: no execution is created, the caller gets CANCELED."""
    ran: list[Any] = []

    async def work(input: Any, ctx: Any) -> Any:
        ran.append(input)
        return {}

    await agent_host("work", work)
    await executor({"early": "name: early\nnodes:\n  - {id: a, type: agent, agent_name: work}\n"})
    await client.registry.wait_for("early", 5)
    message = make_message(data={})
    task_id = task_id_for("early", message.message_id)
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    await tasks.mark_canceled(task_id)  # as CancelTask does for a task not started yet
    final = await within(client.send("early", message), 10, "the answer to a canceled request")
    assert final.id == task_id
    assert final.status.state == TaskState.CANCELED
    assert await ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=5).record(task_id) is None
    assert ran == []
    # the next request runs normally
    done = await within(client.send("early", make_message(data={})), 10, "a normal run")
    assert done.status.state == TaskState.COMPLETED
    assert len(ran) == 1


LARGE = """
name: large
nodes:
  - {id: measure, type: agent, agent_name: measure, input: {blob: "{{workflow.input.blob}}"}}
output_mapping: {size: "{{measure.output.size}}", seen_url: "{{measure.output.seen_url}}"}
"""


async def test_large_node_input_travels_as_artifact(
    agent_host: Any, executor: Any, client: Client, bus: Any, settings: Any
) -> None:
    """A node input above the inline threshold is sent as an artifact:// URL part and loaded by the agent."""
    seen: list[Any] = []

    async def measure(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append([p.url for p in ctx.message.parts if p.url])
        return {"size": len(input["blob"]), "seen_url": bool(seen[-1])}

    await agent_host("measure", measure)
    await executor({"large": LARGE})
    await client.registry.wait_for("large", 5)
    blob = "x" * (settings.inline_threshold + 1000)
    task = await within(client.send("large", {"blob": blob}), 20, "the workflow's answer")
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"size": len(blob), "seen_url": True}
    assert seen[0][0].startswith(f"artifact://{settings.namespace}/")


async def test_the_final_is_stored_before_the_caller_gets_it(agent_host: Any, executor: Any, client: Client) -> None:
    """GetTask right after each answer finds the workflow's task final (the finishing commit stored it)."""
    await agent_host("double", double)
    await executor(
        {"one": 'name: one\nnodes:\n  - {id: a, type: agent, agent_name: double, input: "{{workflow.input}}"}\n'}
    )
    await client.registry.wait_for("one", 5)
    for i in range(20):
        call = await client.dispatch("one", make_message(data={"value": i}))
        final = await within(call.result(), 10, "the workflow's answer")
        assert final.status.state == TaskState.COMPLETED
        got = await client.get_task("one", call.task_id)
        assert got.status.state == TaskState.COMPLETED, f"run {i}: GetTask right after the answer read {got.status}"
        assert got.output() == {"a": {"value": 2 * i}}


def awaiting_card(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set when a node's dispatch starts waiting for its agent's card."""
    from a2amesh.executor import dispatch

    awaiting = asyncio.Event()
    card_back = dispatch._card_back

    async def noted(*args: Any) -> bool:
        awaiting.set()
        return await card_back(*args)

    monkeypatch.setattr(dispatch, "_card_back", noted)
    return awaiting


LATE = "name: late\nnodes:\n  - {id: a, type: agent, agent_name: latecomer, input: {value: 1}}\n"


async def test_a_node_waits_a_card_ttl_for_its_agent(
    agent_host: Any, executor: Any, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose agent has no live card (a restart, or a partition longer than the card TTL) waits up to one
    card TTL for the card before failing: an agent that comes back in time answers the node."""
    awaiting = awaiting_card(monkeypatch)
    await executor({"late": LATE})
    await client.registry.wait_for("late", 5)
    run = asyncio.create_task(client.send("late", {}))
    try:
        await within(awaiting.wait(), 5, "the node's dispatch to find no card for its agent")
        assert not run.done()
        await agent_host("latecomer", inc)
        task = await within(run, 10, "the node answered by the agent that came late")
    finally:
        run.cancel()
    assert task.status.state == TaskState.COMPLETED, task.status
    assert task.output() == {"a": {"value": 2}}


TWO_AGENTS = (
    "name: both\nnodes:\n"
    "  - {id: a, type: agent, agent_name: latecomer, input: {value: 1}}\n"
    "  - {id: b, type: agent, agent_name: double, input: {value: 2}}\n"
)


@pytest.mark.alone  # asserts a wall-clock bound
async def test_a_node_waiting_for_a_card_holds_up_nothing_else(
    agent_host: Any, executor: Any, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one node's dispatch waits for its agent's card, the execution goes on: a parallel node's answer
    is applied, and a cancel ends the execution at once, not after the card TTL."""
    awaiting = awaiting_card(monkeypatch)
    answered = asyncio.Event()

    async def doubled(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answered.set()
        return await double(input, ctx)

    await agent_host("double", doubled)
    await executor({"both": TWO_AGENTS})
    await client.registry.wait_for("both", 5)
    call = await client.dispatch("both", make_message(data={}))
    await within(awaiting.wait(), 5, "node a's dispatch to find no card for its agent")
    await within(answered.wait(), 5, "node b to be called while node a waits")
    started = time.monotonic()
    canceled = await within(client.cancel_task("both", call.task_id), 5, "CancelTask")
    assert canceled.status.state == TaskState.CANCELED
    final = await within(call.result(), 5, "the canceled execution's answer")
    assert final.status.state == TaskState.CANCELED
    assert time.monotonic() - started < client.settings.card_ttl / 2


async def test_a_node_fails_when_its_agent_never_comes(executor: Any, client: Client) -> None:
    """Without a live card within the card TTL, the node fails with AGENT_NOT_FOUND, naming the agent."""
    await executor({"late": LATE})
    await client.registry.wait_for("late", 5)
    started = time.monotonic()
    task = await within(client.send("late", {}), 10 + client.settings.card_ttl, "the failure")
    assert task.status.state == TaskState.FAILED
    assert task.status.message is not None
    assert "AGENT_NOT_FOUND" in task.status.message.text()
    assert "latecomer" in task.status.message.text()
    assert time.monotonic() - started >= client.settings.card_ttl * 0.9  # it waited for the card first
