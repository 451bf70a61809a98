"""The one A2A control plane: GetTask, CancelTask, SubscribeToTask and ListTasks on a control subject.

The agent host and the workflow executor answer these identically from the task records in Redis; what
differs (stopping a task that runs here, following one that runs here) they provide through
:class:`ControlBackend`. Answers go to the NATS reply inbox with ``A2A-Agent``; a request without one
(``SubscribeToTask`` is published, not requested) gets its error on ``A2A-Reply-To`` (docs/protocol.md §7).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, RpcError, TaskNotCancelable, TaskNotFound, TransportError, to_rpc_error
from a2amesh.jsontext import dumps_bytes
from a2amesh.lifecycle import CANCEL_ANSWER_LIMIT
from a2amesh.protocol import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
    codes,
)
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.protocol.vocabulary import SUMMARY_KEY
from a2amesh.rpc import encode_error, encode_result
from a2amesh.store.tasks import Subscriber, TaskStore
from a2amesh.worker.decode import parse_body, validate_request
from a2amesh.worker.replies import ReplyPublisher, send_error, valid_reply_subject

__all__ = [
    "AnswerNow",
    "AnswerWhenStopped",
    "Cancellation",
    "ControlBackend",
    "ControlPlane",
    "answer_canceller",
]

DEFAULT_PAGE_SIZE = 50
_ENVELOPE_SLACK = 4096
"""Bytes of a ListTasks answer's budget kept for the envelope, the page fields and the headers."""


@dataclass(frozen=True)
class AnswerNow:
    """CancelTask is answered at once with this task."""

    task: Task


@dataclass(frozen=True)
class AnswerWhenStopped:
    """The task runs here and was asked to stop: answer once it has (at most ``CANCEL_ANSWER_LIMIT``).

    Attributes:
        stopped: waits until the task has stopped and is stored CANCELED, and returns it; None when another
            replica answers after all; raises what the canceller is answered instead (``TaskNotCancelable``: it
            reached another final state first).
        task: the task as it stands, answered when it is still stopping at the limit.
    """

    stopped: Callable[[], Awaitable[Task | None]]
    task: Callable[[], Awaitable[Task | None]]


Cancellation = AnswerNow | AnswerWhenStopped | None
"""What a backend did with a CancelTask: answer now, answer once stopped, or ``None`` (its owner answers)."""


class ControlBackend(Protocol):
    """What the agent host and the executor each provide to the control plane."""

    async def cancel(self, agent: str, task_id: str, request: str) -> Cancellation:
        """Cancel ``task_id``: an answer of ``CANCELED`` is stored before it is given (docs/lifecycle.md).

        ``request`` names this CancelTask (its reply inbox; every replica gets the same), so the replicas that
        answer it answer alike: a replica that finds the task canceled by this very request answers CANCELED,
        one that finds it canceled by an earlier one answers TaskNotCancelable.

        Raises:
            TaskNotCancelable: the task is final.
        """
        ...

    async def follow(self, agent: str, task_id: str, subscriber: Subscriber) -> bool:
        """Send ``subscriber`` the events of ``task_id`` if it runs here (a snapshot first); False if it does not."""
        ...


