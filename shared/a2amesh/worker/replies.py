"""The one reply sender: reply subjects, headers, message ids, durable publishing, error replies, the fan-out.

Agents (``agent/host.py``), workflows (``executor/``) and the control plane answer through
:class:`ReplyPublisher` (SPEC §3.4, §3.5): replies on the caller's ``A2A-Reply-To`` subject (and each
subscriber's) with ``A2A-Agent`` (the agent's or workflow's name), ``A2A-Attempt`` (the delivery attempt of an
agent's task, the lease epoch of a workflow's, so replies of a replica that lost the task lose to those of the
one that took it over), ``A2A-Seq``, ``A2A-Final`` on the last one, ``Nats-TTL`` and a ``Nats-Msg-Id`` of the
one pattern of :func:`reply_msg_id`, which makes a re-published final a JetStream duplicate.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.errors import RpcError, TransportError
from a2amesh.logs import get_logger
from a2amesh.protocol import StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.rpc import encode_error, encode_result, encode_task_result

__all__ = [
    "FINAL",
    "SNAPSHOT",
    "ReplyInfo",
    "ReplyPublisher",
    "Target",
    "publish_durable",
    "reply_headers",
    "reply_msg_id",
    "send_error",
    "valid_reply_subject",
]

FINAL_PUBLISH_TRIES = 3
"""Tries of a durable reply publish (backoff 0.2 s, 0.4 s) before it is given up as undeliverable."""

REPLY_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The grammar of the two last tokens of a reply subject, ``{instance}`` and ``{call_id}`` (docs/protocol.md §3)."""

_REPLY_TAIL = re.compile(rf"{REPLY_TOKEN.pattern}(?:\.{REPLY_TOKEN.pattern}){{2,3}}")
"""What follows the prefix of a reply subject: three or four tokens of :data:`REPLY_TOKEN`."""

log = get_logger("replies")


