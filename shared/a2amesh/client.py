"""The one way to call an agent or workflow over the mesh (CLI, tests, LLM tools and the executor use it)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from a2amesh import tracing
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.errors import RpcError, TransportError, from_rpc_error
from a2amesh.ids import instance_id, nuid, task_id_for
from a2amesh.inbox import REREAD_TIMEOUT, CallEvent, PendingCall, ReplyInbox, TokenDelta
from a2amesh.jsontext import content_digest
from a2amesh.logs import get_logger
from a2amesh.protocol import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
    codes,
)
from a2amesh.registry import Registry
from a2amesh.rpc import decode_response, encode_request, encode_send_request

__all__ = [
    "CONTROL_TIMEOUT",
    "Call",
    "CallEvent",
    "Client",
    "EncodedMessage",
    "TaskAssembler",
    "TokenDelta",
    "already_taken",
    "connect",
    "continuation_refusal",
    "make_message",
    "parse_json_arg",
    "request_msg_id",
    "reused_message_id",
]

log = get_logger("client")

CONTROL_TIMEOUT = 5.0


def make_message(
    text: str | None = None,
    *,
    data: Any = None,
    parts: list[Part] | None = None,
    context_id: str | None = None,
    task_id: str | None = None,
    message_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Message:
    """A user message from text, a JSON value, or explicit parts."""
    all_parts = list(parts or [])
    if data is not None:
        all_parts.append(Part.of_data(data))
    if text is not None:
        all_parts.append(Part.of_text(text))
    return Message(
        message_id=message_id or nuid(),
        role=Role.USER,
        parts=all_parts,
        context_id=context_id,
        task_id=task_id,
        metadata=metadata,
    )


@dataclass(frozen=True, slots=True)
class EncodedMessage:
    """A new task's message (no ``taskId``) already written as its ProtoJSON bytes by the caller (the workflow
    executor's node request, built from its command without a :class:`Message` model).

    Attributes:
        message_id: its ``messageId``.
        json: ``message.to_json_bytes()`` of the message ``build`` makes, byte for byte.
        build: makes the message as a model (only a request JetStream reports as a duplicate needs it).
    """

    message_id: str
    json: bytes
    build: Callable[[], Message]


class TaskAssembler:
    """Builds the current Task of a call from its stream events."""

    def __init__(self) -> None:
        self.task: Task | None = None

    def apply(self, r: StreamResponse) -> Task | None:
        """Fold one event into the task; returns the task so far."""
        if r.task is not None:
            self.task = r.task
        elif r.status_update is not None:
            ev = r.status_update
            base = self.task or Task(id=ev.task_id, context_id=ev.context_id, status=ev.status)
            self.task = base.model_copy(update={"status": ev.status})
        elif r.artifact_update is not None:
            ev2 = r.artifact_update
            base = self.task or Task(
                id=ev2.task_id, context_id=ev2.context_id, status=TaskStatus(state=TaskState.WORKING)
            )
            arts: list[Artifact] = list(base.artifacts or [])
            for i, a in enumerate(arts):
                if a.artifact_id == ev2.artifact.artifact_id:
                    if ev2.append:
                        arts[i] = a.model_copy(update={"parts": [*a.parts, *ev2.artifact.parts]})
                    else:
                        arts[i] = ev2.artifact
                    break
            else:
                arts.append(ev2.artifact)
            self.task = base.model_copy(update={"artifacts": arts})
        return self.task


class Call:
    """One call in flight: iterate its events, or await its final Task."""

    def __init__(self, client: Client, call_id: str, agent: str, task_id: str, pending: PendingCall, deadline: float):
        self._client = client
        self.call_id = call_id
        self.agent = agent
        self.task_id = task_id
        self._pending = pending
        self.deadline = deadline
        self._assembler = TaskAssembler()

    @property
    def reply_subject(self) -> str:
        """Where this call's replies arrive."""
        return self._pending.subject

    async def events(self) -> AsyncGenerator[StreamResponse]:
        """Every accepted event until the final one.

        Raises:
            TransportError: ``DEADLINE_EXCEEDED`` when the deadline passes first.
            RpcError: the callee answered with a JSON-RPC error.
        """
        async with contextlib.aclosing(self.events_and_deltas()) as events:
            async for event in events:
                if not isinstance(event, TokenDelta):
                    yield event

    async def events_and_deltas(self) -> AsyncGenerator[StreamResponse | TokenDelta]:
        """:meth:`events`, with the token deltas heard meanwhile when the call asked for them
        (``Client.dispatch(deltas=True)``); a delta never changes :attr:`task`."""
        try:
            while True:
                ev = await self._next()
                if ev.delta is not None:
                    yield ev.delta
                    continue
                assert ev.response is not None
                self._assembler.apply(ev.response)
                yield ev.response
                if ev.final:
                    return
        finally:
            self._client.inbox.forget(self.call_id)

    async def _next(self) -> CallEvent:
        """The next event of the call that is not an error (raised); DEADLINE_EXCEEDED once the deadline passes."""
        remaining = self.deadline - time.time()
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                ev = await self._pending.queue.get()
        except TimeoutError as e:
            raise TransportError(
                codes.DEADLINE_EXCEEDED,
                f"no final answer from {self.agent!r} (task {self.task_id}) before the call's deadline",
                metadata={"agent": self.agent, "task_id": self.task_id},
            ) from e
        if ev.error is not None:
            raise ev.error
        return ev

    async def result(self) -> Task:
        """Wait for the final Task (terminal or interrupted)."""
        try:  # :meth:`events` without its generators: every call a workflow makes ends here
            while True:
                ev = await self._next()
                if ev.response is not None:
                    self._assembler.apply(ev.response)
                    if ev.final:
                        break
        finally:
            self._client.inbox.forget(self.call_id)
        if self._assembler.task is None:
            raise RpcError(codes.INVALID_AGENT_RESPONSE, f"{self.agent!r} ended the call without a task")
        return self._assembler.task

    @property
    def task(self) -> Task | None:
        """The task as assembled so far."""
        return self._assembler.task

    @property
    def attempt(self) -> int:
        """The delivery attempt (A2A-Attempt) of the newest accepted reply."""
        return self._pending.attempt


