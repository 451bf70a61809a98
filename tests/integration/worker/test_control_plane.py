"""The control plane answers the same way for an agent and for a workflow: one set of cases, run against both.

GetTask, CancelTask, SubscribeToTask and ListTasks are sent raw on the control subject, as an outside caller
would, and the answers (codes, headers, where they arrive) are compared with what docs/protocol.md §7 says.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.client import Call, Client, make_message
from a2amesh.config import Settings
from a2amesh.errors import RpcError
from a2amesh.ids import nuid
from a2amesh.protocol import TaskState, codes
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import TaskStore
from tests.support.inbox import Inbox
from tests.support.waiting import eventually, within

WORKFLOW = """
name: ctl
description: passes its input through one agent
nodes:
  - id: a
    type: agent
    agent_name: ctlnode
    input: {value: "{{workflow.input.value}}", hold: "{{workflow.input.hold}}"}
output_mapping: {value: "{{a.output.value}}"}
"""


@dataclass
class Target:
    """An agent or a workflow named ``ctl`` whose calls with ``hold`` wait for ``gate``."""

    kind: str
    name: str
    bus: Bus
    client: Client
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def finished(self, value: int, context_id: str | None = None) -> str:
        """A completed task's id."""
        task = await within(
            self.client.send(self.name, make_message(data={"value": value, "hold": False}, context_id=context_id)),
            15,
            f"the {self.kind}'s answer",
        )
        assert task.status.state == TaskState.COMPLETED, task.status
        return task.id

    async def running(self) -> Call:
        """A call whose task is WORKING (its work waits for ``gate``)."""
        call = await self.client.dispatch(self.name, make_message(data={"value": 1, "hold": True}))

        async def working() -> bool:
            resp = await control(self.bus, self.name, codes.GET_TASK, {"id": call.task_id})
            return bool(resp.get("result", {}).get("status", {}).get("state") == TaskState.WORKING.value)

        await eventually(working, timeout=10, what=f"the {self.kind}'s task to be WORKING")
        return call


@pytest.fixture(params=["agent", "workflow"])
async def target(
    request: pytest.FixtureRequest, agent_host: Any, executor: Any, client: Client, bus: Bus
) -> AsyncIterator[Target]:
    t = Target(request.param, "ctl", bus, client)

    async def handler(input: Any, ctx: Any) -> Any:
        if input.get("hold"):
            await t.gate.wait()
        return {"value": input.get("value")}

    if t.kind == "agent":
        await agent_host("ctl", handler)
    else:
        await agent_host("ctlnode", handler)
        await executor({"ctl": WORKFLOW})
    await client.registry.wait_for("ctl", 5)
    yield t
    t.gate.set()


def body_of(method: str, params: dict[str, Any], request_id: Any = "c1") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


async def control(bus: Bus, agent: str, method: str, params: dict[str, Any], **headers: str) -> dict[str, Any]:
    """A control request with a NATS reply inbox; the decoded answer (its A2A-Agent header checked)."""
    msg = await bus.request(bus.subjects.control(agent), body_of(method, params), {h.VERSION: "1.0", **headers}, 5)
    assert msg.headers.get(h.AGENT) == agent
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def publish_control(bus: Bus, agent: str, body: bytes, inbox: Inbox) -> None:
    """A control message published without a NATS reply inbox, answered on A2A-Reply-To (SubscribeToTask)."""
    await bus.publish(bus.subjects.control(agent), body, {h.VERSION: "1.0", h.REPLY_TO: inbox.subject})


def error_of(resp: dict[str, Any]) -> dict[str, Any]:
    assert "error" in resp, f"expected an error, got {resp}"
    return resp["error"]  # type: ignore[no-any-return]


def state_of(result: dict[str, Any]) -> str:
    for key in ("task", "statusUpdate"):
        if key in result:
            return str(result[key]["status"]["state"])
    return str(result["status"]["state"])