class ReplyInfo(BaseModel):
    """How the caller of a workflow task wants its answer (kept in the execution record)."""

    model_config = ConfigDict(extra="ignore")

    reply_to: str | None = Field(None, description="The caller's reply subject.")
    request_id: JsonRpcId = None
    streaming: bool = False
    node_request: dict[str, Any] | None = Field(
        None, description="The workflow_node_request part, when a workflow calls this one as a node."
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Headers propagated to every callee.")

    @property
    def parent_execution(self) -> str:
        """The execution whose workflow node made the request (``""`` for a call from outside a workflow)."""
        return str((self.node_request or {}).get("execution_id") or "")


def valid_reply_subject(bus: Bus, subject: str | None) -> bool:
    """Whether ``subject`` is exactly ``{ns}.a2a.v1.reply.{instance}.{callee}.{call_id}`` of this namespace.

    An instance is one token, or two (``{scope}.{nuid}``) for a process with a reply scope. Every token
    matches :data:`REPLY_TOKEN`: no empty token, no wildcard, no space or other character a publish could
    fail on, so a reply subject accepted here can always be published to.
    """
    if not subject:
        return False
    prefix = bus.subjects.reply_prefix()
    return subject.startswith(prefix) and _REPLY_TAIL.fullmatch(subject, len(prefix)) is not None


@dataclass
class Target:
    """One subject a task's replies go to: its caller's (``primary``) or a subscriber's."""

    subject: str
    primary: bool
    answer_id: JsonRpcId = None  # the JSON-RPC id its answers carry: its own request's


FINAL = "final"
"""``what`` of a final answer: one per task and call, whatever the attempt or epoch that sends it."""

SNAPSHOT = "task"
"""``what`` of the ``task`` event that opens a stream (one per task and call, whoever sends it)."""


def reply_msg_id(task_id: str, what: str, subject: str) -> str:
    """The ``Nats-Msg-Id`` of a reply: ``{task_id}:{what}:{call_id}`` (the one pattern, agents and workflows alike).

    ``call_id`` is the last token of the reply subject, so every call (a caller, a subscriber, a resend with
    its own reply subject) has ids of its own: a final re-sent to a late subscriber is never a duplicate of
    another call's. ``what`` is :data:`FINAL`, :data:`SNAPSHOT`, ``art-{i}`` (the i-th artifact event of a
    streamed final) or ``{attempt}-{seq}`` (a progress event). A final's id names neither the delivery attempt
    nor the lease epoch: the final a redelivery or a takeover publishes again is a JetStream duplicate of the
    first copy on the replies stream (within its duplicate window), so the stream keeps one final per call.
    """
    return f"{task_id}:{what}:{subject.rsplit('.', 1)[-1]}"


class ReplyPublisher:
    """Publishes one task's replies: the one reply sender of agents (``agent/host.py``) and workflows.

    Args:
        bus: the worker's bus.
        settings: reply TTLs.
        agent: the agent's or workflow's name (``A2A-Agent``).
        task_id: the task.
        attempt: ``A2A-Attempt``: the delivery attempt of an agent's task, the lease epoch of a workflow's.
    """

    __slots__ = ("agent", "attempt", "bus", "settings", "task_id")

    def __init__(self, bus: Bus, settings: Settings, *, agent: str, task_id: str, attempt: int) -> None:
        self.bus = bus
        self.settings = settings
        self.agent = agent
        self.task_id = task_id
        self.attempt = attempt

    async def send(self, subject: str, body: bytes, seq: int, what: str, *, final: bool, durable: bool) -> None:
        """Publish one reply: a final (always acked) or an event (``durable``: kept as long as a final).

        A subject that is not a reply subject (a record written before subjects were checked) is answered
        nowhere: no publish to it could succeed.

        Raises:
            TransportError: NATS away, or the stream did not acknowledge an acked reply.
        """
        if not valid_reply_subject(self.bus, subject):
            if final or durable:
                log.warning("reply.invalid_subject", agent=self.agent, task_id=self.task_id, subject=subject)
            return
        hdrs = reply_headers(
            self.settings,
            agent=self.agent,
            attempt=self.attempt,
            seq=seq,
            final=final,
            durable=durable,
            msg_id=reply_msg_id(self.task_id, FINAL if final else what, subject),
        )
        if final or durable:
            # acked, each before the next: a plain publish is not ordered with a later acked one across a change
            # of the stream's leader (it may go to the old one and be lost while the final is stored)
            await publish_durable(self.bus, subject, body, hdrs)
        else:
            await self.bus.publish(subject, body, hdrs)

    async def progress(self, subject: str, request_id: JsonRpcId, event: TaskStatusUpdateEvent, seq: int) -> None:
        """A non-final status update (core NATS: progress is best effort)."""
        body = encode_result(request_id, StreamResponse(status_update=event))
        await self.send(subject, body, seq, f"{self.attempt}-{seq}", final=False, durable=False)

    async def snapshot(self, subject: str, request_id: JsonRpcId, task: Task, seq: int) -> None:
        """The ``task`` event that opens a stream (persisted)."""
        body = encode_result(request_id, StreamResponse(task=task))
        await self.send(subject, body, seq, SNAPSHOT, final=False, durable=True)

    async def events(
        self, targets: Sequence[Target], response: StreamResponse, seq: int, *, streaming: bool, what: str = ""
    ) -> None:
        """A non-final event to every target that reads events: a streaming caller and every subscriber (a
        plain caller gets only its final), each with its own request id. ``what``: :data:`SNAPSHOT` or an
        artifact event's (durable); by default a progress event's. A caller's failure is raised, a subscriber's
        logged."""
        durable = bool(what)
        what = what or f"{self.attempt}-{seq}"
        for target in list(targets):
            if target.primary and not streaming:
                continue
            body = encode_result(target.answer_id, response)
            try:
                await self.send(target.subject, body, seq, what, final=False, durable=durable)
            except TransportError:
                if target.primary:
                    raise
                log.warning("reply.subscriber_failed", subject=target.subject)

    async def final(
        self, subject: str, request_id: JsonRpcId, task: Task, seq: int, *, streaming: bool, body: bytes | None = None
    ) -> None:
        """The last message of one call: the final status (after its artifacts) on a stream, else the Task
        (``body``: that answer encoded already); :meth:`answer` to that one caller."""
        await self.answer(
            [Target(subject, primary=True, answer_id=request_id)],
            task,
            seq,
            streaming=streaming,
            task_body=None if body is None else lambda _: body,
        )

    async def answer(
        self,
        targets: Sequence[Target],
        task: Task,
        seq: int,
        *,
        streaming: bool,
        task_body: Callable[[Target], bytes] | None = None,
        primary_errors: bool = True,
    ) -> int:
        """Send ``task`` as the final answer to every target, once per subject: a streaming caller its artifact
        events (which every subscriber gets too) and the final status, the others the Task with their own
        request id (``task_body``: that answer encoded already). A caller's failure is raised when
        ``primary_errors`` (else dropped), a subscriber's logged.

        Returns:
            The final's ``A2A-Seq`` (the same for every target).
        """
        if streaming:
            for i, art in enumerate(task.artifacts or []):
                seq += 1
                event = TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=art, last_chunk=True
                )
                response = StreamResponse(artifact_update=event)
                try:
                    await self.events(targets, response, seq, streaming=True, what=f"art-{i}")
                except TransportError:
                    if primary_errors:
                        raise
        status: StreamResponse | None = None
        if streaming:
            status = StreamResponse(
                status_update=TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
            )
        seq += 1
        answered: set[str] = set()
        for target in list(targets):
            if target.subject in answered:
                continue
            answered.add(target.subject)
            if target.primary and status is not None:
                body = encode_result(target.answer_id, status)
            elif task_body is not None:
                body = task_body(target)
            else:
                body = encode_task_result(target.answer_id, task)
            try:
                await self.send(target.subject, body, seq, FINAL, final=True, durable=True)
            except TransportError as e:
                if target.primary:
                    if primary_errors:
                        raise
                    continue
                log.warning("reply.subscriber_failed", subject=target.subject, error=str(e))
        return seq


