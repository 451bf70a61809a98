"""A tool call as an A2A call over the mesh: validate, dispatch, report progress, cancel, review, answer.

A call follows its task's stream: every status update becomes an MCP progress notification (when the client
sent a progress token); the client cancelling the request cancels the task (A2A ``CancelTask``, which stops
the execution and its callees). A run that pauses for a human review is answered through elicitation:

- handshake-era sessions (up to 2025-11-25) whose client declared ``elicitation``: the server sends an
  ``elicitation/create`` request while the call is open, resumes the run with the answer and follows it on;
- 2026-07-28 sessions whose client declared ``elicitation``: the call returns an ``InputRequiredResult``
  holding the form and a ``requestState`` naming the run; the client's retry carries the answer;
- other clients: the result says the run is paused, with its id and how to resume it (``resume_run``).

Every failure is a tool result with ``isError`` and the precise message, never a protocol error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from a2amesh.bus import headers as h
from a2amesh.client import Call, Client, make_message
from a2amesh.diagnostics import SchemaIssue
from a2amesh.errors import A2AMeshError, RpcError
from a2amesh.logs import get_logger
from a2amesh.mcp_server.catalog import MeshTool
from a2amesh.mcp_server.resources import ResourceReader
from a2amesh.mcp_server.review import AnswerError, ReviewForm, review_request
from a2amesh.protocol import (
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    codes,
)
from a2amesh.protocol.vocabulary import WORKFLOW_EVENT_KEY

log = get_logger("mcp")

REVIEW_INPUT_KEY = "review"
"""The key of the elicitation in an ``InputRequiredResult``'s ``inputRequests``."""

CANCEL_TIMEOUT = 15.0
MAX_REVIEW_ROUNDS = 5
META_RUN = "a2amesh/run_id"
META_AGENT = "a2amesh/agent"
META_STATE = "a2amesh/state"


class ReviewState(BaseModel):
    """The ``requestState`` of a call waiting for a review answer (2026-07-28 sessions).

    It comes back from the client, so it is checked like any input; answering it needs the same rights as
    ``resume_run`` on the run it names.
    """

    agent: str
    task_id: str
    context_id: str | None = None
    review: dict[str, Any]


def error_result(text: str, **meta: Any) -> types.CallToolResult:
    """A tool error (``isError``) with one precise message."""
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=True, meta={k: v for k, v in meta.items() if v} or None
    )


def issues_text(tool: str, issues: list[SchemaIssue]) -> str:
    """Schema violations as lines ``field: rule`` (the field path without ``$.``; the arguments are ``$``)."""
    lines = [f"invalid arguments for tool {tool!r}:"]
    for issue in issues[:20]:
        path = issue.path.removeprefix("$.").removeprefix("$") or "(arguments)"
        lines.append(f"{path}: {issue.message}")
    return "\n".join(lines)


def progress_text(update: TaskStatusUpdateEvent) -> str | None:
    """One line for a status update: the workflow event (``node.started review``) or the agent's text."""
    metadata = update.metadata or {}
    event = metadata.get(WORKFLOW_EVENT_KEY)
    if isinstance(event, dict):
        kind = str(event.get("event", "")) or "event"
        path = str(event.get("path") or "")
        extra = f" → {event['agent']}" if event.get("agent") else ""
        if event.get("error"):
            extra += f": {event['error']}"
        return f"{kind} {path}{extra}".strip()
    message = update.status.message
    text = message.text() if message is not None else ""
    return text or None


@dataclass
class CallScope:
    """What one tool call runs with: the MCP request's context, the caller's headers, and its limits."""

    ctx: ServerRequestContext[Any, Any]
    """The SDK's context of the ``tools/call`` request."""
    headers: Mapping[str, str]
    timeout: float
    elicitation: bool
    may_review: bool = True
    """Whether the caller may answer reviews (the ``review`` scope)."""
    on_progress: Callable[[int, str | None], Awaitable[None]] | None = None
    """Where progress goes instead of the request's progress notifications (a task-augmented call, whose
    request has been answered: its MCP task's status message)."""
    cancels: bool = True
    """Whether the call being cancelled cancels the run (not for an MCP task: only ``tasks/cancel`` does)."""

    @property
    def modern(self) -> bool:
        """Whether the session speaks the 2026-07-28 protocol (no server-initiated requests)."""
        return self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    def can_elicit(self) -> bool:
        """Whether the client declared form elicitation (and elicitation is on)."""
        if not self.elicitation:
            return False
        caps = self.ctx.session.client_capabilities
        return caps is not None and caps.elicitation is not None

    async def progress(self, step: int, message: str | None) -> None:
        if self.on_progress is not None:
            await self.on_progress(step, message)
            return
        await self.ctx.session.report_progress(float(step), None, message)


