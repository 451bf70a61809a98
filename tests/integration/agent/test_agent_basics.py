"""An agent host over real NATS + Valkey: calls, streams, control methods."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from a2amesh.client import Client, make_message
from a2amesh.errors import TransportError
from a2amesh.protocol import ListTasksRequest, SendMessageRequest, TaskState, codes
from tests.support.cancelling import check_get_task_answered_while_cancelling
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within


async def echo(input: Any, ctx: Any) -> Any:
    return input


async def test_send_message_returns_result_artifact(agent_host: Any, client: Client) -> None:
    """A SendMessage round trip yields a COMPLETED task whose artifacts[0] named result holds the output."""
    await agent_host("echo", echo)
    task = await within(client.send("echo", {"x": 1}), 10, "the echo answer")
    assert task.status.state == TaskState.COMPLETED
    assert task.artifacts is not None
    assert task.artifacts[0].name == "result"
    assert task.output() == {"x": 1}


async def test_history_length_bounds_the_history_an_answer_carries(agent_host: Any, client: Client) -> None:
    """SendMessage's historyLength: 0 leaves the history out of the answer (the record keeps it); unset sends it all."""
    await agent_host("echo", echo)
    whole = await within(client.send("echo", {"x": 1}), 10, "an answer with history")
    assert whole.history is not None
    assert [m.role.value for m in whole.history][-1:] == ["ROLE_USER"]
    bare = await within(client.send("echo", {"x": 2}, history_length=0), 10, "an answer without history")
    assert bare.status.state == TaskState.COMPLETED
    assert bare.output() == {"x": 2}
    assert bare.history is None
    stored = await client.get_task("echo", bare.id)
    assert stored.history is not None
    assert len(stored.history) == len(whole.history)
    listed = await client.list_tasks("echo", ListTasksRequest(history_length=0))
    assert listed.tasks
    assert all(t.history is None for t in listed.tasks)
    one = await client.list_tasks("echo", ListTasksRequest(history_length=1))
    assert all(t.history is not None and len(t.history) == 1 for t in one.tasks)


async def test_text_input_becomes_text_object(agent_host: Any, client: Client) -> None:
    """A text-only message arrives as {"text": ...} (the input contract)."""
    await agent_host("echo", echo)
    task = await client.send("echo", "hello there")
    assert task.output() == {"text": "hello there"}


async def test_unknown_agent_fails_fast(client: Client) -> None:
    """Calling an agent with no live card raises AGENT_NOT_FOUND at once instead of queueing."""
    with pytest.raises(TransportError) as e:
        await within(client.send("nobody", "hi"), 3, "AGENT_NOT_FOUND")
    assert e.value.reason == codes.AGENT_NOT_FOUND
    assert "nobody" in str(e.value)


async def test_handler_exception_fails_task(agent_host: Any, client: Client) -> None:
    """A raising handler gives TASK_STATE_FAILED with the exception's message, and the agent keeps serving."""

    async def boom(input: Any, ctx: Any) -> Any:
        if input.get("fail"):
            raise ValueError("bad order id")
        return "fine"

    await agent_host("boom", boom)
    task = await client.send("boom", {"fail": True})
    assert task.status.state == TaskState.FAILED
    assert task.status.message is not None
    assert "bad order id" in task.status.message.text()
    task = await client.send("boom", {"fail": False})
    assert task.status.state == TaskState.COMPLETED


