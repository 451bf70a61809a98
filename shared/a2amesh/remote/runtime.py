"""The proxy's runtime: each task of the mesh forwarded to the remote agent with the a2a-sdk client.

The agent host runs it like any runtime (claims, replies, control, retries of delivery), so what differs is
only here: the message goes out over HTTP (JSON-RPC or HTTP+JSON, 1.0 or 0.3, as the card offers), the remote's
stream comes back as our progress (status messages) and token deltas (text artifact chunks), and its final
state, artifacts and status message become the task's outcome. The remote's task and context ids are kept in the
task's checkpoint (Redis), so a continuation after ``INPUT_REQUIRED`` goes to the same remote task, and a
replica that takes over a task whose proxy died follows the remote task instead of sending it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError, TaskNotFoundError
from google.protobuf.json_format import ParseError
from pydantic import ValidationError

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.definition import AgentDefinition
from a2amesh.errors import RemoteError
from a2amesh.lifecycle import Background, wait_set_or_done
from a2amesh.logs import get_logger
from a2amesh.protocol import AgentCard, Artifact, Part, TaskState, TaskStatus
from a2amesh.protocol.vocabulary import CONTROL_PART_TYPES, NODE_REQUEST
from a2amesh.remote.cards import RemoteCard
from a2amesh.remote.convert import message_to_proto, parts_from_proto, task_from_proto, to_json
from a2amesh.remote.limit import MeshSemaphore
from a2amesh.remote.spec import RemoteSpec
from a2amesh.worker.decode import control_part

__all__ = ["RemoteRuntime", "outcome_of"]

log = get_logger("remote")

CANCEL_LIMIT = 10.0
"""Seconds a CancelTask forwarded to the remote may take."""
POLL_EVERY = 1.0
"""Seconds between GetTask polls of a remote task followed without a stream."""


class RemoteRuntime:
    """Forwards tasks to one remote agent (one SDK client over the remote's HTTP client, shared by its tasks)."""

    def __init__(
        self,
        definition: AgentDefinition,
        spec: RemoteSpec,
        remote: RemoteCard,
        card: AgentCard,
        http: httpx.AsyncClient,
        *,
        on_failure: Callable[[], None] = lambda: None,
        gate: MeshSemaphore | None = None,
    ) -> None:
        self.definition = definition
        self.spec = spec
        self.remote = remote
        self._card = card
        self._on_failure = on_failure
        self._gate = gate
        self.streaming = bool(remote.card.capabilities.streaming)
        config = ClientConfig(streaming=self.streaming, httpx_client=http, supported_protocol_bindings=[remote.binding])
        self.client = ClientFactory(config).create(remote.card)
        self._forwards = Background()
        """The forwards running (each awaited by its task's :meth:`run`, or left to a cancel when it is stopped)."""
        self._cancels = Background()

    def card(self, namespace: str) -> AgentCard:
        """The card published for the remote."""
        return self._card

    async def aclose(self) -> None:
        """Let forwarded cancels finish (bounded), then close the SDK client (the HTTP client is the service's)."""
        await self._cancels.wait(CANCEL_LIMIT)
        await self.client.close()

    # one task
    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Forward one task (or its continuation, or follow it after a takeover) and map the remote's answer.

        The forward runs in a task of its own: stopped by a CancelTask or the deadline before the remote has
        said which task it made, it goes on reading until it does (bounded), so the remote's task is canceled
        too; stopped by a shutdown, it ends at once and the remote task goes on for the replica that takes over.
        """
        saved = await ctx.load_checkpoint() or {}
        follow = _Follow(ctx, saved)
        forwarding = self._forwards.spawn(self._forward(ctx, follow, saved), name=f"forward-{ctx.task_id}")
        try:
            return await asyncio.shield(forwarding)
        except asyncio.CancelledError:
            if _stopped_by_caller(ctx):
                self._cancels.spawn(self._cancel_when_known(forwarding, follow), name=f"cancel-{ctx.task_id}")
            else:
                forwarding.cancel()
            raise

    async def _forward(self, ctx: TaskContext, follow: _Follow, saved: dict[str, Any]) -> TaskOutcome:
        if self._gate is None:
            return await self._forward_now(ctx, follow, saved)
        async with self._gate.held(ctx.task_id):  # mesh_concurrency: a slot shared by every replica
            return await self._forward_now(ctx, follow, saved)

    async def _forward_now(self, ctx: TaskContext, follow: _Follow, saved: dict[str, Any]) -> TaskOutcome:
        try:
            async with asyncio.timeout(self.spec.task_timeout):
                if follow.task_id and saved.get("message_id") == ctx.message.message_id:
                    await self._resume(follow)  # sent before a takeover: follow it, never send it twice
                else:
                    await self._send(ctx, follow)
                if not follow.final:
                    await self._poll(follow)
                elif follow.missing_result and follow.task_id is not None:
                    # a stream that ended COMPLETED without its artifacts (sent only to GetTask by some servers)
                    task = await self.client.get_task(pb.GetTaskRequest(id=follow.task_id))
                    await follow.take(pb.StreamResponse(task=task))
        except TimeoutError:
            if follow.task_id:
                self._cancels.spawn(self._cancel(follow.task_id), name=f"cancel-{follow.task_id}")
            return TaskOutcome(TaskState.FAILED, message=str(RemoteError(self.spec.url, self._past_timeout())))
        except TaskNotFoundError as e:
            problem = f"the remote no longer knows task {follow.task_id} (lost): {e}"
            return TaskOutcome(TaskState.FAILED, message=str(RemoteError(self.spec.url, problem)))
        except (A2AError, RemoteError, httpx.HTTPError, ParseError, ValidationError, ValueError) as e:
            problem = _problem(e)
            if _connection_trouble(e):
                self._on_failure()
            log.warning("remote.task_failed", url=self.spec.url, task_id=ctx.task_id, problem=problem)
            return TaskOutcome(TaskState.FAILED, message=str(RemoteError(self.spec.url, problem)))
        return follow.outcome()

    def _past_timeout(self) -> str:
        return f"the task ran past task_timeout ({self.spec.task_timeout:g} s); CancelTask was sent to the remote"

    async def _send(self, ctx: TaskContext, follow: _Follow) -> None:
        message = message_to_proto(ctx.message, _outgoing_parts(ctx))
        message.message_id = ctx.message.message_id
        message.role = pb.Role.ROLE_USER
        if follow.task_id:
            message.task_id = follow.task_id
        if follow.context_id:
            message.context_id = follow.context_id
        follow.message_id = ctx.message.message_id
        follow.sent = True
        await follow.take_all(self.client.send_message(pb.SendMessageRequest(message=message)))

    async def _resume(self, follow: _Follow) -> None:
        assert follow.task_id is not None
        await follow.take(pb.StreamResponse(task=await self.client.get_task(pb.GetTaskRequest(id=follow.task_id))))
        if follow.final or not self.streaming:
            return
        with contextlib.suppress(A2AError):  # a remote that cannot resubscribe is polled instead
            await follow.take_all(self.client.subscribe(pb.SubscribeToTaskRequest(id=follow.task_id)))

    async def _poll(self, follow: _Follow) -> None:
        """Poll a remote task that is not final yet (a stream that ended early, a remote without streaming)."""
        if follow.task_id is None:
            raise RemoteError(self.spec.url, "the remote answered neither a task nor a message")
        while not follow.final:
            await asyncio.sleep(POLL_EVERY)
            await follow.take(pb.StreamResponse(task=await self.client.get_task(pb.GetTaskRequest(id=follow.task_id))))

    async def _cancel_when_known(self, forwarding: asyncio.Task[TaskOutcome], follow: _Follow) -> None:
        if follow.task_id is None and not forwarding.done():
            await wait_set_or_done(follow.known, forwarding, timeout=CANCEL_LIMIT)
        forwarding.cancel()
        if follow.task_id is not None:
            await self._cancel(follow.task_id)
        else:
            log.warning("remote.cancel_unsent", url=self.spec.url, reason="the remote never said which task it made")

    async def _cancel(self, task_id: str) -> None:
        try:
            async with asyncio.timeout(CANCEL_LIMIT):
                await self.client.cancel_task(pb.CancelTaskRequest(id=task_id))
            log.info("remote.cancel_forwarded", url=self.spec.url, remote_task_id=task_id)
        except Exception as e:
            log.warning("remote.cancel_failed", url=self.spec.url, remote_task_id=task_id, problem=_problem(e))


def _stopped_by_caller(ctx: TaskContext) -> bool:
    """A CancelTask or the deadline stopped the task (a shutdown hands it back: the remote task goes on)."""
    return ctx.cancelled.is_set() or (ctx.deadline is not None and time.time() >= ctx.deadline - 0.05)


def _outgoing_parts(ctx: TaskContext) -> list[Part]:
    """What the remote gets: the message's own parts (a workflow's control part left out, a string data part as
    text, an ``artifact://`` input sent as its value), after the node's instruction when there is one."""
    parts: list[Part] = []
    node = control_part(ctx.message, NODE_REQUEST) or {}
    instruction = node.get("instruction")
    if isinstance(instruction, str) and instruction:
        parts.append(Part.of_text(instruction))
    for p in ctx.message.parts:
        if isinstance(p.data, dict) and p.data.get("type") in CONTROL_PART_TYPES:
            continue
        if isinstance(p.data, str):
            parts.append(Part.of_text(p.data))  # a text input (a template that rendered a string) goes as text
            continue
        if p.url is not None and p.url.startswith("artifact://"):
            value = ctx.input
            parts.append(Part.of_text(value) if isinstance(value, str) else Part.of_data(value))
            continue
        parts.append(p)
    return parts or [Part.of_data(ctx.input)]


class _Follow:
    """What is known of one remote task while its events arrive."""

    def __init__(self, ctx: TaskContext, saved: dict[str, Any]) -> None:
        self.ctx = ctx
        self.task_id: str | None = saved.get("task_id")
        self.context_id: str | None = saved.get("context_id")
        self.message_id: str | None = saved.get("message_id")
        self.saved = dict(saved)
        self.sent = False
        self.status: TaskStatus | None = None
        self.artifacts: dict[str, Artifact] = {}
        self.answer: list[Part] | None = None  # a message answer (no task)
        self.known = asyncio.Event()  # the remote task's id is known
        if self.task_id:
            self.known.set()

    @property
    def final(self) -> bool:
        return self.answer is not None or (self.status is not None and self.status.state.final)

    @property
    def missing_result(self) -> bool:
        """Completed with neither an artifact nor a status message: the result is to be read with GetTask."""
        return (
            self.answer is None
            and self.status is not None
            and self.status.state is TaskState.COMPLETED
            and not self.artifacts
            and self.status.message is None
        )

    async def take_all(self, events: AsyncIterator[pb.StreamResponse]) -> None:
        async for event in events:
            await self.take(event)
            if self.final:
                return

    async def take(self, event: pb.StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "task":
            task = task_from_proto(event.task)
            await self._ids(task.id, task.context_id)
            self.status = task.status
            self.artifacts = {a.artifact_id: a for a in task.artifacts or []}
        elif kind == "message":
            self.answer = parts_from_proto(event.message.parts)
            await self._ids(event.message.task_id or None, event.message.context_id or None)
        elif kind == "status_update":
            status = event.status_update
            await self._ids(status.task_id, status.context_id)
            self.status = TaskStatus.model_validate(to_json(status.status))
            message = self.status.message
            if not self.status.state.final and message is not None and message.parts:
                await self.ctx.emitter(list(message.parts), None)
        elif kind == "artifact_update":
            chunk = event.artifact_update
            await self._ids(chunk.task_id, chunk.context_id)
            artifact = Artifact.model_validate(to_json(chunk.artifact))
            new_parts = list(artifact.parts)
            held = self.artifacts.get(artifact.artifact_id)
            if chunk.append and held is not None:
                artifact = held.model_copy(update={"parts": [*held.parts, *new_parts]})
            self.artifacts[artifact.artifact_id] = artifact
            for p in new_parts:
                if p.text:
                    await self.ctx.emit_delta(p.text)

    async def _ids(self, task_id: str | None, context_id: str | None) -> None:
        self.task_id = task_id or self.task_id
        self.context_id = context_id or self.context_id
        if self.task_id:
            self.known.set()
        state = {"task_id": self.task_id, "context_id": self.context_id, "message_id": self.message_id}
        if state != self.saved and self.task_id:
            self.saved = state
            await self.ctx.save_checkpoint(state)

    def outcome(self) -> TaskOutcome:
        if self.answer is not None:
            return outcome_of(TaskState.COMPLETED, self.answer, None)
        assert self.status is not None
        parts = [p for a in self.artifacts.values() for p in a.parts]
        return outcome_of(self.status.state, parts, self.status)


def outcome_of(state: TaskState, parts: list[Part], status: TaskStatus | None) -> TaskOutcome:
    """Our outcome for a remote's final: the output from its artifacts' parts (one part: its value, a file as the
    part itself; text parts: their text joined; anything else: the list of values), the status message's text as
    the outcome's message and its other parts beside it."""
    said = status.message.parts if status is not None and status.message is not None else []
    text = "\n".join(p.text for p in said if p.text) or None
    others = [p for p in said if p.text is None]
    if state is not TaskState.COMPLETED:
        data = next((p.data for p in others if p.data is not None), None)
        output = _value(parts) if data is None and parts else data
        if isinstance(output, Part):
            output = output.to_json_dict()
        return TaskOutcome(state, output=output, message=text, status_parts=others)
    if not parts:
        parts = list(said)  # an answer given only in the final status message
        text, others = None, []
    return TaskOutcome(state, output=_value(parts), message=text, status_parts=others)


def _value(parts: list[Part]) -> Any:
    if not parts:
        return None
    if len(parts) == 1:
        p = parts[0]
        if p.raw is not None or p.url is not None:
            return p
        return p.text if p.text is not None else p.data
    if all(p.text is not None for p in parts):
        return "".join(p.text or "" for p in parts)
    return [p.text if p.text is not None else p.data if p.data is not None else p.to_json_dict() for p in parts]


def _connection_trouble(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, (httpx.TransportError, A2AClientTimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _problem(e: BaseException) -> str:
    """One line saying what went wrong with the remote."""
    if isinstance(e, A2AClientTimeoutError):
        return f"no answer in time ({e})"
    if isinstance(e, RemoteError):
        return e.problem
    cause = e.__cause__ or e.__context__
    if isinstance(e, A2AClientError) and isinstance(cause, httpx.ConnectError):
        return f"unreachable: {cause}"
    if isinstance(e, (ParseError, ValidationError)):
        return f"answered what is not A2A: {str(e).splitlines()[0]}"
    if isinstance(e, A2AError) and not isinstance(e, A2AClientError):
        return f"answered {type(e).__name__}: {e}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