async def report_progress(events: AsyncIterator[StreamResponse], scope: CallScope, *, step: int = 0) -> None:
    """One progress notification per status update of ``events`` until the final one (counting on from
    ``step``)."""
    async for event in events:
        update = event.status_update
        if update is not None and not update.status.state.final:
            step += 1
            await _report(scope, step, progress_text(update))


async def _report(scope: CallScope, step: int, text: str | None) -> None:
    try:
        await scope.progress(step, text)
    except Exception as e:  # a client gone away must not stop the run being followed
        log.debug("mcp.progress_failed", error=str(e) or type(e).__name__)


async def cancel_shielded(client: Client, agent: str, task_id: str, scope: CallScope) -> None:
    """Cancel the task of a call whose MCP request was cancelled (shielded: we are being cancelled)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
        try:
            task = await client.cancel_task(agent, task_id, timeout=CANCEL_TIMEOUT, headers=scope.headers)
            log.info("mcp.call_cancelled", agent=agent, task_id=task_id, state=task.status.state.value)
        except Exception as e:  # best effort: the run may have ended meanwhile
            log.warning("mcp.cancel_failed", agent=agent, task_id=task_id, error=str(e) or type(e).__name__)


async def watch_task(client: Client, agent: str, task_id: str, scope: CallScope) -> None:
    """Follow a task started elsewhere (A2A ``SubscribeToTask``) until its final state, reporting progress; a
    cancelled MCP request cancels the task."""
    try:
        await _report(scope, 1, f"run {task_id} of {agent} is running")
        events = client.subscribe(agent, task_id, timeout=scope.timeout, headers=scope.headers)
        await report_progress(events, scope, step=1)
    except asyncio.CancelledError:
        await cancel_shielded(client, agent, task_id, scope)
        raise


class MeshCaller:
    """Runs mesh tools: one A2A call per tool call, followed to its end (or its pause)."""

    def __init__(self, client: Client, resources: ResourceReader) -> None:
        self.client = client
        self.resources = resources

    async def call(
        self, tool: MeshTool, arguments: dict[str, Any], scope: CallScope
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Validate ``arguments``, call the tool's agent and answer with its outcome."""
        issues = tool.check_arguments(arguments)
        if issues:
            return error_result(issues_text(tool.name, issues))
        text, data = tool.input_of(arguments)
        message = make_message(text, data=data)
        return await self._drive(tool, message, scope)

    async def answer(
        self, tool: MeshTool, state_text: str, responses: Mapping[str, Any] | None, scope: CallScope
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The retry of a call that returned an ``InputRequiredResult``: resume the run with the answer."""
        try:
            state = ReviewState.model_validate_json(state_text)
        except ValidationError as e:
            return error_result(f"requestState is not one this server made: {str(e).splitlines()[0]}")
        if state.agent != tool.agent:
            return error_result(f"requestState names a run of {state.agent!r}, not of tool {tool.name!r}")
        paused = Task(id=state.task_id, context_id=state.context_id, status=_paused_status(state.review))
        if not scope.may_review:
            return _paused_result(tool, paused, state.review, "this key lacks the 'review' scope")
        response = (responses or {}).get(REVIEW_INPUT_KEY)
        if not isinstance(response, types.ElicitResult):
            return _paused_result(tool, paused, state.review, "no answer to the review came with the retry")
        outcome = await self._answered(tool, paused, state.review, response, scope, rounds=1)
        return error_result(outcome) if isinstance(outcome, str) else outcome

    async def start(self, tool: MeshTool, arguments: dict[str, Any], scope: CallScope) -> Call | types.CallToolResult:
        """Validate ``arguments`` and send the call without following it (a task-augmented call): the call in
        flight, or the tool error that stopped it."""
        issues = tool.check_arguments(arguments)
        if issues:
            return error_result(issues_text(tool.name, issues))
        text, data = tool.input_of(arguments)
        try:
            return await self.client.dispatch(
                tool.agent, make_message(text, data=data), stream=True, timeout=scope.timeout, headers=scope.headers
            )
        except A2AMeshError as e:
            return error_result(f"{tool.agent}: {e}", **{META_AGENT: tool.agent})

    async def finish(self, tool: MeshTool, call: Call, scope: CallScope) -> types.CallToolResult:
        """Follow a call :meth:`start` sent to its outcome (a task-augmented call: reviews are not asked)."""
        try:
            task = await self.follow_call(call, scope)
        except A2AMeshError as e:
            return error_result(f"{tool.agent}: {e}", **{META_AGENT: tool.agent, META_RUN: call.task_id})
        return await self._outcome_of(tool, task, scope)

    async def rejoin(self, tool: MeshTool, task_id: str, scope: CallScope) -> types.CallToolResult:
        """Follow a run that went on after it paused (A2A ``SubscribeToTask``) to its outcome (an MCP task)."""
        try:
            events = self.client.subscribe(tool.agent, task_id, timeout=scope.timeout, headers=scope.headers)
            await report_progress(events, scope)
            task = await self.client.get_task(tool.agent, task_id, headers=scope.headers)
        except A2AMeshError as e:
            return error_result(f"{tool.agent}: {e}", **{META_AGENT: tool.agent, META_RUN: task_id})
        return await self._outcome_of(tool, task, scope)

    async def _outcome_of(self, tool: MeshTool, task: Task, scope: CallScope) -> types.CallToolResult:
        review = review_request(task) if task.status.state == TaskState.INPUT_REQUIRED else None
        if review is None:
            return await self.result(tool, task, user=scope.headers.get(h.USER))
        return _paused_result(tool, task, review, "a call run as an MCP task does not ask reviews")

    async def _drive(
        self, tool: MeshTool, message: Message, scope: CallScope, *, rounds: int = 0
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            task = await self.follow(tool.agent, message, scope)
        except A2AMeshError as e:
            if isinstance(e, RpcError) and e.code == codes.INVALID_PARAMS and message.task_id:
                raise  # a refused review answer: the caller asks again
            return error_result(f"{tool.agent}: {e}", **{META_AGENT: tool.agent, META_RUN: message.task_id})
        review = review_request(task) if task.status.state == TaskState.INPUT_REQUIRED else None
        if review is None:
            return await self.result(tool, task, user=scope.headers.get(h.USER))
        return await self._review(tool, task, review, scope, rounds=rounds)

    async def follow(self, agent: str, message: Message, scope: CallScope) -> Task:
        """Send ``message`` to ``agent`` and follow the task to its final state, reporting progress; a cancelled
        MCP request cancels the task."""
        call = await self.client.dispatch(agent, message, stream=True, timeout=scope.timeout, headers=scope.headers)
        return await self.follow_call(call, scope)

    async def follow_call(self, call: Call, scope: CallScope) -> Task:
        """Follow a dispatched call to its final state (see :meth:`follow`)."""
        log.info("mcp.call", agent=call.agent, task_id=call.task_id)
        try:
            await report_progress(call.events(), scope)
        except asyncio.CancelledError:
            if scope.cancels:
                await cancel_shielded(self.client, call.agent, call.task_id, scope)
            raise
        if call.task is None:
            raise RpcError(codes.INVALID_AGENT_RESPONSE, f"{call.agent!r} ended the call without a task")
        return call.task

    async def _review(
        self, tool: MeshTool, task: Task, review: dict[str, Any], scope: CallScope, *, rounds: int
    ) -> types.CallToolResult | types.InputRequiredResult:
        if not scope.may_review:
            return _paused_result(tool, task, review, "this key lacks the 'review' scope")
        if not scope.can_elicit():
            return _paused_result(tool, task, review, "the client cannot answer reviews (no elicitation)")
        form = ReviewForm(review)
        if scope.modern:
            return _input_required(tool, task, form, None)
        problem: str | None = None
        while rounds < MAX_REVIEW_ROUNDS:
            rounds += 1
            try:
                response = await scope.ctx.session.elicit_form(
                    form.message(problem), form.schema(), related_request_id=scope.ctx.request_id
                )
            except Exception as e:  # the client failed to answer: the run stays paused
                return _paused_result(tool, task, review, f"the review could not be asked: {e}")
            outcome = await self._answered(tool, task, review, response, scope, rounds=rounds)
            if isinstance(outcome, str):
                problem = outcome
                continue
            return outcome
        return _paused_result(tool, task, review, f"no valid answer after {MAX_REVIEW_ROUNDS} tries")

    async def _answered(
        self,
        tool: MeshTool,
        task: Task,
        review: dict[str, Any],
        response: types.ElicitResult,
        scope: CallScope,
        *,
        rounds: int,
    ) -> types.CallToolResult | types.InputRequiredResult | str:
        """Resume with an answer. Returns the call's outcome, or (handshake era) the refusal text to ask again."""
        form = ReviewForm(review)
        if response.action != "accept":
            return _paused_result(tool, task, review, f"the user chose {response.action!r}")
        try:
            body = form.answer(response.content)
        except AnswerError as e:
            return self._again(tool, task, form, str(e), scope, rounds)
        message = make_message(data=body, task_id=task.id, context_id=task.context_id)
        log.info("mcp.review_answered", agent=tool.agent, task_id=task.id, decision=body["decision"])
        try:
            return await self._drive(tool, message, scope, rounds=rounds)
        except RpcError as e:  # INVALID_PARAMS: the executor refused the edit (edit_schema); the run stays paused
            return self._again(tool, task, form, str(e), scope, rounds)

    def _again(
        self, tool: MeshTool, task: Task, form: ReviewForm, problem: str, scope: CallScope, rounds: int
    ) -> types.CallToolResult | types.InputRequiredResult | str:
        if not scope.modern:
            return problem
        if rounds >= MAX_REVIEW_ROUNDS:
            return _paused_result(tool, task, form.review, f"no valid answer after {MAX_REVIEW_ROUNDS} tries")
        return _input_required(tool, task, form, problem)

    async def result(self, tool: MeshTool, task: Task, *, user: str | None = None) -> types.CallToolResult:
        """The tool result of a finished (or otherwise interrupted) task (``user``: who may read its artifacts)."""
        state = task.status.state
        meta = {META_RUN: task.id, META_AGENT: tool.agent, META_STATE: state.value}
        status_text = task.status.message.text() if task.status.message else ""
        if state != TaskState.COMPLETED:
            if state == TaskState.INPUT_REQUIRED:
                text = (
                    f"{tool.agent} asks for more input (run {task.id}): {status_text or '(no question given)'}\n"
                    f"answer with the resume_run tool: {{'run_id': '{task.id}', 'agent': '{tool.agent}', "
                    "'answer': '...'}"
                )
                return error_result(text, **meta)
            text = f"{tool.agent} {_state_word(state)} (run {task.id})" + (f": {status_text}" if status_text else "")
            return error_result(text, **meta)
        output = task.output()
        content: list[types.ContentBlock] = []
        links = await self.resources.links(task)
        part = task.result_part()
        if part is not None and part.url is not None and self.resources.is_artifact(part.url):
            size = (part.metadata or {}).get("size")
            about = f" ({size} bytes)" if isinstance(size, int) else ""
            content.append(
                types.TextContent(text=f"the output is stored as {part.url}{about}: read it with resources/read")
            )
            loaded = await self.resources.value(part.url, user=user)
            if loaded is not None:
                output = loaded
        else:
            content.append(types.TextContent(text=_as_text(output)))
        content.extend(links)
        structured = tool.structured(output) if output is not None else None
        if tool.tool.output_schema is not None and structured is None:
            text = f"{tool.agent} completed (run {task.id}) without the output its schema promises"
            return error_result(text, **meta)
        return types.CallToolResult(content=content, structured_content=structured, meta=meta)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, default=str, ensure_ascii=False)


