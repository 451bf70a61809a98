"""The workflow executor: serves every workflow of a folder as an agent and drives their executions.

For each loaded workflow a replica publishes a card, pulls the workflow's durable consumer on
``{NS}_TASKS`` (only as many requests as it has free execution slots) and answers its control
subject. A request becomes an execution created with NX in Redis, *then* the request is acked: the
replica never holds a message while the execution runs. Executions are driven by
:class:`~a2amesh.executor.runner.ExecutionRunner` under a lease; a tick polls due timers of owned
executions and takes over executions whose lease expired. The folder is re-scanned for changes
(hot reload): new definitions serve new executions, running ones stay on their pinned version.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from a2amesh import faults
from a2amesh.agent.context import control_part
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, PullConsumer, Received, Subscription, WorkMsg
from a2amesh.bus.setup import ensure_consumer, init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import (
    A2AMeshError,
    ArtifactError,
    ConfigError,
    RpcError,
    TaskNotFound,
    TransportError,
)
from a2amesh.executor.cards import workflow_card
from a2amesh.executor.catalog import Catalog
from a2amesh.executor.control import ExecutionControl
from a2amesh.executor.graph_runner import load_state, make_runner
from a2amesh.executor.runner import ExecutionRunner, RunnerDeps, node_record, without_sent
from a2amesh.executor.scheduler import ScheduledGraph, Scheduler, scheduled_graphs
from a2amesh.ids import nuid, task_id_for
from a2amesh.lifecycle import STOP_LIMIT, Worker, cancel_and_wait
from a2amesh.logs import get_logger
from a2amesh.protocol import (
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    codes,
)
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.protocol.vocabulary import CALL_CHAIN_KEY, CONTROL_PART_TYPES, NODE_PATH_KEY, NODE_REQUEST, RETRY_REQUEST
from a2amesh.registry import CardPublisher
from a2amesh.service import ProcessService
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from a2amesh.store.tasks import TaskStore
from a2amesh.worker.control import ControlPlane
from a2amesh.worker.decode import WorkRequest, deadline_of
from a2amesh.worker.intake import Intake
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher, send_error, valid_reply_subject
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.dag.nodes import LoopNode
from a2amesh.workflow.dag.state import ExecutionState, NodeStatus
from a2amesh.workflow.events import EmitEvent, ReviewAnswered, TimerFired
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.engine import GraphEngine
from a2amesh.workflow.graph.state import GraphState

__all__ = ["CONTROL_TYPES", "WorkflowExecutor", "executor_service"]

CONTROL_TYPES = CONTROL_PART_TYPES | {RETRY_REQUEST}
"""DataPart ``type`` values that are control parts, not the workflow input."""
_WAKE = TimerFired(timer_id="__wake__")


@dataclass
class _Served:
    """One workflow this replica serves."""

    name: str
    digest: str
    publisher: CardPublisher
    consumer: PullConsumer
    control: Subscription
    pull: asyncio.Task[None]
    intake: set[asyncio.Task[None]] = field(default_factory=set)


FINAL_REPLY_TRIES = 6
"""Takeover tries to publish a finished execution's unanswered final before giving it up (docs/protocol.md §6)."""
FINAL_REPLY_BACKOFF = 1.0
"""Seconds before the second such try; doubled for each next one, at most :data:`FINAL_REPLY_MAX_BACKOFF`."""
FINAL_REPLY_MAX_BACKOFF = 60.0

TURN_START_GRACE = 5.0
"""Seconds a conversation turn that took the turn pointer has to write its execution state; meanwhile the
next turn waits for it (after that the pointer is taken as left by a turn that never started)."""


def _parse_turn_pointer(pointer: str) -> tuple[str, str, int]:
    """``"{task} {previous task} {taken ms}"`` → (task, previous task, ms); older pointers lack the last two."""
    fields = pointer.split(" ")
    current = fields[0]
    before = fields[1] if len(fields) > 1 else ""
    taken = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
    return current, before, taken


