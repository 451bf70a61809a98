"""A runner's outgoing traffic: node requests, callee answers read back as engine events, progress events.

Functions of explicit arguments, called by :class:`~a2amesh.executor.runner.ExecutionRunner` (which owns
the inbox, the lease and the calls in flight): the dispatch of one call with its retries while JetStream
is away, the large-input spill to an artifact, the engine event a callee's final Task (live, or read back
after a takeover) stands for, the cancel of a callee, and the publication of one engine event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from a2amesh import metrics, tracing
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, StoredMsg
from a2amesh.client import Call, Client, EncodedMessage
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, RpcError, StoreUnavailable, TransportError
from a2amesh.ids import nuid
from a2amesh.jsontext import dumps_bytes
from a2amesh.protocol import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    codes,
)
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.vocabulary import (
    NODE_REQUEST,
    NODE_RESULT,
    REVIEW_FREE_ANSWER,
    REVIEW_REQUEST,
    WORKFLOW_EVENT_KEY,
)
from a2amesh.rpc import decode_stream_reply, encode_request
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore
from a2amesh.store.tasks import Subscriber, TaskStore
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher
from a2amesh.worker.results import is_file_part
from a2amesh.workflow.engine_protocol import OpenCall, RunState
from a2amesh.workflow.events import CancelCall, EmitEvent, NodeCall, NodeFailed, NodePaused, NodeSucceeded

__all__ = [
    "DISPATCH_RETRY_FOR",
    "SEQ_OFFSET",
    "CallOutcome",
    "CallRef",
    "call_error",
    "cancel_callee",
    "dispatch_call",
    "end_node_span",
    "publish_event",
    "result_event",
    "spill_input",
    "stored_event",
    "tracing_node_span",
]

CallOutcome = NodeSucceeded | NodeFailed | NodePaused
"""The event a call's answer stands for."""
CallOutcomeT = TypeVar("CallOutcomeT", bound=CallOutcome | None)

DISPATCH_RETRY_FOR = 30.0
"""Seconds a node request is re-published while JetStream is unavailable (a NATS restart) before the node fails."""
SEQ_OFFSET = 1
"""A2A-Seq of an engine event is its seq + 1: seq 1 is the ``task`` event that opens a stream."""
_LIFECYCLE_NODE_EVENTS = {"started", "completed", "failed", "skipped"}


@dataclass(frozen=True, slots=True)
class CallRef:
    """What a call's waiter needs of its dispatch (not the dispatch itself: its input may be large)."""

    path: str
    attempt: int
    agent: str
    span: Any = None
    """The node attempt's span (None when tracing is off), ended with its outcome (:func:`end_node_span`)."""
    started: float = 0.0
    """``time.monotonic()`` at its dispatch, when metrics are recorded."""


def tracing_node_span(parent: Any, command: NodeCall) -> Any:
    """The span of one node attempt under its execution's span ``parent`` (docs/observability.md)."""
    return tracing.node_span(
        parent,
        node_id=command.node_id,
        path=command.path,
        node_type=str(getattr(command, "target_type", None) or "agent"),
        agent=command.agent,
        attempt=command.attempt,
    )


_OUTCOME_STATUS: dict[type, str] = {NodeSucceeded: "completed", NodeFailed: "failed", NodePaused: "paused"}


def end_node_span(ref: CallRef, outcome: CallOutcomeT, workflow: str) -> CallOutcomeT:
    """End the node attempt's span with its outcome (None: the wait was cancelled) and count it; returns
    ``outcome``."""
    if ref.span is not None or ref.started:
        status = "canceled" if outcome is None else _OUTCOME_STATUS[type(outcome)]
        if ref.span is not None:
            error = outcome.error if isinstance(outcome, NodeFailed) else None
            tracing.end(ref.span, error=error, attributes={"a2amesh.node.status": status})
        if ref.started and metrics.enabled:
            metrics.node_finished(workflow, ref.agent, status, time.monotonic() - ref.started)
    return outcome


async def spill_input(
    message: Message,
    command: NodeCall,
    *,
    settings: Settings,
    artifacts: ArtifactStore,
    context_id: str | None,
    task_id: str,
    user: str | None,
) -> Message:
    """Send a node input above the inline threshold as an artifact URL part (SPEC §4), never inline."""
    parts = list(message.parts)
    for i, part in enumerate(parts):
        if part.data is None or (isinstance(part.data, dict) and part.data.get("type") == NODE_REQUEST):
            continue
        if len(dumps_bytes(part.data, default=str)) <= settings.inline_threshold:
            continue
        meta = await artifacts.save(
            ArtifactScope(context_id or task_id, task_id), f"input-{command.message_id}", part.data, user=user
        )
        parts[i] = Part(
            url=meta.uri,
            media_type=meta.media_type,
            filename=meta.name,
            metadata={"size": meta.size, "sha256": meta.sha256},
        )
    return message if parts == message.parts else message.model_copy(update={"parts": parts})


