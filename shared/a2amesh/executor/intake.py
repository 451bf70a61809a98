"""New executions: the one create path for a request and for a scheduled run.

:meth:`ExecutionIntake.create` is the only place an execution is created: the format's start
(:mod:`a2amesh.executor.starts`), the runner, the record written NX with its first state, node records,
events, timers, WORKING task and indexes in one round trip, then the first dispatches published. A
request (:meth:`ExecutionIntake.start_request`) adds what a caller needs around it — attach to an
execution that exists, answer one canceled before it started, ack, the first snapshot of a stream — and
a schedule (:meth:`ExecutionIntake.start_scheduled`) a deterministic id and its ``schedule``/``fire``
fields. Answers to paused executions are :mod:`a2amesh.executor.resume`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from a2amesh import faults
from a2amesh.bus import headers as h
from a2amesh.bus.nats import WorkMsg
from a2amesh.errors import ArtifactError, ConfigError, RpcError, TransportError
from a2amesh.executor.context import ExecutorContext, stored_reply_to
from a2amesh.executor.runner import ExecutionRunner, event_json, make_runner, without_sent
from a2amesh.executor.scheduler import ScheduledGraph
from a2amesh.executor.starts import StartArgs, Starter
from a2amesh.ids import nuid, task_id_for
from a2amesh.protocol import Message, Task, TaskState, TaskStatus, codes
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.vocabulary import (
    BRANCH_KEY,
    CALL_CHAIN_KEY,
    CONTROL_PART_TYPES,
    NODE_PATH_KEY,
    NODE_REQUEST,
    RETRY_REQUEST,
)
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import ExecutionRecord, Listed
from a2amesh.store.tasks import Subscriber
from a2amesh.worker.decode import WorkRequest, control_part, deadline_of
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher
from a2amesh.workflow.engine_protocol import ExecutableEngine, RunState
from a2amesh.workflow.events import EmitEvent
from a2amesh.workflow.formats import Definition, Loaded

__all__ = ["CONTROL_TYPES", "Created", "ExecutionIntake", "NewExecution", "input_of"]

CONTROL_TYPES = CONTROL_PART_TYPES | {RETRY_REQUEST}
"""DataPart ``type`` values that are control parts, not the workflow input."""


@dataclass(frozen=True, slots=True)
class NewExecution:
    """An execution to create, whoever asked for it.

    Attributes:
        workflow: the loaded workflow (name, digest, definition).
        engine: the engine that runs it (a branch's, for a scheduled branch run).
        args: what its start is given.
        reply: how its caller wants the answer (empty for a scheduled run).
        history: the WORKING task's history (the request message).
        labels: extra task metadata and record fields (a schedule's ``schedule``), by name.
        fields: extra record fields only (a schedule's ``fire``).
    """

    workflow: Loaded[Any]
    engine: ExecutableEngine[Any]
    args: StartArgs
    reply: ReplyInfo
    history: list[Message] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Created:
    """What :meth:`ExecutionIntake.create` did.

    Attributes:
        outcome: ``created``; ``exists`` (another request or replica created it); ``canceled`` (its task
            was canceled before it started: nothing was created).
        runner: the new execution's runner (``created`` only), not launched yet.
        commands: the commands of its first step still to carry out.
        call_ids: the call id of each of its first dispatches.
        working: its WORKING task.
    """

    outcome: Literal["created", "exists", "canceled"]
    working: Task
    runner: ExecutionRunner[Any] | None = None
    commands: list[BaseModel] = field(default_factory=list)
    call_ids: dict[str, str] = field(default_factory=dict)


class ExecutionIntake:
    """Creates executions for requests and schedules (see the module docstring).

    Args:
        ctx: the replica's collaborators.
        starters: the starter of each format, by name (:func:`a2amesh.executor.starts.starters`).
    """

    def __init__(self, ctx: ExecutorContext, starters: Mapping[str, Starter[Any]]) -> None:
        self.ctx = ctx
        self.starters = starters
        self._saved_digests: dict[str, float] = {}

    # --- the create path -----------------------------------------------------------------------

    async def create(self, new: NewExecution) -> Created:
        """Start the engine, write the execution NX with its indexes, then publish its first dispatches. The
        runner is returned, not launched: the caller acks (a request) before it runs."""
        ctx, args = self.ctx, new.args
        state, commands = await self._starter(new.engine).start(new.engine, args)
        runner = make_runner(ctx.deps, new.engine, state, epoch=1, reply=new.reply)
        runner.history = list(new.history or [])
        call_ids = runner.prepare(commands)
        timers = {timer_id: int(due * 1000) for timer_id, due in state.timers.items()}
        working = Task(
            id=args.execution_id,
            context_id=args.context_id,
            status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
            history=new.history,
            metadata={"execution_id": args.execution_id, "workflow": args.workflow, **new.labels},
        )
        paused = runner.parked  # its first step only waits for a human (a review first): no step will say so
        final = _final_fields(state)
        status = "paused" if paused else str(final.get("status", "running"))
        await self._save_definition(new.workflow.digest, new.workflow.definition)
        created = await ctx.store.create(
            args.execution_id,
            owner=ctx.instance,
            state_json=runner.state_json(),
            fields={
                "workflow": args.workflow,
                "digest": args.digest,
                "task_id": args.execution_id,
                "context_id": args.context_id,
                "input": json.dumps(state.input, default=str),
                "reply": new.reply.model_dump_json(),
                "call_depth": state.call_depth,
                "reused_from": getattr(state, "reused_from", None) or "",
                **new.labels,
                **new.fields,
                **({"version": new.workflow.version} if new.workflow.version else {}),
                **final,
            },
            nodes=runner.initial_records(),
            events=[event_json(c) for c in commands if isinstance(c, EmitEvent)],
            timers=timers,
            task=working,
            listed=Listed(args.workflow, status, new.reply.parent_execution),
        )
        if created.canceled:
            return Created("canceled", working)
        if not created.created:
            return Created("exists", working)
        faults.crash_point("after_execution_create")
        if paused:
            await ctx.store.set_fields(args.execution_id, {"status": "paused"})
        # The WORKING task and the listing entries were written with the execution, so a callee asked about
        # its caller finds it: the first dispatches go out now, and the caller waits for them.
        sending = runner.send_dispatches(commands, call_ids, events=False)
        if sending is not None:
            try:
                await sending
            except BaseException:
                sending.cancel()
                runner.drop_calls()
                raise
        return Created("created", working, runner, without_sent(commands, events=False), call_ids)

    def _starter(self, engine: ExecutableEngine[Any]) -> Starter[Any]:
        return self.starters[engine.format]

    def _branch_engine(self, engine: ExecutableEngine[Any], name: str, branch: object) -> ExecutableEngine[Any]:
        """The engine of one branch a request asks to run on its own (``INVALID_PARAMS`` when there is none)."""
        starter = self._starter(engine)
        if not starter.branches:
            raise RpcError(codes.INVALID_PARAMS, f"workflow {name} has no branches to run on their own")
        if not isinstance(branch, str) or not branch:
            raise RpcError(codes.INVALID_PARAMS, f"{BRANCH_KEY} must be a branch id of workflow {name}")
        try:
            return starter.branch(engine, branch)
        except ConfigError as e:
            raise RpcError(codes.INVALID_PARAMS, f"workflow {name}: {e.problem}") from e

    async def _save_definition(self, digest: str, definition: Definition) -> None:
        saved = self._saved_digests.get(digest)
        if saved is not None and time.time() - saved < 3600:
            return
        await self.ctx.store.save_definition(digest, definition.to_data())
        self._saved_digests[digest] = time.time()

    # --- requests ------------------------------------------------------------------------------

    async def start_request(self, workflow: Loaded[Any], msg: WorkMsg, request: WorkRequest) -> None:
        """A request for a new run: create its execution (or follow the one it already has), ack, drive it."""
        ctx, message, name = self.ctx, request.message, request.agent
        task_id = task_id_for(name, message.message_id)
        context_id = message.context_id or nuid()
        reply = ReplyInfo(
            reply_to=request.reply_to,
            request_id=request.request_id,
            streaming=request.method == codes.SEND_STREAMING_MESSAGE,
            node_request=_node_request(message),
            headers={k: v for k, v in msg.headers.items() if k in h.PROPAGATED},
        )
        engine: ExecutableEngine[Any] = ctx.catalog.engine_for(workflow)
        branch = (message.metadata or {}).get(BRANCH_KEY)
        if branch is not None:
            engine = self._branch_engine(engine, name, branch)
        if self._starter(engine).looks_first(engine, message):
            # starting takes a conversation turn or reads an earlier execution: look before starting
            record, canceled = await asyncio.gather(ctx.store.execution(task_id), ctx.tasks.is_canceled(task_id))
            if record is not None:
                await self._attach(name, task_id, record, reply, msg)
                return
            if canceled:
                await self._answer_canceled_before_start(name, task_id, context_id, message, reply, msg)
                return
        chain = (message.metadata or {}).get(CALL_CHAIN_KEY)
        args = StartArgs(
            workflow=name,
            execution_id=task_id,
            input=await input_of(message, ctx.artifacts, user=reply.headers.get(h.USER)),
            now=time.time(),
            digest=workflow.digest,
            context_id=context_id,
            call_depth=int(msg.headers.get(h.CALL_DEPTH, "0") or 0),
            call_chain=tuple(str(c) for c in chain) if isinstance(chain, list) else (),
            deadline=deadline_of(msg.headers),
            message=message,
        )
        history = [message.updated(task_id=task_id, context_id=context_id)]
        created = await self.create(NewExecution(workflow, engine, args, reply, history=history))
        if created.outcome == "canceled":
            await self._answer_canceled_before_start(name, task_id, context_id, message, reply, msg)
            return
        if created.runner is None:
            await self._attach(name, task_id, await ctx.store.execution(task_id) or ExecutionRecord(), reply, msg)
            return
        faults.crash_point("after_redis_commit_before_ack")
        await msg.ack()
        if reply.streaming and reply.reply_to:
            publisher = ReplyPublisher(ctx.bus, ctx.settings, agent=name, task_id=task_id, attempt=1)
            with contextlib.suppress(TransportError):
                await publisher.snapshot(reply.reply_to, request.request_id, created.working, 1)
        ctx.log.info("execution.started", execution_id=task_id, workflow=name, digest=workflow.digest[:12])
        ctx.drivers.launch(created.runner, created.commands, call_ids=created.call_ids)

    async def _attach(self, name: str, task_id: str, record: ExecutionRecord, reply: ReplyInfo, msg: WorkMsg) -> None:
        """A redelivered or re-sent request for an existing execution: follow it instead of starting another.

        The caller is added to the task's subscribers in Redis, with its own request id: the write that stores the
        task's next answer (its final, or the INPUT_REQUIRED of a pause) reads them in the same script, so whoever
        stores it answers this caller too; an answer stored already is sent to it here. A streaming caller of an
        execution driven here also gets its progress."""
        ctx = self.ctx
        if reply.reply_to and reply.reply_to != stored_reply_to(record):
            subscriber = Subscriber(reply.reply_to, reply.request_id)
            runner = ctx.drivers.runners.get(task_id)
            if reply.streaming and runner is not None and runner.reply.reply_to != reply.reply_to:
                runner.targets.append(subscriber)
            view = await ctx.tasks.add_subscriber(task_id, subscriber)
            if view.outcome == "terminal" and view.task is not None:
                publisher = ReplyPublisher(
                    ctx.bus, ctx.settings, agent=name, task_id=task_id, attempt=record.epoch or 1
                )
                with contextlib.suppress(TransportError):
                    await publisher.final(reply.reply_to, reply.request_id, view.task, 1, streaming=reply.streaming)
        await msg.ack()
        ctx.log.info("request.attached", execution_id=task_id, delivered=msg.num_delivered)

    async def _answer_canceled_before_start(
        self, name: str, task_id: str, context_id: str, message: Message, reply: ReplyInfo, msg: WorkMsg
    ) -> None:
        ctx = self.ctx
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp()),
            history=[message.updated(task_id=task_id, context_id=context_id)],
            metadata={"workflow": name},
        )
        view = await ctx.tasks.write(task, name, ctx.instance, release=True)
        if view.outcome == "terminal" and view.task is not None:
            # stored CANCELED by the CancelTask, which is the answer (completed with this request's context)
            task = await ctx.tasks.complete_canceled(view.task, task)
        publisher = ReplyPublisher(ctx.bus, ctx.settings, agent=name, task_id=task_id, attempt=msg.num_delivered)
        others = [s for s in view.subscribers if s.subject != reply.reply_to]
        for subject, request_id, streaming in [
            *([(reply.reply_to, reply.request_id, reply.streaming)] if reply.reply_to else []),
            *((s.subject, s.answer_id(task_id), False) for s in others),
        ]:
            with contextlib.suppress(TransportError):
                await publisher.final(subject, request_id, task, 1, streaming=streaming)
        await msg.ack()

    # --- schedules -----------------------------------------------------------------------------

    async def start_scheduled(self, graph: ScheduledGraph, execution_id: str, fire: datetime) -> bool | None:
        """Start a scheduled run with a given execution id (created NX) and drive it.

        Returns:
            ``True`` when this call created it, ``False`` when it already existed, ``None`` when this
            replica cannot start it now (shutting down, no free slot, workflow or branch not served).
        """
        ctx = self.ctx
        workflow = ctx.catalog.workflows.get(graph.workflow)
        if workflow is None or ctx.stopping() or ctx.free_slots() <= 0:
            return None
        engine: ExecutableEngine[Any] = ctx.catalog.engine_for(workflow)
        starter = self._starter(engine)
        if graph.branch is not None and not starter.branches:
            return None
        if await ctx.store.record(execution_id) is not None:
            return False
        if graph.branch is not None:
            engine = starter.branch(engine, graph.branch)  # a branch is its own graph
        args = StartArgs(
            workflow=graph.workflow,
            execution_id=execution_id,
            input=graph.input,
            now=time.time(),
            digest=workflow.digest,
            context_id=nuid(),
        )
        new = NewExecution(
            workflow, engine, args, ReplyInfo(), labels={"schedule": graph.id}, fields={"fire": int(fire.timestamp())}
        )
        created = await self.create(new)
        if created.runner is None:
            return False
        ctx.log.info("execution.started", execution_id=execution_id, workflow=graph.workflow, schedule=graph.id)
        ctx.drivers.launch(created.runner, created.commands, call_ids=created.call_ids)
        return True


async def input_of(message: Message, artifacts: ArtifactStore, *, user: str | None) -> Any:
    """The workflow input a request message carries: its first data part that is not a control part, else
    the value of its first artifact URL part, else its text."""
    for part in message.parts:
        if part.data is not None and not (isinstance(part.data, dict) and part.data.get("type") in CONTROL_TYPES):
            return part.data
    for i, part in enumerate(message.parts):
        if part.url is not None and part.url.startswith("artifact://"):
            try:
                stored = await artifacts.load_uri(part.url, user=user)
            except ArtifactError as e:  # the caller's URL names nothing readable: its mistake, not ours
                raise RpcError(
                    codes.INVALID_PARAMS, f"invalid params of SendMessage: params.message.parts[{i}].url: {e}"
                ) from e
            return stored.value
    return {"text": message.text()}


def _final_fields(state: RunState) -> dict[str, Any]:
    """Record fields of an execution that finished in its first step (its input was refused)."""
    if not state.finished:
        return {}
    return {
        "status": str(state.status),
        "error": state.error or "",
        "output": json.dumps(state.output, default=str),
        "finished": int((state.finished_at or time.time()) * 1000),
        "created": int(state.started_at * 1000),  # both ends on the engine's clock: never a negative duration
    }


def _node_request(message: Message) -> dict[str, Any] | None:
    """The ``workflow_node_request`` part, with the caller's node path (where a resume of ours goes up)."""
    request = control_part(message, NODE_REQUEST)
    path = (message.metadata or {}).get(NODE_PATH_KEY)
    if request is not None and isinstance(path, str) and path:
        return {**request, "node_path": path}
    return request
