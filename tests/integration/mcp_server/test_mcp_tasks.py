"""The MCP tasks utility (2025-11-25) over the gateway's ``/mcp``, with the official ``mcp`` client: a
task-augmented call of a workflow answers with a task at once; ``tasks/get``, ``tasks/result``,
``tasks/cancel`` and ``tasks/list`` follow and steer the run it started."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import TaskState
from tests.support.mcp import Seen, Sleeper, mcp_http, start_mesh, text_of
from tests.support.waiting import eventually, within

KEYS = "admin=adm1n-secret,runner=runn3r-secret#run|read"

GATED: dict[str, Any] = {
    "name": "gated",
    "description": "Waits at the gate, then passes x on",
    "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    "output_schema": {"type": "object", "properties": {"passed": {"type": "number"}}, "required": ["passed"]},
    "nodes": [{"id": "g", "type": "agent", "agent_name": "gate", "input": {"x": "{{workflow.input.x}}"}}],
    "output_mapping": {"passed": "{{g.output.passed}}"},
}


@dataclass
class Gate:
    """An agent that waits until the test opens it."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    open: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.entered.set()
        await self.open.wait()
        return {"passed": input["x"]}


class TaskStatuses(ClientExtension):
    """Hears notifications/tasks/status (the SDK's client keeps no handler for it: a binding does)."""

    identifier = "io.a2amesh/test-task-status"

    def __init__(self) -> None:
        self.heard: list[types.TaskStatusNotificationParams] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/tasks/status", params_type=types.TaskStatusNotificationParams, handler=self.hear
            )
        ]

    async def hear(self, params: types.TaskStatusNotificationParams) -> None:
        self.heard.append(params)


@pytest.fixture
async def sleeper(agent_host: Any, executor: Any, client: Client) -> Sleeper:
    return await start_mesh(agent_host, executor, client)


@pytest.fixture
async def gate(agent_host: Any, sleeper: Sleeper) -> Gate:
    gate = Gate()
    await agent_host("gate", gate)
    return gate


@pytest.fixture
async def url(gate: Gate, gateway: Any, client: Client) -> str:
    address = str(await gateway(api_keys=parse_api_keys(KEYS)))
    async with mcp_http(address, "adm1n-secret") as mcp:
        created = await mcp.call_tool("create_workflow", {"definition": GATED})
        assert not created.is_error, created.content
    await client.registry.wait_for("gated", 10)
    return address


async def call_as_task(session: ClientSession, name: str, arguments: dict[str, Any]) -> types.CreateTaskResult:
    """A task-augmented tools/call. The SDK keeps tasks as types only and checks every tools/call answer as a
    CallToolResult, so the request goes through the session's dispatcher and the answer is checked here."""
    assert session.protocol_version is not None
    raw = await session._dispatcher.send_raw_request(
        "tools/call",
        {"name": name, "arguments": arguments, "task": {"ttl": 60_000}},
        {"headers": {MCP_PROTOCOL_VERSION_HEADER: session.protocol_version}},
    )
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(session: ClientSession, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.GetTaskResult)