async def dispatch_call(
    client: Client,
    command: NodeCall,
    message: Message | EncodedMessage,
    *,
    deadline: float,
    headers: dict[str, str],
    call_id: str | None,
    lost: Callable[[], bool],
    log: Callable[[], Any],
) -> Call | NodeFailed:
    """Publish one node request; while JetStream is unavailable, again (same messageId) until ``deadline`` or
    :data:`DISPATCH_RETRY_FOR`. Returns the call to follow, or the failure to feed back to the engine.

    A callee with no live card gets one card TTL to show up (bounded by the same limit) before the node fails
    with ``AGENT_NOT_FOUND``: a card lapses while NATS is partitioned for longer than its TTL, or while the
    agent restarts, and a live agent puts it back within a third of the TTL (docs/executor.md).

    ``lost``: a callable telling whether the runner lost its lease meanwhile (then it stops retrying).
    ``log``: makes the logger a retry is logged on (only a retry needs one).
    """
    give_up = min(deadline, time.time() + DISPATCH_RETRY_FOR)
    delay = 0.2
    card_awaited = False
    while True:
        try:
            return await client.dispatch(
                command.agent,
                message,
                deadline=deadline,
                headers=headers,
                call_depth=command.call_depth,
                request_id=command.message_id,
                call_id=call_id,
                history_length=0,
                task_id=command.task_id,
            )
        except TransportError as e:
            if e.reason == codes.AGENT_NOT_FOUND and not card_awaited and not lost():
                card_awaited = True
                grace = min(client.settings.card_ttl, give_up - time.time())
                log().warning("call.awaiting_card", path=command.path, agent=command.agent, seconds=round(grace, 1))
                if await _card_back(client, command.agent, grace):
                    continue
            # NATS restarting: publish again (same messageId, so a publish that landed is a duplicate)
            if e.reason != codes.UNAVAILABLE or lost() or time.time() + delay > give_up:
                return call_error(command, e)
            log().warning("call.dispatch_retry", path=command.path, error=str(e))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        except A2AMeshError as e:
            return call_error(command, e)


async def _card_back(client: Client, agent: str, seconds: float) -> bool:
    """Whether ``agent`` has a live card again within ``seconds``."""
    if seconds <= 0:
        return False
    try:
        await client.registry.wait_for(agent, seconds)
    except TimeoutError:
        return False
    return True


def call_error(command: NodeCall | CallRef, error: A2AMeshError) -> NodeFailed:
    """The engine event of a call that failed before (or instead of) an answer."""
    if isinstance(error, TransportError):
        text = f"{error.reason}: {error}"
    elif isinstance(error, RpcError):
        text = f"{command.agent} answered JSON-RPC error {error.code}: {error}"
    else:
        text = str(error)
    return NodeFailed(path=command.path, attempt=command.attempt, error=text, error_kind="error")


async def result_event(
    path: str, attempt: int, agent: str, task: Task, *, artifacts: ArtifactStore, user: str | None
) -> CallOutcome:
    """The engine event a callee's final Task stands for."""
    result = _node_result(task)
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
    if usage is None and isinstance((task.metadata or {}).get("usage"), dict):
        usage = task.metadata["usage"] if task.metadata else None
    state = task.status.state
    text = task.status.message.text() if task.status.message else ""
    if state == TaskState.COMPLETED:
        part = task.result_part()
        output = task.output()
        if part is not None and is_file_part(part):
            # the file's JSON form (small bytes inline, else its URL), marked a file: never bytes in the state
            output = part.to_json_dict()
            return NodeSucceeded(path=path, attempt=attempt, output=output, task_id=task.id, usage=usage, file=True)
        if part is not None and part.url is not None and part.url.startswith("artifact://"):
            try:
                output = (await artifacts.load_uri(part.url, user=user)).value
            except StoreUnavailable:
                raise  # Redis away: not the callee's failure
            except A2AMeshError as e:
                return NodeFailed(path=path, attempt=attempt, error=f"cannot load the result: {e}", error_kind="error")
        elif part is None and "output" in result:
            output = result["output"]
        return NodeSucceeded(path=path, attempt=attempt, output=output, task_id=task.id, usage=usage)
    error = str(result.get("error") or text or f"{agent} ended in {state.value}")
    if state.interrupted:
        review = _review_part(task) or {
            "type": REVIEW_REQUEST,
            "path": "",
            "prompt": text or f"{agent} asks for input",
            "data": task.output(),
            "edit_schema": None,
            REVIEW_FREE_ANSWER: True,  # an agent's question: any message answers it (executor/resume.py)
        }
        return NodePaused(path=path, attempt=attempt, review=review, task_id=task.id, usage=usage)
    kind = "error" if error.split(":", 1)[0] in codes.TRANSPORT_REASONS else "failure"
    return NodeFailed(path=path, attempt=attempt, error=error, error_kind=kind, task_id=task.id, usage=usage)


