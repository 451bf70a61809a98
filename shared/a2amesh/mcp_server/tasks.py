"""The MCP tasks utility (protocol 2025-11-25) over mesh runs: a task-augmented ``tools/call`` of an agent or
workflow answers at once with a task whose id is the A2A task id (a workflow's execution id), and the run goes
on in the background.

- ``tasks/get``: the task's status, from the A2A state: ``working`` while it runs (the status message is the
  last progress line), then ``completed``, ``failed`` (failed, rejected, any tool error), ``cancelled``, or
  ``input_required`` when the run paused for a review or a question (answer it with ``resume_run``; the
  task then follows the run again: a paused task is looked up with A2A ``GetTask`` at each ``tasks/*``);
- ``tasks/result``: waits for the outcome and answers the tool result (``structuredContent``, ``isError`` for
  failures), with the ``related-task`` ``_meta``;
- ``tasks/cancel``: A2A ``CancelTask`` (the execution and everything under it);
- ``tasks/list``: the caller's tasks, newest first;
- ``notifications/tasks/status`` on every status change, over the session that created the task.

Tasks are bound to the API key that created them (another key's task is unknown) and live in this process's
memory for their ``ttl`` (the run itself is in the store: ``get_run`` reads it any time).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import mcp_types as types
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from a2amesh.client import Call
from a2amesh.errors import A2AMeshError
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.mcp_server.calls import CANCEL_TIMEOUT, META_STATE, CallScope, MeshCaller, error_result
from a2amesh.mcp_server.catalog import MeshTool
from a2amesh.protocol import TaskState

log = get_logger("mcp")

TASK_VERSIONS = frozenset({"2025-11-25"})
"""Protocol versions with the tasks utility (2026-07-28 moved it out of the core protocol)."""
RELATED_TASK = "io.modelcontextprotocol/related-task"
DEFAULT_TTL_MS = 3_600_000
MAX_TTL_MS = 86_400_000
POLL_INTERVAL_MS = 1_000
LIST_PAGE = 100

CAPABILITY = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
)
"""What this server serves: task-augmented ``tools/call`` (of agents and workflows), ``tasks/list``,
``tasks/cancel``."""

TERMINAL = frozenset({"completed", "failed", "cancelled"})
_STATUS_OF_STATE = {
    TaskState.COMPLETED.value: "completed",
    TaskState.CANCELED.value: "cancelled",
    TaskState.INPUT_REQUIRED.value: "input_required",
}


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def status_of(result: types.CallToolResult) -> types.TaskStatus:
    """The MCP task status a tool result ends in (its A2A state, ``failed`` for any other tool error)."""
    state = (result.meta or {}).get(META_STATE)
    status = _STATUS_OF_STATE.get(str(state), "failed")
    if status == "completed" and result.is_error:
        return "failed"
    return cast(types.TaskStatus, status)


@dataclass
class McpTask:
    """One task-augmented call: its MCP task and, once known, its tool result."""

    task_id: str
    owner: str | None
    ttl: int
    session: ServerSession | None
    tool: MeshTool | None = None
    scope: CallScope | None = None
    status: types.TaskStatus = "working"
    message: str | None = None
    created: datetime = field(default_factory=_now)
    updated: datetime = field(default_factory=_now)
    result: types.CallToolResult | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the result is known (terminal, or paused: ``input_required``)."""
    runner: asyncio.Task[None] | None = None

    @property
    def agent(self) -> str | None:
        return self.tool.agent if self.tool is not None else None

    def wire(self) -> types.Task:
        return types.Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.message,
            created_at=_iso(self.created),
            last_updated_at=_iso(self.updated),
            ttl=self.ttl,
            poll_interval=POLL_INTERVAL_MS,
        )

    def expired(self, now: datetime) -> bool:
        """Past its ttl and not being followed (a paused run is in the store: ``get_run`` still reads it)."""
        following = self.runner is not None and not self.runner.done()
        return not following and now > self.created + timedelta(milliseconds=self.ttl)