# GetTask


async def test_get_unknown_task(target: Target) -> None:
    """GetTask of an unknown id is -32001 naming it."""
    err = error_of(await control(target.bus, target.name, codes.GET_TASK, {"id": "no-such-task"}))
    assert err["code"] == codes.TASK_NOT_FOUND
    assert "no-such-task" in err["message"]


async def test_get_known_task_with_history_length(target: Target) -> None:
    """GetTask answers the stored task; historyLength 0 leaves its history out, unset keeps it."""
    done = await target.finished(5)
    resp = await control(target.bus, target.name, codes.GET_TASK, {"id": done})
    assert resp["result"]["id"] == done
    assert state_of(resp["result"]) == TaskState.COMPLETED.value
    call = await target.running()
    full = (await control(target.bus, target.name, codes.GET_TASK, {"id": call.task_id}))["result"]
    assert len(full["history"]) == 1
    none = (await control(target.bus, target.name, codes.GET_TASK, {"id": call.task_id, "historyLength": 0}))["result"]
    assert not none.get("history")


# CancelTask


async def test_cancel_running_task(target: Target) -> None:
    """CancelTask of a running task stops it: the canceller and the caller both get CANCELED."""
    call = await target.running()
    canceled = await within(target.client.cancel_task(target.name, call.task_id, timeout=15), 15, "CancelTask")
    assert canceled.status.state == TaskState.CANCELED
    final = await within(call.result(), 10, "the caller's answer")
    assert final.status.state == TaskState.CANCELED