class ControlPlane:
    """Answers the control subjects of one worker; ``async with`` owns the answers still waiting.

    Args:
        bus: the worker's bus.
        settings: reply TTLs, ``max_request_bytes``.
        tasks: the task records.
        backend: the worker's side (stop, follow).
        log: the worker's logger.
    """

    def __init__(self, bus: Bus, settings: Settings, tasks: TaskStore, backend: ControlBackend, *, log: Any) -> None:
        self.bus = bus
        self.settings = settings
        self.tasks = tasks
        self.backend = backend
        self.log = log
        self._group: asyncio.TaskGroup | None = None

    async def __aenter__(self) -> ControlPlane:
        group = asyncio.TaskGroup()
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(kind, exc, tb)

    async def handle(self, msg: Received, agent: str) -> None:
        """Answer one control request sent to ``agent``. Never raises."""
        request_id: JsonRpcId = None
        try:
            if len(msg.data) > self.settings.max_request_bytes:
                raise TransportError(
                    codes.PAYLOAD_TOO_LARGE,
                    f"control request of {len(msg.data)} bytes exceeds the limit of "
                    f"{self.settings.max_request_bytes} bytes",
                )
            body = parse_body(msg.data)
            request_id = body.request_id
            decoded = validate_request(body, msg.headers, allowed=codes.CONTROL_METHODS)
            request_id = decoded.request_id
            params = decoded.params
            if isinstance(params, GetTaskRequest):
                task = await self.tasks.get(params.id)
                if task is None:
                    raise TaskNotFound(params.id)
                await self._answer(msg, agent, request_id, task.with_history(params.history_length).to_json_dict())
            elif isinstance(params, CancelTaskRequest):
                await self._cancel(msg, agent, request_id, params.id)
            elif isinstance(params, SubscribeToTaskRequest):
                await self._subscribe(msg, agent, request_id, params.id)
            elif isinstance(params, ListTasksRequest):
                await self._answer(msg, agent, request_id, (await self.list(agent, params)).to_json_dict())
        except A2AMeshError as e:
            self.log.info("control.rejected", agent=agent, error=str(e))
            await self._error(msg, agent, request_id, to_rpc_error(e))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("control.internal_error", agent=agent)
            await self._error(msg, agent, request_id, to_rpc_error(e))

    # answers
    async def _answer(self, msg: Received, agent: str, request_id: JsonRpcId, result: dict[str, Any]) -> None:
        if not msg.reply:
            return
        body = encode_result(request_id, result)
        if len(body) > self.bus.max_payload:
            raise TransportError(
                codes.PAYLOAD_TOO_LARGE,
                f"the answer of {len(body)} bytes exceeds the server's max_payload of {self.bus.max_payload} bytes; "
                "ask with a smaller historyLength",
            )
        await self.bus.publish(msg.reply, body, {h.AGENT: agent})

    async def answer_canceller(self, request: str, agent: str, task: Task) -> None:
        """:func:`answer_canceller` on this plane's bus."""
        await answer_canceller(self.bus, request, agent, task, log=self.log)

    async def _error(self, msg: Received, agent: str, request_id: JsonRpcId, error: RpcError) -> None:
        try:
            if msg.reply:
                await self.bus.publish(msg.reply, encode_error(request_id, error), {h.AGENT: agent})
            else:  # SubscribeToTask is published, not requested: its answer goes to A2A-Reply-To
                await send_error(
                    self.bus,
                    self.settings,
                    agent=agent,
                    reply_to=msg.headers.get(h.REPLY_TO),
                    request_id=request_id,
                    error=error,
                    attempt=1,
                )
        except Exception as e:  # NATS away: the requester times out, as it would without an answer
            self.log.warning("control.answer_failed", agent=agent, error=str(e) or type(e).__name__)

    # CancelTask
    async def _cancel(self, msg: Received, agent: str, request_id: JsonRpcId, task_id: str) -> None:
        # the CancelTask named as a subscriber (its reply subject and JSON-RPC id): stored as the task's
        # 'canceled_by', it lets the replica that stores the CANCELED final answer it when the owner the cancel
        # was left to died holding the task (:meth:`answer_canceller`)
        request = Subscriber(msg.reply, request_id).member() if msg.reply else ""
        outcome = await self.backend.cancel(agent, task_id, request)
        if isinstance(outcome, AnswerNow):
            await self._answer(msg, agent, request_id, outcome.task.to_json_dict())
        elif isinstance(outcome, AnswerWhenStopped):
            # answered from a task of its own: control requests are served one at a time, and a GetTask must
            # not wait behind a task taking its time to stop
            answer = self._answer_when_stopped(msg, agent, request_id, task_id, outcome)
            try:
                if self._group is None:
                    raise RuntimeError("the control plane is not running")
                self._group.create_task(answer)
            except RuntimeError:  # shutting down: answer here, as it stands once stopped
                await answer

    async def _answer_when_stopped(
        self, msg: Received, agent: str, request_id: JsonRpcId, task_id: str, outcome: AnswerWhenStopped
    ) -> None:
        # never raises: a failing child would cancel the whole task group (the worker's serving)
        try:
            try:
                async with asyncio.timeout(CANCEL_ANSWER_LIMIT):
                    task = await outcome.stopped()
            except TimeoutError:  # still stopping: the task as it stands (not CANCELED, which is never early)
                async with asyncio.timeout(CANCEL_ANSWER_LIMIT):
                    task = await outcome.task()
            if task is not None:
                await self._answer(msg, agent, request_id, task.to_json_dict())
        except A2AMeshError as e:
            await self._error(msg, agent, request_id, to_rpc_error(e))
        except Exception as e:  # NATS or Redis away: the canceller's request times out, as it would unanswered
            self.log.warning("control.answer_failed", task_id=task_id, error=str(e) or type(e).__name__)

    # SubscribeToTask
    async def _subscribe(self, msg: Received, agent: str, request_id: JsonRpcId, task_id: str) -> None:
        reply_to = msg.headers.get(h.REPLY_TO)
        if not valid_reply_subject(self.bus, reply_to):
            raise RpcError(
                codes.INVALID_REQUEST,
                f"SubscribeToTask needs a {h.REPLY_TO} header with a reply subject "
                f"({self.bus.subjects.reply_prefix()}{{instance}}.{{callee}}.{{call_id}})",
            )
        assert reply_to is not None
        subscriber = Subscriber(reply_to, request_id)  # its answers carry its own request's id
        if await self.backend.follow(agent, task_id, subscriber):
            return
        view = await self.tasks.add_subscriber(task_id, subscriber)
        if view.outcome == "terminal" and view.task is not None:
            publisher = ReplyPublisher(self.bus, self.settings, agent=agent, task_id=task_id, attempt=1)
            try:
                await publisher.final(reply_to, request_id, view.task, 0, streaming=False)
            except TransportError as e:
                self.log.warning("reply.undeliverable", agent=agent, subject=reply_to, error=str(e))

    # ListTasks
    async def list(self, agent: str, req: ListTasksRequest) -> ListTasksResponse:
        """One page of ``agent``'s tasks, newest first, sized to fit the server's ``max_payload``.

        Raises:
            RpcError: -32602 for a page token this plane did not hand out.
        """
        offset = _offset_of(req.page_token)
        size = req.page_size or DEFAULT_PAGE_SIZE
        tasks, total = await self.tasks.list(
            agent, context_id=req.context_id, state=req.status, offset=offset, limit=size
        )
        budget = max(self.bus.max_payload - _ENVELOPE_SLACK, 1024)
        item_limit = max(budget // 8, 512)
        page: list[Task] = []
        used = 0
        for task in tasks:
            if not req.include_artifacts:
                task = task.model_copy(update={"artifacts": None})
            task = task.with_history(req.history_length)
            weight = len(dumps_bytes(task.to_json_dict()))
            if weight > item_limit:
                task = _summary(task)
                weight = len(dumps_bytes(task.to_json_dict()))
            if page and used + weight + 1 > budget:
                break  # the rest go on the next page
            page.append(task)
            used += weight + 1
        end = offset + len(page)
        return ListTasksResponse(
            tasks=page, next_page_token=str(end) if end < total else "", page_size=len(page), total_size=total
        )


def _offset_of(token: str | None) -> int:
    if not token:
        return 0
    if len(token) > 9 or not token.isascii() or not token.isdigit():
        shown = token if len(token) <= 40 else f"{token[:40]}…"
        raise RpcError(
            codes.INVALID_PARAMS,
            f"invalid params of ListTasks: params.pageToken: {shown!r} is not a page token "
            "(give the nextPageToken of the previous page)",
        )
    return int(token)


def _summary(task: Task) -> Task:
    """A task too large for a list page: its id, context and state (GetTask has the rest)."""
    status = TaskStatus(state=task.status.state, timestamp=task.status.timestamp)
    return Task(id=task.id, context_id=task.context_id, status=status, metadata={SUMMARY_KEY: True})


async def answer_canceller(bus: Bus, request: str, agent: str, task: Task, *, log: Any) -> None:
    """Answer the CancelTask ``request`` names (as :meth:`ControlPlane._cancel` names it) with the final ``task``
    stored since: CANCELED, else ``TaskNotCancelable``.

    The replicas that got a CancelTask leave it to the task's holder; when that holder was gone (SIGKILLed holding
    its claim or lease), the replica that later finds the cancel mark (an agent claiming the redelivery, an
    executor taking the execution over) stores CANCELED and answers the canceller so. Never raises: the
    canceller times out, as unanswered."""
    canceller = Subscriber.parse(request)
    if not canceller.subject:
        return
    try:
        if task.status.state == TaskState.CANCELED:
            body = encode_result(canceller.request_id, task.to_json_dict())
        else:
            error = to_rpc_error(TaskNotCancelable(task.id, task.status.state.value))
            body = encode_error(canceller.request_id, error)
        await bus.publish(canceller.subject, body, {h.AGENT: agent})
    except Exception as e:
        log.warning("control.answer_failed", task_id=task.id, error=str(e) or type(e).__name__)