async def test_streaming_200_events_in_order(agent_host: Any, client: Client, bus: Any) -> None:
    """A stream of 200 status events: first is task, A2A-Seq strictly increases, last is final and terminal."""

    async def chatty(input: Any, ctx: Any) -> Any:
        for i in range(200):
            await ctx.emit_status(f"step {i}")
        return {"steps": 200}

    await agent_host("chatty", chatty)
    inbox = await Inbox(bus).start()
    params = SendMessageRequest(message=make_message(data={})).to_json_dict()
    body = json.dumps({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": params}).encode()
    await bus.js_publish(bus.subjects.request("chatty"), body, {"A2A-Version": "1.0", "A2A-Reply-To": inbox.subject})
    replies = await inbox.until_final("the stream's final message", timeout=15)
    seqs = [int(headers["A2A-Seq"]) for _, headers in replies]
    assert seqs == sorted(set(seqs)), "A2A-Seq must strictly increase"
    assert all(headers["A2A-Agent"] == "chatty" for _, headers in replies)
    assert all(body["id"] == "s1" for body, _ in replies), "every reply echoes the request id"
    results = [body["result"] for body, _ in replies]
    assert "task" in results[0], "the first event of a stream must be the task"
    progress = [r["statusUpdate"] for r in results if "statusUpdate" in r]
    texts = [
        p["status"]["message"]["parts"][0]["text"] for p in progress if p["status"]["state"] == "TASK_STATE_WORKING"
    ]
    assert texts == [f"step {i}" for i in range(200)]
    assert "artifactUpdate" in results[-2]
    assert results[-2]["artifactUpdate"]["artifact"]["parts"][0]["data"] == {"steps": 200}
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [h.get("A2A-Final") for _, h in replies].count("true") == 1

    # the same through the client
    call = await client.dispatch("chatty", make_message(data={}), stream=True)
    events = [ev async for ev in call.events()]
    assert events[0].task is not None
    assert call.task is not None
    assert call.task.output() == {"steps": 200}


async def test_get_and_list_tasks(agent_host: Any, client: Client) -> None:
    """GetTask returns the stored task; ListTasks lists it; an unknown id is -32001."""
    await agent_host("echo", echo)
    task = await client.send("echo", {"n": 5})
    got = await client.get_task("echo", task.id)
    assert got.id == task.id
    assert got.status.state == TaskState.COMPLETED
    listed = await client.list_tasks("echo")
    assert [t.id for t in listed.tasks] == [task.id]
    from a2amesh.errors import RpcError

    with pytest.raises(RpcError) as e:
        await client.get_task("echo", "00000000-0000-0000-0000-000000000000")
    assert e.value.code == codes.TASK_NOT_FOUND


async def test_cancel_running_task(agent_host: Any, client: Client) -> None:
    """CancelTask on a running task stops it within 2 s with TASK_STATE_CANCELED."""
    started = asyncio.Event()

    async def slow(input: Any, ctx: Any) -> Any:
        started.set()
        await asyncio.sleep(60)
        return "late"

    await agent_host("slow", slow)
    call = await client.dispatch("slow", make_message(data={}))
    await within(started.wait(), 10, "the slow task to start")
    canceled = await within(client.cancel_task("slow", call.task_id), 2, "CancelTask to answer")
    assert canceled.status.state == TaskState.CANCELED
    final = await within(call.result(), 2, "the caller's final answer")
    assert final.status.state == TaskState.CANCELED


async def test_a_handler_that_swallowed_the_cancel_is_cancelled_again(agent_host: Any, client: Client) -> None:
    """A handler that drops the first CancelledError (as a library racing a reply can) gets a second one a
    second later, well before the 5 s after which a handler is left behind."""
    started = asyncio.Event()
    cancels: list[float] = []

    async def drops_one_cancel(input: Any, ctx: Any) -> Any:
        started.set()
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancels.append(asyncio.get_running_loop().time())
                if len(cancels) > 1:
                    raise

    await agent_host("dropper", drops_one_cancel)
    call = await client.dispatch("dropper", make_message(data={}))
    await within(started.wait(), 10, "the task to start")
    canceled = await within(client.cancel_task("dropper", call.task_id), 4, "CancelTask to answer")
    assert canceled.status.state == TaskState.CANCELED
    assert len(cancels) == 2
    assert (await within(call.result(), 2, "the caller's final answer")).status.state == TaskState.CANCELED


async def test_get_task_is_answered_while_a_cancel_waits_for_the_handler(agent_host: Any, client: Client) -> None:
    """A CancelTask waiting for a handler that takes its time to stop holds up no other control request."""
    started = asyncio.Event()
    cancelled = asyncio.Event()
    release = asyncio.Event()

    async def slow_to_stop(input: Any, ctx: Any) -> Any:
        started.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.set()  # keeps going: its clean-up takes until the test releases it
        return "stopped"

    await agent_host("slow_stop", slow_to_stop)
    call = await client.dispatch("slow_stop", make_message(data={}))
    await within(started.wait(), 10, "the task to start")
    await check_get_task_answered_while_cancelling(client, "slow_stop", call, stopping=cancelled, release=release)


async def test_cancel_queued_task_is_answered_canceled(agent_host: Any, client: Client) -> None:
    """CancelTask on a task still in the queue marks it; when pulled it is answered CANCELED without running."""
    release = asyncio.Event()
    ran: list[Any] = []

    async def one_at_a_time(input: Any, ctx: Any) -> Any:
        ran.append(input)
        await release.wait()
        return "ran"

    await agent_host("single", one_at_a_time, max_concurrency=1)
    first = await client.dispatch("single", make_message(data={"n": 1}))
    await eventually(lambda: ran, timeout=10, what="the first task to start")
    queued = await client.dispatch("single", make_message(data={"n": 2}))
    canceled = await within(client.cancel_task("single", queued.task_id), 5, "CancelTask on a queued task")
    assert canceled.status.state == TaskState.CANCELED
    release.set()
    assert (await within(first.result(), 10, "the first task")).status.state == TaskState.COMPLETED
    final = await within(queued.result(), 10, "the queued task's answer")
    assert final.status.state == TaskState.CANCELED
    assert ran == [{"n": 1}]