@dataclass
class HeldLaunch:
    """A workflow ``ctl`` whose next execution is written but not launched until ``launch`` is set; its node
    waits for ``gate``."""

    created: asyncio.Event = field(default_factory=asyncio.Event)
    launch: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def held_launch(
    agent_host: Any, executor: Any, client: Client, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[HeldLaunch]:
    from a2amesh.executor.intake import ExecutionIntake

    held = HeldLaunch()
    create = ExecutionIntake.create

    async def held_create(self: ExecutionIntake, new: Any) -> Any:
        out = await create(self, new)
        held.created.set()
        await held.launch.wait()
        return out

    monkeypatch.setattr(ExecutionIntake, "create", held_create)

    async def handler(input: Any, ctx: Any) -> Any:
        await held.gate.wait()
        return {"value": input.get("value")}

    await agent_host("ctlnode", handler)
    await executor({"ctl": WORKFLOW})
    await client.registry.wait_for("ctl", 5)
    yield held
    held.launch.set()
    held.gate.set()


async def test_cancel_between_create_and_launch(
    held_launch: HeldLaunch, client: Client, bus: Bus, redis: Redis, settings: Settings
) -> None:
    """A CancelTask that reaches the executor after an execution is written (its task WORKING) but before its
    runner is launched is applied once it is, and answered: the canceller and the caller get CANCELED."""
    call = await client.dispatch("ctl", make_message(data={"value": 1, "hold": True}))
    await within(held_launch.created.wait(), 10, "the execution to be written")
    got = await control(bus, "ctl", codes.GET_TASK, {"id": call.task_id})
    assert got["result"]["status"]["state"] == TaskState.WORKING.value
    canceling = asyncio.create_task(client.cancel_task("ctl", call.task_id, timeout=15))
    record = Keys(settings.namespace).execution(call.task_id)

    async def marked() -> bool:
        return bool(await redis.hget(record, "cancel"))

    await eventually(marked, timeout=10, what="the execution to be marked for cancellation")
    held_launch.launch.set()
    canceled = await within(canceling, 15, "CancelTask")
    assert canceled.status.state == TaskState.CANCELED
    final = await within(call.result(), 10, "the caller's answer")
    assert final.status.state == TaskState.CANCELED


async def test_subscribe_between_create_and_launch(held_launch: HeldLaunch, client: Client, bus: Bus) -> None:
    """A SubscribeToTask that reaches the executor after an execution is written but before its runner is
    launched follows the run once it is: the subscriber gets the task first, then the final."""
    call = await client.dispatch("ctl", make_message(data={"value": 1, "hold": True}))
    await within(held_launch.created.wait(), 10, "the execution to be written")
    inbox = await Inbox(bus).start()
    await publish_control(bus, "ctl", body_of(codes.SUBSCRIBE_TO_TASK, {"id": call.task_id}), inbox)
    # control requests are answered in order: once this GetTask is, the subscription was handled
    await control(bus, "ctl", codes.GET_TASK, {"id": call.task_id})
    held_launch.launch.set()
    first, _ = await inbox.next("the subscriber's snapshot")
    assert first["result"]["task"]["id"] == call.task_id
    assert first["result"]["task"]["status"]["state"] == TaskState.WORKING.value
    held_launch.gate.set()
    replies = await inbox.until_final("the subscriber's final")
    assert state_of(replies[-1][0]["result"]) == TaskState.COMPLETED.value
    assert (await within(call.result(), 10, "the caller's answer")).status.state == TaskState.COMPLETED


async def test_cancel_finished_task(target: Target) -> None:
    """CancelTask of a finished task is -32002 TaskNotCancelable."""
    done = await target.finished(1)
    with pytest.raises(RpcError) as e:
        await target.client.cancel_task(target.name, done)
    assert e.value.code == codes.TASK_NOT_CANCELABLE


async def test_cancel_unknown_task(target: Target) -> None:
    """CancelTask of a task never seen marks it: the answer is that task, CANCELED."""
    task_id = "queued-" + nuid()
    canceled = await target.client.cancel_task(target.name, task_id)
    assert canceled.id == task_id
    assert canceled.status.state == TaskState.CANCELED


# SubscribeToTask


async def test_subscribe_to_running_task(target: Target) -> None:
    """A subscriber to a running task gets the task first, then every event and the final."""
    call = await target.running()
    inbox = await Inbox(target.bus).start()
    await publish_control(target.bus, target.name, body_of(codes.SUBSCRIBE_TO_TASK, {"id": call.task_id}), inbox)
    first, hdrs = await inbox.next("the snapshot")
    assert first["result"]["task"]["id"] == call.task_id
    assert hdrs[h.AGENT] == target.name
    target.gate.set()
    replies = await inbox.until_final("the subscriber's final")
    assert state_of(replies[-1][0]["result"]) == TaskState.COMPLETED.value
    assert (await within(call.result(), 10, "the caller's answer")).status.state == TaskState.COMPLETED


async def test_subscribe_to_finished_task(target: Target) -> None:
    """A subscriber to a finished task gets the final task at once, marked final."""
    done = await target.finished(2)
    inbox = await Inbox(target.bus).start()
    await publish_control(target.bus, target.name, body_of(codes.SUBSCRIBE_TO_TASK, {"id": done}), inbox)
    resp, hdrs = await inbox.next("the final task")
    assert hdrs[h.FINAL] == "true"
    assert hdrs[h.AGENT] == target.name
    assert resp["result"]["task"]["id"] == done
    assert state_of(resp["result"]) == TaskState.COMPLETED.value


async def test_subscribe_to_unknown_task(target: Target, redis: Redis, settings: Settings) -> None:
    """A subscriber to a task not seen yet (maybe queued) is recorded and not answered until it runs."""
    task_id = "queued-" + nuid()
    inbox = await Inbox(target.bus).start()
    await publish_control(target.bus, target.name, body_of(codes.SUBSCRIBE_TO_TASK, {"id": task_id}), inbox)
    tasks = TaskStore(redis, Keys(settings.namespace), retention=60, queued_ttl=60)
    await eventually(lambda: tasks.subscribers(task_id), timeout=5, what="the subscriber to be recorded")
    assert await tasks.subscribers(task_id) == [inbox.subject]
    await target.bus.flush()
    assert inbox.queue.empty(), "a task not seen yet must not be answered"


async def test_subscribe_error_reaches_reply_to(target: Target) -> None:
    """A SubscribeToTask error reaches the caller on A2A-Reply-To when the request has no NATS reply inbox."""
    inbox = await Inbox(target.bus).start()
    await publish_control(target.bus, target.name, body_of(codes.SUBSCRIBE_TO_TASK, {"taskId": "x"}, 9), inbox)
    resp, hdrs = await inbox.next("the error on A2A-Reply-To")
    err = error_of(resp)
    assert err["code"] == codes.INVALID_PARAMS
    assert "params.id" in err["message"]
    assert resp["id"] == 9
    assert hdrs[h.FINAL] == "true"
    assert hdrs[h.AGENT] == target.name


async def test_subscribe_without_reply_to_is_invalid(target: Target) -> None:
    """SubscribeToTask without A2A-Reply-To is -32600 on the request's reply inbox."""
    err = error_of(await control(target.bus, target.name, codes.SUBSCRIBE_TO_TASK, {"id": "x"}))
    assert err["code"] == codes.INVALID_REQUEST
    assert h.REPLY_TO in err["message"]


# ListTasks


async def test_list_filters_and_pages(target: Target) -> None:
    """ListTasks filters by contextId and status, pages by pageSize with a next page token."""
    ctx_a, ctx_b = "ctx-" + nuid(), "ctx-" + nuid()
    a1 = await target.finished(1, ctx_a)
    a2 = await target.finished(2, ctx_a)
    b1 = await target.finished(3, ctx_b)
    listed = (await control(target.bus, target.name, codes.LIST_TASKS, {"contextId": ctx_a}))["result"]
    assert {t["id"] for t in listed["tasks"]} == {a1, a2}
    assert listed["totalSize"] == 2
    done = (await control(target.bus, target.name, codes.LIST_TASKS, {"status": "TASK_STATE_COMPLETED"}))["result"]
    assert {a1, a2, b1} <= {t["id"] for t in done["tasks"]}
    none = (await control(target.bus, target.name, codes.LIST_TASKS, {"status": "TASK_STATE_CANCELED"}))["result"]
    assert none.get("tasks", []) == []
    first = (await control(target.bus, target.name, codes.LIST_TASKS, {"contextId": ctx_a, "pageSize": 1}))["result"]
    assert len(first["tasks"]) == 1
    assert first["nextPageToken"] == "1"
    params = {"contextId": ctx_a, "pageSize": 1, "pageToken": first["nextPageToken"]}
    second = (await control(target.bus, target.name, codes.LIST_TASKS, params))["result"]
    assert len(second["tasks"]) == 1
    assert not second.get("nextPageToken")
    assert {first["tasks"][0]["id"], second["tasks"][0]["id"]} == {a1, a2}


async def test_list_bad_page_token(target: Target) -> None:
    """A page token ListTasks never handed out is -32602 naming params.pageToken."""
    err = error_of(await control(target.bus, target.name, codes.LIST_TASKS, {"pageToken": "not-a-token"}))
    assert err["code"] == codes.INVALID_PARAMS
    assert "params.pageToken" in err["message"]


async def test_list_honours_history_length(target: Target) -> None:
    """ListTasks carries at most historyLength messages of each task's history (unset: all)."""
    call = await target.running()
    full = (await control(target.bus, target.name, codes.LIST_TASKS, {}))["result"]
    (mine,) = [t for t in full["tasks"] if t["id"] == call.task_id]
    assert len(mine["history"]) == 1
    cut = (await control(target.bus, target.name, codes.LIST_TASKS, {"historyLength": 0}))["result"]
    (mine,) = [t for t in cut["tasks"] if t["id"] == call.task_id]
    assert not mine.get("history")