def reply_headers(
    settings: Settings, *, agent: str, attempt: int, seq: int, final: bool, durable: bool, msg_id: str
) -> dict[str, str]:
    """The headers of one reply message (docs/protocol.md §3)."""
    ttl = settings.reply_final_ttl if (final or durable) else settings.reply_progress_ttl
    hdrs = {
        h.AGENT: agent,
        h.ATTEMPT: str(attempt),
        h.SEQ: str(seq),
        h.TTL: f"{int(ttl)}s",
        h.MSG_ID: msg_id,
    }
    if final:
        hdrs[h.FINAL] = "true"
    return hdrs


async def publish_durable(bus: Bus, subject: str, body: bytes, hdrs: dict[str, str]) -> None:
    """Publish to the replies stream and wait for its ack, trying a few times.

    Raises:
        TransportError: the stream did not acknowledge it after the last try.
    """
    for i in range(FINAL_PUBLISH_TRIES):
        try:
            await bus.js_publish(subject, body, hdrs)
            return
        except TransportError:
            if i == FINAL_PUBLISH_TRIES - 1:
                raise
            await asyncio.sleep(0.2 * (i + 1))


async def send_error(
    bus: Bus,
    settings: Settings,
    *,
    agent: str,
    reply_to: str | None,
    request_id: JsonRpcId,
    error: RpcError,
    attempt: int,
    seq: int = 1,
) -> bool:
    """Answer a call with a JSON-RPC error (final, durable) on its reply subject.

    Never raises: a ``reply_to`` that is not a valid reply subject is answered nowhere, and a reply the
    replies stream does not take after :data:`FINAL_PUBLISH_TRIES` is logged once and given up.

    Returns:
        Whether the error was published.
    """
    if not valid_reply_subject(bus, reply_to):
        return False
    assert reply_to is not None
    # the error of a request (it may have no task yet): one per call and delivery attempt
    hdrs = reply_headers(
        settings,
        agent=agent,
        attempt=attempt,
        seq=seq,
        final=True,
        durable=True,
        msg_id=reply_msg_id("error", str(attempt), reply_to),
    )
    try:
        await publish_durable(bus, reply_to, encode_error(request_id, error), hdrs)
    except TransportError as e:
        log.warning("reply.undeliverable", agent=agent, subject=reply_to, code=error.code, error=str(e))
        return False
    return True