async def task_result(session: ClientSession, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await session.send_request(request, types.CallToolResult)


async def cancel_task(session: ClientSession, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.CancelTaskResult)


async def test_a_task_augmented_call_answers_a_task_and_follows_the_run(url: str, gate: Gate, client: Client) -> None:
    """The call answers at once with a task whose id is the execution's; tasks/get shows it working, then
    completed (and says so with notifications/tasks/status); tasks/result is the structured output; tasks/list
    lists it; another key does not see it; a call without a task is answered as before."""
    statuses = TaskStatuses()
    async with mcp_http(url, "adm1n-secret", mode="legacy", extensions=[statuses]) as mcp:
        session = mcp.session
        caps = session.server_capabilities
        assert caps is not None
        assert caps.tasks is not None
        assert caps.tasks.requests is not None
        assert caps.tasks.requests.tools is not None
        assert caps.tasks.requests.tools.call is not None
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert tools["gated"].execution is not None
        assert tools["gated"].execution.task_support == "optional"
        assert tools["list_runs"].execution is None

        created = await within(call_as_task(session, "gated", {"x": 3}), 10, "the task to be created")
        task_id = created.task.task_id
        assert created.task.status == "working"
        assert created.task.ttl == 60_000
        await within(gate.entered.wait(), 20, "the gated workflow to reach the gate")
        working = await get_task(session, task_id)
        assert working.status == "working"
        a2a = await client.get_task("gated", task_id)
        assert a2a.status.state == TaskState.WORKING

        async with mcp_http(url, "runn3r-secret", mode="legacy") as other:
            with pytest.raises(MCPError, match="no task"):
                await get_task(other.session, task_id)

        gate.open.set()
        result = await within(task_result(session, task_id), 20, "tasks/result")
        assert not result.is_error, result.content
        assert result.structured_content == {"passed": 3}
        assert result.meta is not None
        assert result.meta["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        assert result.meta["a2amesh/run_id"] == task_id
        done = await get_task(session, task_id)
        assert done.status == "completed"

        async def told() -> bool:
            return any(n.task_id == task_id and n.status == "completed" for n in statuses.heard)

        await eventually(told, timeout=10, what="notifications/tasks/status saying the task completed")

        listing = await session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert [t.task_id for t in listing.tasks] == [task_id]
        assert listing.tasks[0].status == "completed"

        plain = await within(mcp.call_tool("gated", {"x": 5}), 20, "a plain call")
        assert plain.structured_content == {"passed": 5}


async def test_bad_arguments_make_a_failed_task_and_unknown_tools_an_error(url: str) -> None:
    async with mcp_http(url, "adm1n-secret", mode="legacy") as mcp:
        session = mcp.session
        created = await call_as_task(session, "gated", {"x": "three"})
        result = await task_result(session, created.task.task_id)
        assert result.is_error
        assert "x: 'three' is not of type 'number'" in text_of(result)
        assert (await get_task(session, created.task.task_id)).status == "failed"
        with pytest.raises(MCPError, match="does not run as a task"):
            await call_as_task(session, "list_runs", {})
        with pytest.raises(MCPError, match="unknown tool 'gatd'"):
            await call_as_task(session, "gatd", {"x": 1})


async def test_tasks_cancel_cancels_the_execution(url: str, sleeper: Sleeper, client: Client) -> None:
    """tasks/cancel sends A2A CancelTask: the execution and its running agent stop, GetTask says canceled, the
    task is cancelled and its result is a tool error; a second cancel is refused."""
    async with mcp_http(url, "adm1n-secret", mode="legacy") as mcp:
        session = mcp.session
        created = await within(call_as_task(session, "slow_flow", {"text": "wait"}), 10, "the task to be created")
        task_id = created.task.task_id
        await within(sleeper.started.wait(), 20, "the workflow's node to start the sleeper")
        cancelled = await within(cancel_task(session, task_id), 30, "tasks/cancel")
        assert cancelled.task_id == task_id
        assert cancelled.status == "cancelled"
        await within(sleeper.cancelled.wait(), 20, "the sleeper to be cancelled")

        async def canceled() -> bool:
            return (await client.get_task("slow_flow", task_id)).status.state == TaskState.CANCELED

        await eventually(canceled, timeout=20, what="GetTask to say the execution is canceled")
        result = await task_result(session, task_id)
        assert result.is_error
        assert result.meta is not None
        assert result.meta["a2amesh/state"] == TaskState.CANCELED.value
        with pytest.raises(MCPError, match="already cancelled"):
            await cancel_task(session, task_id)


async def test_execute_workflow_reports_progress(url: str, gate: Gate) -> None:
    """execute_workflow (waiting) follows the execution: progress says it runs (then carries the events the
    subscription hears), and the call returns the completed execution."""
    seen = Seen()
    async with mcp_http(url, "adm1n-secret") as mcp:
        call = asyncio.create_task(
            mcp.call_tool(
                "execute_workflow", {"workflow": "gated", "input": {"x": 7}}, progress_callback=seen.on_progress
            )
        )

        async def running() -> bool:
            return any(m and m.startswith("run ") and m.endswith("of gated is running") for _, m in seen.progress)

        await eventually(running, timeout=20, what="the progress saying the execution runs")
        gate.open.set()
        result = await within(call, 20, "execute_workflow")
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["status"] == "completed"
        assert result.structured_content["output"] == {"passed": 7}
        assert seen.progress[0][0] == 1
        steps = [p for p, _ in seen.progress]
        assert steps == sorted(steps)
        assert len(set(steps)) == len(steps)


async def test_a_paused_run_is_an_input_required_task_that_resume_run_moves_on(url: str) -> None:
    """A run paused for a review is not asked through elicitation: the task is input_required and its result
    says how to resume; once resume_run answered the review, the task follows the run to completed."""
    async with mcp_http(url, "adm1n-secret", mode="legacy") as mcp:
        session = mcp.session
        created = await call_as_task(session, "refund", {"amount": 40})
        task_id = created.task.task_id

        async def paused() -> bool:
            return (await get_task(session, task_id)).status == "input_required"

        await eventually(paused, timeout=20, what="the refund task to be input_required")
        waiting = await task_result(session, task_id)
        assert waiting.is_error
        text = text_of(waiting)
        assert f"run {task_id} of refund is paused for a human review at 'review'" in text
        assert "resume_run" in text
        resumed = await within(mcp.call_tool("resume_run", {"run_id": task_id, "decision": "approve"}), 30, "resume")
        assert not resumed.is_error, resumed.content
        result = await within(task_result(session, task_id), 20, "tasks/result after the resume")
        assert not result.is_error, result.content
        assert result.structured_content == {"paid": 40}
        assert (await get_task(session, task_id)).status == "completed"


async def test_tasks_cancel_of_a_paused_run(url: str, client: Client) -> None:
    """A task paused for a review is cancelled like a running one: the run is canceled, the task cancelled."""
    async with mcp_http(url, "adm1n-secret", mode="legacy") as mcp:
        session = mcp.session
        task_id = (await call_as_task(session, "refund", {"amount": 30})).task.task_id

        async def paused() -> bool:
            return (await get_task(session, task_id)).status == "input_required"

        await eventually(paused, timeout=20, what="the refund task to be input_required")
        cancelled = await within(cancel_task(session, task_id), 30, "tasks/cancel")
        assert cancelled.status == "cancelled"
        assert (await client.get_task("refund", task_id)).status.state == TaskState.CANCELED
        result = await task_result(session, task_id)
        assert result.is_error
        assert "refund was canceled" in text_of(result)