class McpTasks:
    """The MCP tasks of one server (every session), each following its mesh run in the background."""

    def __init__(self, caller: MeshCaller) -> None:
        self.caller = caller
        self._tasks: dict[str, McpTask] = {}
        self._runners = Background()
        """The tasks following the runs (stopped by :meth:`close`; the runs go on in the mesh)."""

    # --- creating --------------------------------------------------------------------------------

    async def start(
        self, tool: MeshTool, arguments: dict[str, Any], scope: CallScope, *, owner: str | None, ttl: int | None
    ) -> types.CreateTaskResult:
        """Send the call and answer its task at once; a call refused before it ran is a ``failed`` task."""
        self._expire()
        task = McpTask(task_id="", owner=owner, ttl=min(ttl or DEFAULT_TTL_MS, MAX_TTL_MS), session=scope.ctx.session)

        async def progress(step: int, message: str | None) -> None:
            if message:
                await self._update(task, "working", message)

        scope.on_progress = progress
        scope.cancels = False
        started = await self.caller.start(tool, arguments, scope)
        if isinstance(started, types.CallToolResult):
            task.task_id = f"refused-{uuid.uuid4().hex}"
            self._tasks[task.task_id] = task
            self._settle(task, started)
        else:
            task.task_id = started.task_id
            task.tool, task.scope = tool, scope
            self._tasks[task.task_id] = task
            task.runner = self._runners.spawn(self._run(task, tool, started, scope), name=f"mcp-task-{task.task_id}")
        log.info("mcp.task_created", task_id=task.task_id, tool=tool.name, status=task.status)
        return types.CreateTaskResult(task=task.wire())

    async def _run(self, task: McpTask, tool: MeshTool, call: Call, scope: CallScope) -> None:
        await self._outcome(task, tool, self.caller.finish(tool, call, scope))

    async def _outcome(self, task: McpTask, tool: MeshTool, result: Coroutine[Any, Any, types.CallToolResult]) -> None:
        try:
            outcome = await result
        except Exception as e:  # the outer edge of a background run: the task fails with the message
            log.exception("mcp.task_failed", task_id=task.task_id)
            outcome = error_result(f"tool {tool.name!r} failed: {type(e).__name__}: {e}")
        self._settle(task, outcome)
        await self._notify(task)

    async def _refresh(self, task: McpTask) -> None:
        """A paused task whose run went on (answered with ``resume_run``, cancelled …) follows it again."""
        tool, scope = task.tool, task.scope
        if task.status != "input_required" or tool is None or scope is None:
            return
        try:
            a2a = await self.caller.client.get_task(tool.agent, task.task_id, headers=scope.headers)
        except A2AMeshError as e:  # the agent is gone: the task stays as it was last seen
            log.debug("mcp.task_refresh_failed", task_id=task.task_id, error=str(e))
            return
        if a2a.status.state == TaskState.INPUT_REQUIRED or task.status != "input_required":
            return  # still paused, or another request already rejoined it
        task.settled = asyncio.Event()
        await self._update(task, "working", None)
        task.runner = self._runners.spawn(
            self._outcome(task, tool, self.caller.rejoin(tool, task.task_id, scope)), name=f"mcp-task-{task.task_id}"
        )

    def _settle(self, task: McpTask, result: types.CallToolResult) -> None:
        task.result = result
        task.status = status_of(result)
        texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
        task.message = texts[0].splitlines()[0] if texts and task.status != "completed" else None
        task.updated = _now()
        task.settled.set()

    async def _update(self, task: McpTask, status: types.TaskStatus, message: str | None) -> None:
        task.status, task.message, task.updated = status, message, _now()
        await self._notify(task)

    async def _notify(self, task: McpTask) -> None:
        if task.session is None:
            return
        params = types.TaskStatusNotificationParams(**task.wire().model_dump())
        notification = types.TaskStatusNotification(params=params)
        try:  # the SDK's notification union leaves the 2025-11-25 task notification out; the wire has it
            await task.session.send_notification(cast(types.ServerNotification, notification))
        except Exception as e:  # a client gone away: it can still poll
            log.debug("mcp.task_notify_failed", task_id=task.task_id, error=str(e) or type(e).__name__)

    # --- tasks/* ---------------------------------------------------------------------------------

    def get(self, task_id: str, owner: str | None) -> McpTask:
        """The caller's task ``task_id``.

        Raises:
            MCPError: ``INVALID_PARAMS``: no such task for this caller (or it expired).
        """
        self._expire()
        task = self._tasks.get(task_id)
        if task is None or task.owner != owner:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no task {task_id!r} (unknown, or expired)")
        return task

    async def status(self, task_id: str, owner: str | None) -> types.Task:
        """``tasks/get``."""
        task = self.get(task_id, owner)
        await self._refresh(task)
        return task.wire()

    async def result(self, task_id: str, owner: str | None) -> dict[str, Any]:
        """``tasks/result``: wait for the outcome; the tool result with the ``related-task`` ``_meta``."""
        task = self.get(task_id, owner)
        await self._refresh(task)
        await task.settled.wait()
        assert task.result is not None
        body = task.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        body["_meta"] = {**body.get("_meta", {}), RELATED_TASK: {"taskId": task.task_id}}
        return body

    async def cancel(self, task_id: str, owner: str | None, headers: Mapping[str, str]) -> types.Task:
        """``tasks/cancel``: A2A ``CancelTask`` of the run, then the task once the run ended.

        Raises:
            MCPError: ``INVALID_PARAMS``: no such task, or it already ended.
        """
        task = self.get(task_id, owner)
        await self._refresh(task)
        if task.status in TERMINAL or task.agent is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {task_id!r} is already {task.status}")
        try:
            a2a = await self.caller.client.cancel_task(task.agent, task_id, timeout=CANCEL_TIMEOUT, headers=headers)
        except A2AMeshError as e:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {task_id!r} cannot be cancelled: {e}") from e
        log.info("mcp.task_cancelled", task_id=task_id, state=a2a.status.state.value)
        if task.runner is not None and not task.runner.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CANCEL_TIMEOUT):
                    await asyncio.shield(task.runner)
        tool = task.tool
        if tool is not None and task.status not in TERMINAL and a2a.status.state == TaskState.CANCELED:
            self._settle(task, await self.caller.result(tool, a2a))  # it was paused: no runner heard the end
            await self._notify(task)
        return task.wire()

    def list(self, owner: str | None, cursor: str | None) -> types.ListTasksResult:
        """``tasks/list``: the caller's tasks, newest first, ``LIST_PAGE`` a page (the cursor is an offset)."""
        self._expire()
        mine = sorted((t for t in self._tasks.values() if t.owner == owner), key=lambda t: t.created, reverse=True)
        try:
            offset = int(cursor or 0)
        except ValueError as e:
            raise MCPError(code=types.INVALID_PARAMS, message=f"cursor {cursor!r} is not one this server made") from e
        page = mine[offset : offset + LIST_PAGE]
        more = offset + LIST_PAGE < len(mine)
        return types.ListTasksResult(
            tasks=[t.wire() for t in page], next_cursor=str(offset + LIST_PAGE) if more else None
        )

    def _expire(self) -> None:
        now = _now()
        for task_id in [k for k, t in self._tasks.items() if t.expired(now)]:
            del self._tasks[task_id]

    async def close(self) -> None:
        """Stop following the runs (the runs go on in the mesh)."""
        self._runners.cancel()
        await self._runners.wait()
