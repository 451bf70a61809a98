"""The one reply sender: reply subjects, headers, durable publishing, error replies, a workflow task's answers.

Agents (``agent/host.py``) and workflows (``executor/``) answer the same way (SPEC §3.4, §3.5). A workflow
answers exactly as an agent does: replies on the caller's ``A2A-Reply-To`` subject with
``A2A-Agent`` (the workflow's name), ``A2A-Attempt`` (here the execution's lease epoch, so replies of a
replica that lost the execution lose to those of the one that took it over), ``A2A-Seq``,
``A2A-Final`` on the last one, ``Nats-TTL`` and a ``Nats-Msg-Id`` that makes a re-published final a
JetStream duplicate.
"""

from __future__ import annotations

import asyncio
import re
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
    "ReplyInfo",
    "ReplyPublisher",
    "publish_durable",
    "reply_headers",
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


class ReplyPublisher:
    """Publishes one workflow task's replies.

    Args:
        bus: the executor's bus.
        settings: reply TTLs.
        agent: the workflow's name (``A2A-Agent``).
        task_id: the workflow task.
        attempt: the lease epoch (``A2A-Attempt``).
    """

    def __init__(self, bus: Bus, settings: Settings, *, agent: str, task_id: str, attempt: int) -> None:
        self.bus = bus
        self.settings = settings
        self.agent = agent
        self.task_id = task_id
        self.attempt = attempt

    def _headers(self, seq: int, *, final: bool, durable: bool, msg_id: str) -> dict[str, str]:
        return reply_headers(
            self.settings, agent=self.agent, attempt=self.attempt, seq=seq, final=final, durable=durable, msg_id=msg_id
        )

    async def progress(self, subject: str, request_id: JsonRpcId, event: TaskStatusUpdateEvent, seq: int) -> None:
        """A non-final status update (core NATS: progress is best effort)."""
        body = encode_result(request_id, StreamResponse(status_update=event))
        token = subject.rsplit(".", 1)[-1]
        msg_id = f"{self.task_id}:{self.attempt}:{seq}:{token}"
        if not valid_reply_subject(self.bus, subject):
            return
        await self.bus.publish(subject, body, self._headers(seq, final=False, durable=False, msg_id=msg_id))

    async def snapshot(self, subject: str, request_id: JsonRpcId, task: Task, seq: int) -> None:
        """The ``task`` event that opens a stream (persisted)."""
        body = encode_result(request_id, StreamResponse(task=task))
        token = subject.rsplit(".", 1)[-1]
        await self._durable(
            subject, body, self._headers(seq, final=False, durable=True, msg_id=f"{self.task_id}:task:{token}")
        )

    async def final(self, subject: str, request_id: JsonRpcId, task: Task, seq: int, *, streaming: bool) -> None:
        """The last message of a call: the final status (and artifacts) on a stream, else the Task."""
        token = subject.rsplit(".", 1)[-1]
        if streaming:
            for art in task.artifacts or []:
                seq += 1
                event = TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=art, last_chunk=True
                )
                body = encode_result(request_id, StreamResponse(artifact_update=event))
                hdrs = self._headers(seq, final=False, durable=True, msg_id=f"{self.task_id}:art:{seq}:{token}")
                await self._durable(subject, body, hdrs)
            status = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
            body = encode_result(request_id, StreamResponse(status_update=status))
        else:
            body = encode_task_result(request_id, task)
        hdrs = self._headers(seq + 1, final=True, durable=True, msg_id=f"{self.task_id}:final:{token}")
        await self._durable(subject, body, hdrs)

    async def _durable(self, subject: str, body: bytes, hdrs: dict[str, str]) -> None:
        if not valid_reply_subject(self.bus, subject):
            # recorded before subjects were checked to the grammar: no publish to it can ever succeed
            log.warning("reply.invalid_subject", agent=self.agent, task_id=self.task_id, subject=subject)
            return
        await publish_durable(self.bus, subject, body, hdrs)


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
    token = reply_to.rsplit(".", 1)[-1]
    hdrs = reply_headers(
        settings, agent=agent, attempt=attempt, seq=seq, final=True, durable=True, msg_id=f"error:{token}:{attempt}"
    )
    try:
        await publish_durable(bus, reply_to, encode_error(request_id, error), hdrs)
    except TransportError as e:
        log.warning("reply.undeliverable", agent=agent, subject=reply_to, code=error.code, error=str(e))
        return False
    return True