async def stored_event(
    run: OpenCall, stored: StoredMsg | None, *, artifacts: ArtifactStore, user: str | None
) -> CallOutcome | None:
    """The engine event of a final answer found on a call's old reply subject after a takeover (None: none)."""
    if stored is None or stored.headers.get(h.FINAL) != "true" or run.agent is None:
        return None
    try:
        response = decode_stream_reply(stored.data)  # as the client reads a live reply
    except RpcError:
        return None
    if response.error is not None:
        return NodeFailed(
            path=run.path,
            attempt=run.attempt,
            error=f"{run.agent} answered JSON-RPC error {response.error.code}: {response.error.message}",
            error_kind="error",
        )
    if response.result is None or response.result.task is None:
        return None
    return await result_event(run.path, run.attempt, run.agent, response.result.task, artifacts=artifacts, user=user)


async def cancel_callee(bus: Bus, tasks: TaskStore, command: CancelCall) -> None:
    """Mark the callee's task canceled and send it a CancelTask."""
    await tasks.mark_canceled(command.task_id)
    body = encode_request(codes.CANCEL_TASK, CancelTaskRequest(id=command.task_id), nuid())
    await bus.publish(bus.subjects.control(command.agent), body, {h.VERSION: codes.A2A_VERSION})


async def publish_event(
    bus: Bus,
    publisher: ReplyPublisher,
    event: EmitEvent,
    *,
    state: RunState,
    task_id: str,
    reply: ReplyInfo,
    targets: list[Subscriber],
) -> None:
    """Publish one engine event: to the mesh's event subjects, and as progress to the streaming caller and
    every subscriber. Raises what publishing raised (progress is best effort: the caller logs it)."""
    execution_id = state.execution_id
    payload = {
        "execution_id": execution_id,
        "workflow": state.workflow,
        "event": event.event,
        "node_id": event.node_id,
        "path": event.path,
        "status": event.status,
        "timestamp": utc_timestamp(event.at),
        "seq": event.seq,
        **event.data,
    }
    group, _, name = event.event.partition(".")
    subject = None
    if group == "execution":
        subject = bus.subjects.workflow_event(state.workflow, name)
    elif group == "node" and name in _LIFECYCLE_NODE_EVENTS:
        subject = bus.subjects.node_event(state.workflow, name)
    if subject is not None:
        msg_id = {h.MSG_ID: f"{execution_id}:{event.seq}"}  # a step sent again is one event
        await bus.publish(subject, dumps_bytes(payload, default=str), msg_id)
    to = [*([Subscriber(reply.reply_to, reply.request_id)] if reply.streaming and reply.reply_to else []), *targets]
    if to and (not event.event.startswith("execution.") or event.event == "execution.started"):
        status = TaskStatusUpdateEvent(
            task_id=task_id,
            context_id=state.context_id,
            status=TaskStatus(
                state=TaskState.WORKING,
                timestamp=utc_timestamp(event.at),
                message=Message(
                    message_id=nuid(),
                    role=Role.AGENT,
                    parts=[Part.of_text(_describe(event))],
                    task_id=task_id,
                    context_id=state.context_id,
                ),
            ),
            metadata={WORKFLOW_EVENT_KEY: payload},
        )
        for subscriber in to:
            await publisher.progress(subscriber.subject, subscriber.answer_id(task_id), status, event.seq + SEQ_OFFSET)


def _review_part(task: Task) -> dict[str, Any] | None:
    message = task.status.message
    for part in message.parts if message else []:
        if isinstance(part.data, dict) and part.data.get("type") == REVIEW_REQUEST:
            return dict(part.data)
    return None


def _node_result(task: Task) -> dict[str, Any]:
    message = task.status.message
    for part in message.parts if message else []:
        if isinstance(part.data, dict) and part.data.get("type") == NODE_RESULT:
            return part.data
    return {}


_ICONS = {
    "node.started": "▶",
    "node.completed": "✓",
    "node.failed": "✗",
    "node.skipped": "↷",
    "node.canceled": "■",
    "node.retrying": "↻",
    "map.progress": "…",
    "execution.started": "▶",
}


def _describe(event: EmitEvent) -> str:
    """One line for the caller's progress view."""
    icon = _ICONS.get(event.event, "·")
    what = event.path or "workflow"
    data = event.data
    if event.event == "map.progress":
        return f"{icon} {what}: {data.get('completed', 0)}/{data.get('total', 0)} done"
    detail = data.get("error") or data.get("reason") or ""
    suffix = f" ({detail})" if detail else ""
    return f"{icon} {what} {event.event.split('.', 1)[1]}{suffix}"