def _state_word(state: TaskState) -> str:
    return {
        TaskState.FAILED: "failed",
        TaskState.CANCELED: "was canceled",
        TaskState.REJECTED: "rejected the request",
        TaskState.AUTH_REQUIRED: "needs authorization",
    }.get(state, state.value)


def _paused_status(review: dict[str, Any]) -> TaskStatus:
    message = Message(message_id="review", role=Role.AGENT, parts=[Part.of_data(review)])
    return TaskStatus(state=TaskState.INPUT_REQUIRED, message=message)


def _paused_result(tool: MeshTool, task: Task, review: dict[str, Any], why: str) -> types.CallToolResult:
    prompt = review.get("prompt") or "a review"
    path = review.get("path")
    lines = [
        f"run {task.id} of {tool.agent} is paused for a human review at {path!r}: {prompt}",
        f"(not answered here: {why})",
        "data under review: " + json.dumps(review.get("data"), default=str),
        f"resume it with the resume_run tool: {{'run_id': '{task.id}', 'agent': '{tool.agent}', "
        "'decision': 'approve' | 'reject' | 'edit', 'data': <edited data>, 'reason': '...'}",
        f"or from a shell: a2amesh resume {task.id} --approve | --reject [--reason TEXT] | --edit JSON",
    ]
    meta = {META_RUN: task.id, META_AGENT: tool.agent, META_STATE: TaskState.INPUT_REQUIRED.value}
    return types.CallToolResult(
        content=[types.TextContent(text="\n".join(lines))],
        is_error=True,
        meta={**meta, "a2amesh/review": review},
    )


def _input_required(tool: MeshTool, task: Task, form: ReviewForm, problem: str | None) -> types.InputRequiredResult:
    state = ReviewState(agent=tool.agent, task_id=task.id, context_id=task.context_id, review=form.review)
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=form.message(problem), requested_schema=form.schema())
    )
    return types.InputRequiredResult(
        input_requests={REVIEW_INPUT_KEY: request}, request_state=state.model_dump_json(exclude_none=True)
    )