class WorkflowExecutor(Worker):
    """Serves the workflows of a folder; ``run()`` returns when shutdown is done.

    Args:
        folder: the folder of workflow definitions.
        bus: an open bus (not closed here).
        redis: a Redis client (not closed here).
        settings: the process settings.
        instance: this replica's instance id (fresh by default).
        reload_interval: seconds between scans of the folder.
    """

    def __init__(
        self,
        folder: Path,
        *,
        bus: Bus,
        redis: Redis,
        settings: Settings,
        instance: str | None = None,
        reload_interval: float = 1.0,
    ) -> None:
        super().__init__()
        self.folder = folder
        self.bus = bus
        self.settings = settings
        self.instance = instance or nuid()
        self.reload_interval = reload_interval
        self.catalog = Catalog(folder)
        keys = Keys(settings.namespace)
        self.client = Client(bus, settings, instance=self.instance)
        self.store = ExecutionStore(redis, keys, retention=settings.task_retention, lease_ttl=settings.lease_ttl)
        self.tasks = TaskStore(redis, keys, retention=settings.task_retention, queued_ttl=settings.tasks_max_age)
        self.artifacts = ArtifactStore(
            redis, keys, retention=settings.artifact_retention, max_bytes=settings.artifact_max_bytes
        )
        self.deps = RunnerDeps(bus, self.client, self.store, self.tasks, self.artifacts, settings, self.instance)
        self.max_executions = settings.max_executions_per_replica
        self.runners: dict[str, ExecutionRunner] = {}
        self.served: dict[str, _Served] = {}
        self.log = get_logger("executor", instance=self.instance)
        self.intake = Intake(bus, settings, log=self.log, accept=self._accept)
        self.control = ControlPlane(bus, settings, self.tasks, ExecutionControl(self), log=self.log)
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._saved_digests: dict[str, float] = {}
        self._tick = max(0.05, min(0.25, settings.lease_ttl / 8))
        self.scheduler = Scheduler(
            ScheduleStore(redis, keys), self.store, start=self.start_run, timezone=settings.timezone
        )
        self._scheduled: tuple[object, dict[str, ScheduledGraph]] = (None, {})
        self._final_tries: dict[str, tuple[int, float]] = {}  # unanswered finals: (failed tries, next try)
        self.final_reply_tries = FINAL_REPLY_TRIES
        self.final_reply_backoff = FINAL_REPLY_BACKOFF

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`shutdown`; then stop pulling, let executions finish or hand them over."""
        await init_mesh(self.bus, self.settings)
        await self.client.start()
        change = await asyncio.to_thread(self.catalog.scan)
        for problem in change.errors.values():
            self.log.error("workflow.invalid", error=problem)
        try:
            # the control plane's CancelTask answers still waiting are awaited before the stores close
            async with self.control:
                try:
                    for name in sorted(self.catalog.workflows):
                        await self._serve(name)
                    for loop in (self._heartbeat_loop, self._renew_loop, self._tick_loop, self._reload_loop):
                        self._spawn(loop())
                    self.log.info("executor.ready", workflows=sorted(self.served), folder=str(self.folder))
                    self.ready.set()
                    await self._stop.wait()
                finally:
                    await self._shutdown_sequence()
        finally:
            await self.client.close()
            await self.store.aclose()
            await self.tasks.aclose()
            self.log.info("executor.stopped")
            self._stopped.set()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("executor.task_crashed", error=repr(task.exception()))

    async def _shutdown_sequence(self) -> None:
        for served in list(self.served.values()):
            served.pull.cancel()
        for served in list(self.served.values()):
            await cancel_and_wait(served.pull, limit=STOP_LIMIT)
            await served.consumer.stop()
            for msg in served.consumer.drain_queued():
                with contextlib.suppress(Exception):
                    await msg.nak()
            if served.intake:
                await asyncio.wait(set(served.intake), timeout=5)
        if self._drivers:
            self.log.info("executor.draining", running=len(self._drivers), grace=self.settings.shutdown_grace)
            await asyncio.wait(set(self._drivers.values()), timeout=self.settings.shutdown_grace)
        for execution_id, driver in list(self._drivers.items()):
            runner = self.runners.get(execution_id)
            if not await cancel_and_wait(driver, limit=STOP_LIMIT):
                # still running: no hand-over; its lease expires and the epoch fence refuses its writes
                self.log.warning("execution.driver_left_running", execution_id=execution_id, waited=STOP_LIMIT)
                continue
            if runner is not None and not runner.lost and not runner.state.finished:
                with contextlib.suppress(Exception):
                    await self.store.release(execution_id, runner.token, handover=True)
                    self.log.info("execution.handed_over", execution_id=execution_id)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(set(self._background), timeout=5)
        for served in list(self.served.values()):
            await served.control.unsubscribe()
            with contextlib.suppress(Exception):
                await served.publisher.withdraw()
        self.served.clear()

    # --- serving workflows -------------------------------------------------------------------

    async def _serve(self, name: str) -> None:
        workflow = self.catalog.workflows[name]
        card = workflow_card(name, workflow.definition, self.settings.namespace, digest=workflow.digest)
        publisher = CardPublisher(self.bus, card, instance=self.instance, card_ttl=self.settings.card_ttl)
        try:
            await publisher.publish()
        except ConfigError as e:
            self.log.error("workflow.not_served", workflow=name, error=str(e))
            return
        await ensure_consumer(self.bus, self.settings, name, max_ack_pending=max(self.max_executions * 2, 256))
        consumer = await self.bus.pull_consumer(self.bus.subjects.tasks_stream, self.bus.subjects.consumer(name))

        async def on_control(msg: Received) -> None:
            await self.control.handle(msg, name)

        control = await self.bus.subscribe(self.bus.subjects.control(name), on_control)
        pull = asyncio.create_task(self._pull_loop(name, consumer), name=f"pull-{name}")
        self.served[name] = _Served(name, workflow.digest, publisher, consumer, control, pull)
        self.log.info("workflow.served", workflow=name, digest=workflow.digest[:12])

    async def _unserve(self, name: str) -> None:
        served = self.served.pop(name, None)
        if served is None:
            return
        await cancel_and_wait(served.pull, limit=STOP_LIMIT)
        await served.consumer.stop()
        for msg in served.consumer.drain_queued():
            with contextlib.suppress(Exception):
                await msg.nak()
        await served.control.unsubscribe()
        with contextlib.suppress(Exception):
            await served.publisher.withdraw()
        self.log.info("workflow.removed", workflow=name)

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                await self.reload()
            except Exception as e:
                self.log.warning("workflow.reload_failed", error=str(e) or type(e).__name__)

    async def reload(self) -> None:
        """Re-scan the folder now and apply what changed (new, changed and removed workflows)."""
        change = await asyncio.to_thread(self.catalog.scan)
        for name in change.removed:
            await self._unserve(name)
        for name in change.added:
            await self._serve(name)
        for name in change.changed:
            served = self.served.get(name)
            workflow = self.catalog.workflows[name]
            if served is None:
                await self._serve(name)
                continue
            served.digest = workflow.digest
            served.publisher.card = workflow_card(
                name, workflow.definition, self.settings.namespace, digest=workflow.digest
            )
            await served.publisher.refresh()
            self.log.info("workflow.reloaded", workflow=name, digest=workflow.digest[:12])

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.card_ttl / 3)
            for served in list(self.served.values()):
                try:
                    await served.publisher.refresh()
                except Exception as e:
                    self.log.warning("card.refresh_failed", workflow=served.name, error=str(e) or type(e).__name__)

    def _free_slots(self) -> int:
        intake = sum(len(s.intake) for s in self.served.values())
        return self.max_executions - len(self.runners) - intake

    async def _pull_loop(self, name: str, consumer: PullConsumer) -> None:
        def start(msg: WorkMsg) -> None:
            served = self.served.get(name)
            task = asyncio.create_task(self.intake.handle(msg, name))
            if served is not None:
                served.intake.add(task)
                task.add_done_callback(served.intake.discard)
                task.add_done_callback(lambda _: consumer.wake())

        await consumer.serve(start, lambda: min(self._free_slots(), 64), self._stop)

    # --- requests ----------------------------------------------------------------------------

    async def _accept(self, msg: WorkMsg, request: WorkRequest) -> None:
        """A valid request (the intake's ``accept``): create, resume or attach to its execution, then ack."""
        async with msg.kept_alive(self.settings.ack_wait / 3):  # Redis may be slow or paused
            await self._start_execution(
                request.agent, msg, request.request_id, request.method, request.message, request.reply_to
            )

    async def _send_error(
        self, name: str, reply_to: str | None, request_id: JsonRpcId, error: RpcError, attempt: int
    ) -> None:
        await send_error(
            self.bus,
            self.settings,
            agent=name,
            reply_to=reply_to,
            request_id=request_id,
            error=error,
            attempt=attempt,
        )

    async def _start_execution(
        self, name: str, msg: WorkMsg, request_id: JsonRpcId, method: str, message: Message, reply_to: str
    ) -> None:
        workflow = self.catalog.workflows.get(name)
        if workflow is None:
            await msg.nak(delay=1)
            return
        if message.task_id:
            await self._resume(name, msg, request_id, method, message, reply_to)
            return
        task_id = task_id_for(name, message.message_id)
        context_id = message.context_id or nuid()
        reply = ReplyInfo(
            reply_to=reply_to,
            request_id=request_id,
            streaming=method == codes.SEND_STREAMING_MESSAGE,
            node_request=_node_request(message),
            headers={k: v for k, v in msg.headers.items() if k in h.PROPAGATED},
        )
        engine = self.catalog.engine_for(workflow)
        retry = None if isinstance(engine, GraphEngine) else control_part(message, RETRY_REQUEST)
        if isinstance(engine, GraphEngine) or retry is not None:
            # starting takes a conversation turn or reads an earlier execution: look before starting. A plain
            # DAG start leaves both checks to the create script (one round trip fewer).
            record, canceled = await asyncio.gather(self.store.record(task_id), self.tasks.is_canceled(task_id))
            if record is not None:
                await self._attach(name, task_id, record, reply, msg)
                return
            if canceled:
                await self._answer_canceled_before_start(name, task_id, context_id, reply, msg)
                return
        chain = (message.metadata or {}).get(CALL_CHAIN_KEY)
        common: dict[str, Any] = {
            "execution_id": task_id,
            "input": await self._input_of(message, reply),
            "now": time.time(),
            "digest": workflow.digest,
            "task_id": task_id,
            "context_id": context_id,
            "call_depth": int(msg.headers.get(h.CALL_DEPTH, "0") or 0),
            "call_chain": [str(c) for c in chain] if isinstance(chain, list) else [],
            "deadline": deadline_of(msg.headers),
        }
        state: ExecutionState | GraphState
        if isinstance(engine, GraphEngine):
            last = await self._take_turn(name, engine, message.context_id, task_id, deadline=common["deadline"])
            state, graph_commands = engine.start(**common, previous=last)
            commands: list[Any] = list(graph_commands)
        else:
            reuse: dict[str, Any] | None = None
            if retry is not None:
                reuse = await self._reuse(engine, retry)
            reused_from = str(retry.get("execution_id")) if retry else None
            state, dag_commands = engine.start(**common, reuse=reuse, reused_from=reused_from)
            commands = list(dag_commands)
        runner = make_runner(self.deps, engine, state, epoch=1, reply=reply)
        call_ids = runner.prepare(commands)
        timers = {timer_id: int(due * 1000) for timer_id, due in state.timers.items()}
        working = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
            history=[message.model_copy(update={"task_id": task_id, "context_id": context_id})],
            metadata={"execution_id": task_id, "workflow": name},
        )
        await self._save_definition(workflow.digest, workflow.definition)
        created = await self.store.create(
            task_id,
            owner=self.instance,
            state_json=runner.state.model_dump_json(),
            fields={
                "workflow": name,
                "digest": workflow.digest,
                "task_id": task_id,
                "context_id": context_id,
                "input": json.dumps(state.input, default=str),
                "reply": reply.model_dump_json(),
                "call_depth": state.call_depth,
                "reused_from": getattr(state, "reused_from", None) or "",
                **_final_fields(state),
            },
            nodes=_initial_records(runner),
            events=[c.model_dump_json(exclude={"kind"}) for c in commands if isinstance(c, EmitEvent)],
            timers=timers,
            task=working,
        )
        if created.canceled:
            await self._answer_canceled_before_start(name, task_id, context_id, reply, msg)
            return
        if not created.created:
            await self._attach(name, task_id, await self.store.record(task_id) or {}, reply, msg)
            return
        faults.crash_point("after_execution_create")
        # The WORKING task was written with the execution, so a callee asked about its caller finds it: the
        # first dispatches go out while the indexes are written, and the ack waits for both.
        sending = runner.send_dispatches(commands, call_ids, events=False)
        try:
            await asyncio.gather(
                self.store.index_created(task_id, workflow=name, status=created.status, timers=timers),
                *([sending] if sending is not None else []),
            )
        except BaseException:
            if sending is not None:
                sending.cancel()
            runner.drop_calls()
            raise
        commands = without_sent(commands, events=False)
        faults.crash_point("after_redis_commit_before_ack")
        await msg.ack()
        if reply.streaming and reply.reply_to:
            publisher = ReplyPublisher(self.bus, self.settings, agent=name, task_id=task_id, attempt=1)
            with contextlib.suppress(TransportError):
                await publisher.snapshot(reply.reply_to, request_id, working, 1)
        self.log.info("execution.started", execution_id=task_id, workflow=name, digest=workflow.digest[:12])
        self._launch(runner, commands, call_ids=call_ids)

    def _scheduled_graphs(self) -> dict[str, ScheduledGraph]:
        source = self.catalog.workflows  # a new dict after every scan that changed something
        if self._scheduled[0] is not source:
            self._scheduled = (source, scheduled_graphs(source.values()))
        return self._scheduled[1]

    async def start_run(self, graph: ScheduledGraph, execution_id: str, fire: datetime) -> bool | None:
        """Start a scheduled run with a given execution id (created NX) and drive it.

        Returns:
            ``True`` when this call created it, ``False`` when it already existed, ``None`` when this
            replica cannot start it now (shutting down, no free slot, workflow or branch not served).
        """
        workflow = self.catalog.workflows.get(graph.workflow)
        if workflow is None or self._stop.is_set() or self._free_slots() <= 0:
            return None
        if graph.branch is not None and not isinstance(workflow.definition, GraphDefinition):
            return None
        if await self.store.record(execution_id) is not None:
            return False
        engine = self.catalog.engine_for(workflow)
        if graph.branch is not None:
            assert isinstance(workflow.definition, GraphDefinition)
            engine = GraphEngine(workflow.definition, branch=graph.branch)  # a branch is its own graph
        context_id = nuid()
        state, commands = engine.start(
            execution_id=execution_id,
            input=graph.input,
            now=time.time(),
            digest=workflow.digest,
            task_id=execution_id,
            context_id=context_id,
        )
        reply = ReplyInfo()
        runner = make_runner(self.deps, engine, state, epoch=1, reply=reply)
        call_ids = runner.prepare(list[Any](commands))
        timers = {timer_id: int(due * 1000) for timer_id, due in state.timers.items()}
        working = Task(
            id=execution_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
            metadata={"execution_id": execution_id, "workflow": graph.workflow, "schedule": graph.id},
        )
        await self._save_definition(workflow.digest, workflow.definition)
        created = await self.store.create(
            execution_id,
            owner=self.instance,
            state_json=runner.state.model_dump_json(),
            fields={
                "workflow": graph.workflow,
                "digest": workflow.digest,
                "task_id": execution_id,
                "context_id": context_id,
                "input": json.dumps(state.input, default=str),
                "reply": reply.model_dump_json(),
                "call_depth": 0,
                "reused_from": "",
                "schedule": graph.id,
                "fire": int(fire.timestamp()),
                **_final_fields(state),
            },
            nodes=_initial_records(runner),
            events=[c.model_dump_json(exclude={"kind"}) for c in commands if isinstance(c, EmitEvent)],
            timers=timers,
            task=working,
        )
        if not created.created:
            return False
        faults.crash_point("after_execution_create")
        await self.store.index_created(execution_id, workflow=graph.workflow, status=created.status, timers=timers)
        self.log.info("execution.started", execution_id=execution_id, workflow=graph.workflow, schedule=graph.id)
        self._launch(runner, commands, call_ids=call_ids)
        return True

    async def _take_turn(
        self, name: str, engine: GraphEngine, context_id: str | None, task_id: str, *, deadline: float | None
    ) -> GraphState | None:
        """Serialise a conversational graph's turns on one contextId (SPEC §3.8) and return the previous turn.

        Waits (keeping the request alive, without burning deliveries) while the previous turn runs, then
        moves the context's turn pointer ``"{task} {previous task}"`` with a compare-and-set, so two turns
        can never start from the same state. A redelivered turn finds the pointer already its own.
        """
        if not engine.graph.is_conversational or not context_id:
            return None
        while True:
            pointer = await self.store.turn_pointer(name, context_id)
            current, before, taken_ms = _parse_turn_pointer(pointer)
            if current == task_id:
                return await self._turn_state(before)
            previous = await self._turn_state(current)
            # a turn that took the pointer a moment ago may not have written its state yet
            starting = previous is None and current != "" and time.time() * 1000 - taken_ms < TURN_START_GRACE * 1000
            if starting or (previous is not None and previous.status == "running"):
                if deadline is not None and time.time() > deadline:
                    raise TransportError(
                        codes.DEADLINE_EXCEEDED,
                        f"turn {previous.turn if previous else 'of task ' + current} of context {context_id} "
                        "was still running at this request's deadline",
                    )
                await asyncio.sleep(0.2)  # the running turn finishes first; the caller's request stays alive
                continue
            if previous is not None and previous.status == "paused":
                raise RpcError(
                    codes.UNSUPPORTED_OPERATION,
                    f"turn {previous.turn} of context {context_id} (task {previous.task_id}) is paused for a human; "
                    "resume it first",
                )
            if await self.store.take_turn(name, context_id, pointer, f"{task_id} {current} {int(time.time() * 1000)}"):
                return previous

    async def _turn_state(self, task_id: str) -> GraphState | None:
        raw = await self.store.state(task_id) if task_id else None
        return None if raw is None else GraphState.model_validate_json(raw)

    async def _resume(
        self, name: str, msg: WorkMsg, request_id: JsonRpcId, method: str, message: Message, reply_to: str
    ) -> None:
        """A SendMessage on a paused task: the human's answer ``{"decision", "data", "reason"?, "path"?}``."""
        task_id = str(message.task_id)
        record = await self.store.record(task_id)
        if record is None:
            raise TaskNotFound(task_id)
        status = record.get("status", "")
        if status != "paused":
            raise RpcError(
                codes.UNSUPPORTED_OPERATION,
                f"task {task_id} of workflow {name} is {status or 'unknown'}, not paused for a review; "
                "send a new message to start a run",
            )
        body = await self._input_of(message, ReplyInfo())
        try:
            event = ReviewAnswered.model_validate(body)
        except ValueError as e:
            raise RpcError(
                codes.INVALID_PARAMS,
                'a resume carries {"decision": "approve" | "edit" | "reject", "data": ..., "reason"?, "path"?}: '
                + str(e).splitlines()[0],
            ) from e
        if NODE_PATH_KEY not in (message.metadata or {}) and await self._forward_up(
            name, msg, request_id, message, record, event, reply_to
        ):
            return
        outcome, epoch = await self.store.acquire(task_id, self.instance)
        if outcome != "acquired":
            await msg.nak(delay=0.2)  # its owner is still letting it go (or another resume is applied)
            return
        token = f"{self.instance}:{epoch}"
        raw = await self.store.state(task_id)
        engine = await self._engine_for(record.get("digest", ""))
        if raw is None or engine is None:
            await self.store.release(task_id, token, handover=False)
            raise RpcError(codes.INTERNAL_ERROR, f"execution {task_id} cannot be resumed: its state is missing")
        old = ReplyInfo.model_validate_json(record.get("reply") or "{}")
        reply = ReplyInfo(
            reply_to=reply_to,
            request_id=request_id,
            streaming=method == codes.SEND_STREAMING_MESSAGE,
            node_request=old.node_request,
            headers={k: v for k, v in msg.headers.items() if k in h.PROPAGATED} or old.headers,
        )
        runner = make_runner(self.deps, engine, load_state(engine, raw), epoch=epoch, reply=reply)
        latest = await self.store.record(task_id) or {}
        if latest.get("cancel") == "1":
            runner.cancel()  # canceled while parked, before this resume took it: the cancellation wins next
        if latest.get("resumer") and NODE_PATH_KEY in (message.metadata or {}):
            runner.targets.append(latest["resumer"])  # who resumed at this leaf (see _forward_up)
            await self.store.set_fields(task_id, {"resumer": ""})
        try:
            state, commands = engine.step(runner.state, event, time.time())  # type: ignore[arg-type]
        except A2AMeshError as e:
            await self.store.park(task_id, token, _next_due_ms(runner.state.timers))
            raise RpcError(codes.INVALID_PARAMS, f"cannot resume {task_id}: {e}") from e
        ok = await runner.checkpoint(state, list(commands), [], extra={"reply": reply.model_dump_json()})
        await msg.ack()
        if not ok:
            return
        self.log.info("execution.resumed", execution_id=task_id, decision=event.decision, path=event.path)
        self._launch(runner, [])

    async def _forward_up(
        self,
        name: str,
        msg: WorkMsg,
        request_id: JsonRpcId,
        message: Message,
        record: dict[str, str],
        event: ReviewAnswered,
        reply_to: str,
    ) -> bool:
        """A resume sent to the leaf of a nested pause: hand it to the paused parent, which routes it back down.

        The parent's calling node then gets the leaf's result like any call's, so the parent carries on
        (a resume applied at the leaf alone would leave the parent paused). The resumer's reply subject
        is kept in the leaf's record (``resumer``): it gets the leaf's next answer (its final, or its
        next review). Returns False when there is no paused parent to go through (the leaf is resumed
        on its own).
        """
        parent = ReplyInfo.model_validate_json(record.get("reply") or "{}").node_request or {}
        parent_id, parent_workflow = parent.get("execution_id"), parent.get("workflow_name")
        node_path = parent.get("node_path")
        if not (parent_id and parent_workflow and node_path):
            return False
        if ((await self.store.record(str(parent_id))) or {}).get("status") != "paused":
            return False
        raw = await self.store.state(str(message.task_id))
        engine = await self._engine_for(record.get("digest", ""))
        if raw is None or engine is None:
            return False
        try:  # refuse a bad answer here, with the leaf's own words (the engines are pure: a dry run)
            engine.step(load_state(engine, raw), event, time.time())  # type: ignore[arg-type]
        except A2AMeshError as e:
            raise RpcError(codes.INVALID_PARAMS, f"cannot resume {message.task_id}: {e}") from e
        body = event.model_dump(mode="json", exclude={"kind"}, exclude_none=True)
        body["path"] = f"{node_path}/{event.path}" if event.path else str(node_path)
        if valid_reply_subject(self.bus, reply_to):
            # the leaf's task is INPUT_REQUIRED (no subscribers then): the resume coming down adds the target
            await self.store.set_fields(str(message.task_id), {"resumer": reply_to})
        up = Message(
            message_id=f"{message.message_id}:up",
            role=Role.USER,
            parts=[Part.of_data(body)],
            task_id=str(parent_id),
        )
        headers = {k: v for k, v in msg.headers.items() if k in h.PROPAGATED}
        call = await self.client.dispatch(str(parent_workflow), up, timeout=self.settings.call_timeout, headers=headers)
        await msg.ack()
        self.log.info("execution.resume_forwarded", execution_id=message.task_id, parent=parent_id, path=body["path"])

        async def refused() -> None:
            try:
                await call.result()
            except RpcError as e:  # the parent refused it: tell the resumer
                await self._send_error(name, reply_to, request_id, e, msg.num_delivered)
            except A2AMeshError:
                pass  # the parent's outcome is not the resumer's answer; the leaf's is

        self._spawn(refused())
        return True

    async def _save_definition(self, digest: str, definition: WorkflowDefinition | GraphDefinition) -> None:
        saved = self._saved_digests.get(digest)
        if saved is not None and time.time() - saved < 3600:
            return
        await self.store.save_definition(digest, definition.to_data())
        self._saved_digests[digest] = time.time()

    async def _attach(self, name: str, task_id: str, record: dict[str, str], reply: ReplyInfo, msg: WorkMsg) -> None:
        """A redelivered or re-sent request for an existing execution: follow it instead of starting another."""
        runner = self.runners.get(task_id)
        if runner is not None and reply.reply_to and reply.reply_to != runner.reply.reply_to:
            runner.targets.append(reply.reply_to)
        elif reply.reply_to and reply.reply_to != _stored_reply_to(record):
            view = await self.tasks.add_subscriber(task_id, reply.reply_to)
            if view.outcome == "terminal" and view.task is not None:
                publisher = ReplyPublisher(
                    self.bus, self.settings, agent=name, task_id=task_id, attempt=int(record.get("epoch", "1") or 1)
                )
                with contextlib.suppress(TransportError):
                    await publisher.final(reply.reply_to, reply.request_id, view.task, 1, streaming=False)
        await msg.ack()
        self.log.info("request.attached", execution_id=task_id, delivered=msg.num_delivered)

    async def _answer_canceled_before_start(
        self, name: str, task_id: str, context_id: str, reply: ReplyInfo, msg: WorkMsg
    ) -> None:
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp()),
            metadata={"workflow": name},
        )
        view = await self.tasks.write(task, name, self.instance, release=True)
        publisher = ReplyPublisher(self.bus, self.settings, agent=name, task_id=task_id, attempt=msg.num_delivered)
        for subject in {reply.reply_to, *view.subscribers} - {None, ""}:
            with contextlib.suppress(TransportError):
                primary = subject == reply.reply_to
                await publisher.final(
                    str(subject),
                    reply.request_id if primary else task_id,
                    task,
                    1,
                    streaming=primary and reply.streaming,
                )
        await msg.ack()

    async def _input_of(self, message: Message, reply: ReplyInfo) -> Any:
        for part in message.parts:
            if part.data is not None and not (isinstance(part.data, dict) and part.data.get("type") in CONTROL_TYPES):
                return part.data
        for i, part in enumerate(message.parts):
            if part.url is not None and part.url.startswith("artifact://"):
                try:
                    stored = await self.artifacts.load_uri(part.url, user=reply.headers.get(h.USER))
                except ArtifactError as e:  # the caller's URL names nothing readable: its mistake, not ours
                    raise RpcError(
                        codes.INVALID_PARAMS, f"invalid params of SendMessage: params.message.parts[{i}].url: {e}"
                    ) from e
                return stored.value
        return {"text": message.text()}

    async def _reuse(self, engine: Engine, retry: dict[str, Any]) -> dict[str, Any]:
        """Outputs of the earlier execution's completed DAG nodes, minus ``from_node`` and what follows it."""
        old_id = str(retry.get("execution_id") or "")
        raw = await self.store.state(old_id)
        if raw is None:
            raise RpcError(codes.INVALID_PARAMS, f"retry: execution {old_id!r} not found")
        old = ExecutionState.model_validate_json(raw)
        definition = engine.definition
        excluded: set[str] = set()
        start = retry.get("from_node")
        if start:
            if not definition.has_node(str(start)):
                raise RpcError(codes.INVALID_PARAMS, f"retry: workflow {engine.name} has no node {start!r}")
            pending = [str(start)]
            while pending:
                node_id = pending.pop()
                if node_id not in excluded:
                    excluded.add(node_id)
                    pending.extend(definition.dependents_of(node_id))
        reuse: dict[str, Any] = {}
        for node_id in engine.order:
            run = old.nodes.get(node_id)
            if run is None or run.status is not NodeStatus.COMPLETED or node_id in excluded:
                continue
            reuse[node_id] = run.output
            node = definition.node(node_id)
            if isinstance(node, LoopNode) and node.node in old.outputs:
                reuse[node.node] = old.outputs[node.node]
        return reuse

    # --- runners -----------------------------------------------------------------------------

    def _launch(
        self,
        runner: ExecutionRunner,
        commands: list[Any],
        *,
        call_ids: dict[str, str] | None = None,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        execution_id = runner.execution_id
        self.runners[execution_id] = runner

        initial: list[Any] = [commands, call_ids]  # handed over once, not kept by this closure

        async def drive() -> None:
            try:
                if before is not None:
                    await before()
                await runner.run(initial.pop(0), call_ids=initial.pop(0))
            except Exception as e:
                # e.g. the final could not be published: the finished execution stays indexed for a takeover,
                # whose retries are bounded (_retry_final)
                self.log.warning("execution.driver_failed", execution_id=execution_id, error=str(e) or repr(e))
            finally:
                if self.runners.get(execution_id) is runner:
                    del self.runners[execution_id]
                self._drivers.pop(execution_id, None)
                for served in self.served.values():
                    served.consumer.wake()

        self._drivers[execution_id] = asyncio.create_task(drive(), name=f"exec-{execution_id}")

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_ttl / 3)
            tokens = {i: r.token for i, r in self.runners.items() if not r.lost and not r.state.finished}
            if not tokens:
                continue
            faults.crash_point("before_lease_renew")
            try:
                held = await self.store.renew(tokens)
            except Exception as e:
                self.log.warning("lease.renew_failed", error=str(e) or type(e).__name__)
                continue
            for execution_id, ok in held.items():
                runner = self.runners.get(execution_id)
                if not ok and runner is not None:
                    self.log.warning("execution.lease_lost", execution_id=execution_id)
                    runner.lost = True
                    runner.inbox.put_nowait(_WAKE)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            try:
                await self.tick()
            except Exception as e:
                self.log.warning("executor.tick_failed", error=str(e) or type(e).__name__)

    async def tick(self) -> None:
        """Fire due schedules and due timers of owned executions; take over executions whose lease expired."""
        if not self._stop.is_set():
            await self.scheduler.tick(self._scheduled_graphs())
        for execution_id in await self.store.due():
            runner = self.runners.get(execution_id)
            if runner is not None:
                await self.store.reindex_timers(execution_id, runner.poke())
            elif not self._stop.is_set() and self._free_slots() > 0:
                await self.adopt(execution_id)  # a parked (paused) execution whose review timer is due
        if self._free_slots() <= 0 or self._stop.is_set():
            return
        for execution_id in await self.store.orphaned():
            if execution_id not in self.runners and self._free_slots() > 0:
                await self.adopt(execution_id)

    async def adopt(self, execution_id: str) -> bool:
        """Take over an execution whose lease expired (or answer a finished one that never answered)."""
        outcome, epoch = await self.store.acquire(execution_id, self.instance)
        if outcome == "finished":
            record = await self.store.record(execution_id) or {}
            if record.get("final_published") != "1":
                await self._retry_final(execution_id, record)
            else:
                await self.store.mark_published(execution_id)  # a stray takeover entry: drop it
            return False
        if outcome != "acquired":
            return False
        record = await self.store.record(execution_id) or {}
        workflow = record.get("workflow", "")
        if workflow:
            # its creator may have died between the create and the listing entries (the lease entry goes
            # with the create): written again, the ones already there kept
            await self.store.index_created(
                execution_id, workflow=workflow, status=record.get("status", "running"), timers={}, repair=True
            )
        raw = await self.store.state(execution_id)
        engine = await self._engine_for(record.get("digest", ""))
        if raw is None or engine is None:
            self.log.error("execution.cannot_resume", execution_id=execution_id, digest=record.get("digest"))
            await self.store.release(execution_id, f"{self.instance}:{epoch}", handover=False)
            return False
        state = load_state(engine, raw)
        if isinstance(state, GraphState) and isinstance(engine, GraphEngine) and state.branch != engine.branch:
            engine = GraphEngine(engine.root, branch=state.branch)  # a scheduled branch run
        reply = ReplyInfo.model_validate_json(record.get("reply") or "{}")
        runner = make_runner(self.deps, engine, state, epoch=epoch, reply=reply)
        if record.get("cancel") == "1":
            runner.cancel()
        next_due = min(state.timers.values(), default=None)
        await self.store.reindex_timers(execution_id, None if next_due is None else int(next_due * 1000))
        self.log.info("execution.adopted", execution_id=execution_id, epoch=epoch, paused=runner.parked)
        if runner.parked:
            # a paused execution taken back for a due review timer, or one whose pause was not answered yet
            runner.poke()
            self._launch(runner, [], before=runner.republish_pause)
        else:
            self._launch(runner, [], before=runner.resume_calls)
        return True

    async def _retry_final(self, execution_id: str, record: dict[str, str]) -> None:
        """Publish the answer of a finished execution that was never answered: a few tries with backoff, then
        give up with one log line (the final task stays in Redis, where GetTask answers it)."""
        tries, next_at = self._final_tries.get(execution_id, (0, 0.0))
        if time.monotonic() < next_at:
            return
        try:
            await self._publish_orphaned_final(execution_id, record)
        except TransportError as e:
            tries += 1
            if tries < self.final_reply_tries:
                delay = min(self.final_reply_backoff * 2 ** (tries - 1), FINAL_REPLY_MAX_BACKOFF)
                self._final_tries[execution_id] = (tries, time.monotonic() + delay)
                return
            self._final_tries.pop(execution_id, None)
            self.log.error(
                "execution.final_undeliverable",
                execution_id=execution_id,
                workflow=record.get("workflow"),
                reply_to=_stored_reply_to(record),
                tries=tries,
                error=str(e),
            )
            await self.store.mark_published(execution_id)  # given up: no replica tries it again
            return
        self._final_tries.pop(execution_id, None)

    async def _engine_for(self, digest: str) -> Engine | GraphEngine | None:
        engine = self.catalog.engine(digest)
        if engine is not None:
            return engine
        data = await self.store.load_definition(digest)
        if data is None:
            return None
        if "entrypointNodeId" in data or data.get("format") in ("graph", "simple"):
            engine = GraphEngine(GraphDefinition.model_validate(data))
        else:
            engine = Engine(WorkflowDefinition.parse(data, source=f"definition {digest[:12]}"))
        self.catalog.remember(digest, engine)
        return engine

    async def _publish_orphaned_final(self, execution_id: str, record: dict[str, str]) -> None:
        raw = await self.store.state(execution_id)
        engine = await self._engine_for(record.get("digest", ""))
        if raw is None or engine is None:
            return
        reply = ReplyInfo.model_validate_json(record.get("reply") or "{}")
        runner = make_runner(
            self.deps, engine, load_state(engine, raw), epoch=int(record.get("epoch") or 1), reply=reply
        )
        await runner.publish_final()