class Client:
    """Calls agents and workflows over NATS (SPEC §3.5).

    Args:
        bus: an open bus (the client does not close it unless it opened it).
        settings: timeouts and limits.
        registry: a started registry to resolve cards (one is made when None).
        propagate: headers copied onto every request (A2A-User, Authorization, traceparent).
        call_depth: the depth of calls made by this client (a callee's client uses its own depth).
    """

    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        *,
        registry: Registry | None = None,
        instance: str | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.instance = instance or instance_id(settings.reply_scope)
        self._registry = registry
        self._owns_registry = registry is None
        self._owns_bus = False
        self.inbox = ReplyInbox(bus, self.instance, self._task_of)
        self._started = False

    @classmethod
    async def connect(cls, settings: Settings, *, name: str = "a2amesh-client") -> Client:
        """Open a bus, start a client on it; ``close()`` closes both."""
        bus = await Bus.connect(settings, name=name)
        client = cls(bus, settings)
        client._owns_bus = True
        try:
            await client.start()
        except BaseException:
            await bus.close()
            raise
        return client

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def registry(self) -> Registry:
        """The card registry this client resolves callees with."""
        assert self._registry is not None, "Client.start() was not called"
        return self._registry

    async def start(self) -> None:
        """Subscribe to this process's reply subjects and start the registry."""
        if self._started:
            return
        self._started = True
        if self._registry is None:
            self._registry = Registry(self.bus, card_ttl=self.settings.card_ttl)
        await self._registry.start()
        await self.inbox.start()

    async def close(self) -> None:
        """Stop reply recovery, the registry (if owned) and the bus (if owned)."""
        await self.inbox.close()
        if self._owns_registry and self._registry is not None:
            await self._registry.stop()
        if self._owns_bus:
            await self.bus.close()

    def cards(self) -> list[AgentCard]:
        """Live cards of the mesh."""
        return self.registry.cards()

    def _request_headers(
        self, *, reply_to: str | None, deadline: float, headers: Mapping[str, str] | None, call_depth: int
    ) -> dict[str, str]:
        out = {h.VERSION: codes.A2A_VERSION, h.DEADLINE: str(int(deadline * 1000)), h.CALL_DEPTH: str(call_depth)}
        if reply_to:
            out[h.REPLY_TO] = reply_to
        for k, v in (headers or {}).items():
            if k in h.PROPAGATED:
                out[k] = v
        if tracing.enabled:
            tracing.inject(out)  # the current span is the call's parent
        return out

    async def dispatch(
        self,
        agent: str,
        message: Message | EncodedMessage,
        *,
        stream: bool = False,
        timeout: float | None = None,
        deadline: float | None = None,
        headers: Mapping[str, str] | None = None,
        call_depth: int = 0,
        request_id: str | int | None = None,
        call_id: str | None = None,
        history_length: int | None = None,
        deltas: bool = False,
        task_id: str | None = None,
    ) -> Call:
        """Publish a SendMessage / SendStreamingMessage and return the call in flight.

        ``call_id`` (the reply-subject token) is minted here unless the caller minted it first, as the
        workflow executor does to checkpoint the reply subject before publishing. ``history_length``: how
        many of the task's latest messages its answers carry (A2A ``historyLength``; 0: none, as the
        workflow executor asks, since it reads only the status and artifacts).
        ``deltas``: a streaming call also hears its token deltas (:meth:`Call.events_and_deltas`).
        ``message``: a model, or a new task's message its caller has already encoded (:class:`EncodedMessage`).
        ``task_id``: the id the callee derives for a new task (:func:`task_id_for` of ``agent`` and the messageId),
        when the caller has it already (the workflow executor); a message continuing a task keeps its own.

        A messageId already used for a different message is a new request: it is sent again under
        :func:`reused_message_id` (docs/protocol.md "Identities").

        Raises:
            TransportError: ``AGENT_NOT_FOUND`` (no live card), ``PAYLOAD_TOO_LARGE``, ``UNAVAILABLE``.
            RpcError: a resend of a request whose first copy was refused, refused the same way.
        """
        await self.registry.resolve(agent)
        if deadline is None:
            deadline = time.time() + (timeout if timeout is not None else self.settings.call_timeout)
        call_id = call_id or nuid()
        reply_subject = self.bus.subjects.reply(self.instance, agent, call_id)
        pending = PendingCall(agent, reply_subject, deltas=deltas and stream, headers=headers)
        if pending.deltas:
            await self.inbox.listen_for_deltas()
        method = codes.SEND_STREAMING_MESSAGE if stream else codes.SEND_MESSAGE
        if isinstance(message, EncodedMessage):
            if history_length is not None and history_length < 0:
                SendMessageConfiguration(history_length=history_length)  # raises the model's precise error
            body = encode_send_request(method, message.json, history_length, request_id or call_id)
            message_id, continued = message.message_id, None
        else:
            config = None if history_length is None else SendMessageConfiguration(history_length=history_length)
            body = encode_request(
                method, SendMessageRequest(message=message, configuration=config), request_id or call_id
            )
            message_id, continued = message.message_id, message.task_id
        if len(body) > self.bus.max_payload:
            raise TransportError(
                codes.PAYLOAD_TOO_LARGE,
                f"request of {len(body)} bytes exceeds the server's max_payload of {self.bus.max_payload} bytes; "
                "store large inputs as artifacts and send their artifact:// URL",
            )
        task_id = continued or task_id or task_id_for(agent, message_id)
        pending.task_id = task_id
        call = Call(self, call_id, agent, task_id, pending, deadline)
        hdrs = self._request_headers(
            reply_to=call.reply_subject, deadline=deadline, headers=headers, call_depth=call_depth
        )
        hdrs[h.MSG_ID] = _msg_id(agent, message_id, continued)
        self.inbox.add(call_id, pending)
        try:
            ack = await self.bus.js_publish(self.bus.subjects.request(agent), body, hdrs)
            if not ack.duplicate:
                return call
            model = message.build() if isinstance(message, EncodedMessage) else message
            if not await self._resend_is_new(agent, model, task_id, hdrs):
                # The same request is already queued, running or answered for another caller: follow its task.
                pending.follow = functools.partial(
                    self._subscribe_existing, agent, task_id, reply_subject, hdrs, request_id or call_id
                )
                await pending.follow()
                return call
        except BaseException:
            self.inbox.forget(call_id)
            raise
        self.inbox.forget(call_id)
        return await self.dispatch(
            agent,
            model.model_copy(update={"message_id": reused_message_id(model)}),
            stream=stream,
            deadline=deadline,
            headers=headers,
            call_depth=call_depth,
            request_id=request_id,
            history_length=history_length,
            deltas=deltas,
        )

    async def _resend_is_new(self, agent: str, message: Message, task_id: str, hdrs: Mapping[str, str]) -> bool:
        """Whether a request JetStream reported as a duplicate is a new one (its messageId reused for another
        message); raises what its first copy was answered when that was a refusal.

        A messageId is the request's idempotency key (SPEC §3.3): an exact resend gets the first copy's answer. The
        first copy is found in the task's history. A message continuing a task that is not in its history was
        refused when the task cannot take it (:func:`continuation_refusal`). A task still queued, one whose record
        keeps no history, or one that cannot be read now is followed as before.
        """
        if message.message_id.endswith(_reuse_suffix(message)):
            return False  # already re-sent under its own id
        try:
            task = await self.get_task(agent, task_id, headers=hdrs)
        except RpcError as e:
            if e.code == codes.TASK_NOT_FOUND and message.task_id:
                raise
            return False
        except TransportError:
            return False  # the task cannot be read now: follow it, as before this check
        history = task.history or []
        same_id = [m for m in history if m.message_id == message.message_id]
        if same_id:
            return all(m.parts != message.parts for m in same_id)
        if message.task_id and history:
            refusal = continuation_refusal(task, message)
            if refusal is not None:
                raise refusal
        return False

    async def _subscribe_existing(
        self, agent: str, task_id: str, reply_to: str, hdrs: dict[str, str], request_id: str | int
    ) -> None:
        """SubscribeToTask on ``reply_to``; its answers carry ``request_id`` (a resend's: its own request's id)."""
        body = encode_request(codes.SUBSCRIBE_TO_TASK, SubscribeToTaskRequest(id=task_id), request_id)
        await self.bus.publish(self.bus.subjects.control(agent), body, {**hdrs, h.REPLY_TO: reply_to})

    async def send(self, agent: str, message: Message | str | dict[str, Any], **kwargs: Any) -> Task:
        """SendMessage and wait for the final Task (terminal or interrupted)."""
        msg = message if isinstance(message, Message) else _coerce(message)
        call = await self.dispatch(agent, msg, **kwargs)
        return await call.result()

    async def stream(
        self, agent: str, message: Message | str | dict[str, Any], **kwargs: Any
    ) -> AsyncIterator[StreamResponse]:
        """SendStreamingMessage; yields each event until the final one."""
        msg = message if isinstance(message, Message) else _coerce(message)
        call = await self.dispatch(agent, msg, stream=True, **kwargs)
        async for ev in call.events():
            yield ev

    async def _task_of(self, agent: str, task_id: str, headers: Mapping[str, str] | None) -> Task:
        return await self.get_task(agent, task_id, timeout=REREAD_TIMEOUT, headers=headers)

    async def _control(
        self, agent: str, method: str, params: Any, timeout: float, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        await self.registry.resolve(agent)
        body = encode_request(method, params, nuid())
        hdrs = {h.VERSION: codes.A2A_VERSION, **{k: v for k, v in (headers or {}).items() if k in h.PROPAGATED}}
        msg = await self.bus.request(self.bus.subjects.control(agent), body, hdrs, timeout)
        resp = decode_response(msg.data)
        if resp.error is not None:
            raise from_rpc_error(resp.error.code, resp.error.message, resp.error.data)
        assert resp.result is not None
        return resp.result

    async def get_task(
        self,
        agent: str,
        task_id: str,
        *,
        timeout: float = CONTROL_TIMEOUT,
        history_length: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Task:
        """GetTask from the agent (its replicas answer from the task record); ``headers``: propagated ones only."""
        params = GetTaskRequest(id=task_id, history_length=history_length)
        return Task.model_validate(await self._control(agent, codes.GET_TASK, params, timeout, headers))

    async def cancel_task(
        self, agent: str, task_id: str, *, timeout: float = CONTROL_TIMEOUT, headers: Mapping[str, str] | None = None
    ) -> Task:
        """CancelTask: the running replica stops the task; a queued task is answered canceled when pulled."""
        result = await self._control(agent, codes.CANCEL_TASK, CancelTaskRequest(id=task_id), timeout, headers)
        return Task.model_validate(result)

    async def list_tasks(
        self,
        agent: str,
        request: ListTasksRequest | None = None,
        *,
        timeout: float = CONTROL_TIMEOUT,
        headers: Mapping[str, str] | None = None,
    ) -> ListTasksResponse:
        """ListTasks of an agent."""
        result = await self._control(agent, codes.LIST_TASKS, request or ListTasksRequest(), timeout, headers)
        return ListTasksResponse.model_validate(result)

    async def subscribe(
        self,
        agent: str,
        task_id: str,
        *,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[StreamResponse]:
        """SubscribeToTask: the task's current state, then its events until the final one."""
        await self.registry.resolve(agent)
        call_id = nuid()
        pending = PendingCall(agent, self.bus.subjects.reply(self.instance, agent, call_id), task_id=task_id)
        deadline = time.time() + (timeout if timeout is not None else self.settings.call_timeout)
        call = Call(self, call_id, agent, task_id, pending, deadline)
        hdrs = self._request_headers(reply_to=call.reply_subject, deadline=deadline, headers=headers, call_depth=0)
        pending.follow = functools.partial(self._subscribe_existing, agent, task_id, call.reply_subject, hdrs, call_id)
        self.inbox.add(call_id, pending)
        try:
            await pending.follow()
        except BaseException:
            self.inbox.forget(call_id)
            raise
        async for ev in call.events():
            yield ev


def continuation_refusal(task: Task, message: Message) -> RpcError | None:
    """Why ``message`` (carrying ``task``'s id) cannot continue ``task``, or None: a task in a terminal state takes
    no more messages (UnsupportedOperationError), and a ``contextId`` other than the task's is refused (A2A 1.0
    §3.4.3: a taskId and a contextId that do not belong together)."""
    if task.status.state.terminal:
        return RpcError(
            codes.UNSUPPORTED_OPERATION, f"task {task.id} is {task.status.state.value}; start a new task instead"
        )
    if message.context_id and task.context_id and message.context_id != task.context_id:
        return RpcError(
            codes.INVALID_PARAMS,
            f"message.contextId {message.context_id!r} does not match the contextId {task.context_id!r} of task "
            f"{task.id}; leave contextId out to continue the task in its own context",
        )
    return None


def already_taken(task: Task, message: Message) -> bool:
    """Whether ``task``'s history holds ``message`` (the same messageId and parts): a resend of a message the task
    took, which its caller follows instead of it being applied again (docs/lifecycle.md "Resend")."""
    return any(m.message_id == message.message_id and m.parts == message.parts for m in task.history or [])


def _reuse_suffix(message: Message) -> str:
    parts = [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in message.parts]
    return "~" + content_digest(parts)[:16]


def reused_message_id(message: Message) -> str:
    """The messageId a message is sent under when its own was already used for a different message: the id and
    a digest of the parts, ``{messageId}~{sha256[:16]}``, so a resend of it is de-duplicated in turn."""
    return message.message_id + _reuse_suffix(message)


def request_msg_id(agent: str, message: Message) -> str:
    """The ``Nats-Msg-Id`` of a request: ``{agent}:{messageId}`` (SPEC §3), and ``{agent}:{messageId}:{taskId}`` for a
    message that continues a task, so that a messageId used both to start a task and to continue another (or
    to continue two) is two requests, while a resend of either is still one."""
    return _msg_id(agent, message.message_id, message.task_id)


def _msg_id(agent: str, message_id: str, task_id: str | None) -> str:
    return f"{agent}:{message_id}:{task_id}" if task_id else f"{agent}:{message_id}"


def _coerce(value: str | dict[str, Any]) -> Message:
    if isinstance(value, str):
        return make_message(value)
    return make_message(data=value)


def parse_json_arg(text: str) -> Any:
    """Parse a JSON argument given on a command line (ValueError with a clear message)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e


@contextlib.asynccontextmanager
async def connect(settings: Settings, *, name: str = "a2amesh-client") -> AsyncIterator[Client]:
    """``async with connect(settings) as client:`` — a started client, closed on exit."""
    client = await Client.connect(settings, name=name)
    try:
        yield client
    finally:
        await client.close()