def _initial_records(runner: ExecutionRunner) -> dict[str, str]:
    """Node records of a new execution (a graph's first node instance, a DAG's every node)."""
    state = runner.state
    if isinstance(state, ExecutionState):
        return {path: node_record(run) for path, run in state.nodes.items()}
    empty = state.model_copy(update={"pending": None})
    return runner.node_records(empty, state)


def _final_fields(state: ExecutionState | GraphState) -> dict[str, Any]:
    """Record fields of an execution that finished in its first step (its input was refused)."""
    if not state.finished:
        return {}
    return {
        "status": str(state.status),
        "error": state.error or "",
        "output": json.dumps(state.output, default=str),
        "finished": int((state.finished_at or time.time()) * 1000),
    }


def _next_due_ms(timers: dict[str, float]) -> int | None:
    due = min(timers.values(), default=None)
    return None if due is None else int(due * 1000)


def _node_request(message: Message) -> dict[str, Any] | None:
    """The ``workflow_node_request`` part, with the caller's node path (where a resume of ours goes up)."""
    request = control_part(message, NODE_REQUEST)
    path = (message.metadata or {}).get(NODE_PATH_KEY)
    if request is not None and isinstance(path, str) and path:
        return {**request, "node_path": path}
    return request


def _stored_reply_to(record: dict[str, str]) -> str | None:
    try:
        return ReplyInfo.model_validate_json(record.get("reply") or "{}").reply_to
    except ValueError:
        return None


def executor_service(folder: Path, settings: Settings, *, reload_interval: float = 1.0) -> ProcessService:
    """The process of one executor replica over a folder of definitions."""
    return ProcessService(
        settings,
        name="executor",
        build=lambda bus, redis: WorkflowExecutor(
            folder, bus=bus, redis=redis, settings=settings, reload_interval=reload_interval
        ),
    )
