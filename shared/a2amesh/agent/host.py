"""The agent host: the worker that serves one agent's work queue and control subject (SPEC §3.3–§3.7)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any

import structlog

from a2amesh import faults, metrics, tracing
from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.control import AgentControl
from a2amesh.agent.python_agent import AgentRuntime
from a2amesh.agent.results import spill_large_output
from a2amesh.agent.runs import Bounded as _Bounded
from a2amesh.agent.runs import Run as _Run
from a2amesh.agent.runs import Target as _Target
from a2amesh.agent.runtimes import Runtimes
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received, WorkMsg
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, already_taken, continuation_refusal
from a2amesh.config import Settings
from a2amesh.errors import (
    A2AMeshError,
    RpcError,
    StoreUnavailable,
    TaskNotFound,
    TransportError,
    transport_rpc_error,
)
from a2amesh.ids import instance_id, nuid, task_id_for
from a2amesh.lifecycle import STOP_LIMIT, Worker, cancel_and_wait, side_task
from a2amesh.logs import get_logger
from a2amesh.protocol import (
    Artifact,
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
from a2amesh.protocol.base import utc_timestamp
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.protocol.vocabulary import NODE_REQUEST
from a2amesh.registry import CardPublisher
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore
from a2amesh.store.conversations import ConversationStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.tasks import Subscriber, TaskRecordView, TaskStore
from a2amesh.worker.control import ControlPlane
from a2amesh.worker.decode import WorkRequest, control_part
from a2amesh.worker.deltas import delta_sink
from a2amesh.worker.endpoint import Endpoint
from a2amesh.worker.intake import Intake
from a2amesh.worker.replies import SNAPSHOT, ReplyPublisher, send_error


def result_artifact(output: Any, part: Part | None = None) -> Artifact:
    """``artifacts[0]`` of the result contract: a DataPart for JSON output, a text part for text (or ``part``)."""
    if part is None:
        part = Part.of_text(output) if isinstance(output, str) else Part.of_data(output)
    elif not isinstance(part, Part):
        return Artifact(artifact_id=nuid(), name="result", parts=[part])  # validated: the precise error
    return Artifact.built(artifact_id=nuid(), name="result", parts=[part])


class AgentHost(Worker):
    """Serves one agent: pulls its work queue, answers its control subject, keeps its card alive.

    ``run()`` returns when shutdown is done; ``shutdown()`` is idempotent and safe before ``run()``.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        *,
        bus: Bus,
        redis: Redis,
        settings: Settings,
        instance: str | None = None,
    ) -> None:
        super().__init__()
        self.bus = bus
        self.settings = settings
        self.name = runtime.definition.name
        self.instance = instance or instance_id(settings.reply_scope)
        self.concurrency = runtime.definition.max_concurrency or settings.max_concurrency
        self.tasks = TaskStore(
            redis, Keys(settings.namespace), retention=settings.task_retention, queued_ttl=settings.tasks_max_age
        )
        self.client = Client(bus, settings, instance=self.instance)
        keys = Keys(settings.namespace)
        self.artifacts = ArtifactStore(
            redis, keys, retention=settings.artifact_retention, max_bytes=settings.artifact_max_bytes
        )
        self.conversations = ConversationStore(redis, keys, retention=settings.task_retention)
        # outputs above this travel as artifact URLs (SPEC §3.5); a node's final carries its output twice
        # (artifacts[0] and workflow_node_result.output), so keep it at most a quarter of max_payload
        self.inline_threshold = min(settings.inline_threshold, max(bus.max_payload // 4, 1024))
        self.log = get_logger("agent", agent=self.name, instance=self.instance)
        self._runtimes = Runtimes(runtime, log=self.log)
        self._running: dict[str, _Run] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._finishing: set[asyncio.Task[Any]] = set()  # workers storing and answering a final: not cancelled
        self.intake = Intake(bus, settings, log=self.log, accept=self._execute)
        backend = AgentControl(
            self.tasks, agent=self.name, instance=self.instance, running=self._running, answer=self._answer_subscriber
        )
        self.control = ControlPlane(bus, settings, self.tasks, backend, log=self.log)
        self._endpoint: Endpoint | None = None
        self._claim_ttl = settings.ack_wait * 2 / 3
        # final writes bounded by ack_wait/3 (then retried), checked a few times per bound
        self._final_writes = _Bounded(settings.ack_wait / 12)
        self._claiming: set[WorkMsg] = set()  # deliveries waiting for their claim: the heartbeat keeps them alive
        self.fenced = 0
        """Runs stopped because another replica took their task over (each logged once, ``task.fenced``)."""
        self._publisher: CardPublisher | None = None

    @property
    def runtime(self) -> AgentRuntime:
        """The runtime new tasks run on."""
        return self._runtimes.current

    async def replace_runtime(self, runtime: AgentRuntime) -> None:
        """Serve new tasks with ``runtime`` (a new version of the same agent) and publish its card; tasks
        already running finish on the runtime they started with, which is closed after the last of them.
        Concurrency stays as it was."""
        await self._runtimes.replace(runtime)
        if self._publisher is not None:
            self._publisher.card = runtime.card(self.settings.namespace)
            await self._publisher.refresh()

    # lifecycle
    async def run(self) -> None:
        """Serve until :meth:`shutdown`; then stop pulling, finish or hand back work, withdraw the card."""
        await init_mesh(self.bus, self.settings)
        await self.client.start()
        publisher = CardPublisher(
            self.bus,
            self.runtime.card(self.settings.namespace),
            instance=self.instance,
            card_ttl=self.settings.card_ttl,
        )

        async def on_control(msg: Received) -> None:
            await self.control.handle(msg, self.name)

        replicas = self.runtime.definition.replicas
        endpoint = Endpoint(
            self.bus,
            self.settings,
            publisher,
            on_control=on_control,
            start_work=self._start_worker,
            free=lambda: self.concurrency - len(self._workers),
            until=self._stop,
            max_ack_pending=max(replicas * self.concurrency * 2, 256),
        )
        self._endpoint = endpoint
        try:
            # the control plane's CancelTask answers still waiting are awaited on leaving: their tasks have
            # finished or been handed back by then, so each answers at once
            async with self.control:
                await self._serve(endpoint)
        finally:
            await endpoint.withdraw()
            await self.client.close()
            await self.tasks.aclose()
            await self._runtimes.aclose()
            self._stopped.set()
            self.log.info("agent.stopped")

    async def _serve(self, endpoint: Endpoint) -> None:
        """Serve through ``endpoint`` until asked to stop; leave it in the order shutdown needs: stop pulling
        (queued messages nak'ed), drain the workers (finish or hand back), then stop the heartbeats and
        unsubscribe the control subject (so a CancelTask of a draining task is still answered)."""
        await endpoint.start()
        self._publisher = endpoint.publisher
        try:
            async with side_task(self._heartbeat(), name=f"{self.name}-task-heartbeat"):
                self.log.info("agent.ready", concurrency=self.concurrency)
                self.ready.set()
                try:
                    await endpoint.pulled()
                finally:
                    await endpoint.stop_pulling()
                    await self._drain_workers()
        finally:
            await endpoint.close()

    async def _drain_workers(self) -> None:
        if self._workers:
            self.log.info("agent.draining", running=len(self._workers), grace=self.settings.shutdown_grace)
            _, pending = await asyncio.wait(set(self._workers), timeout=self.settings.shutdown_grace)
            for t in pending:
                if t not in self._finishing:
                    t.cancel()  # handed back; one storing its final is left to finish it
            if pending:
                await asyncio.wait(pending, timeout=5)

    def _start_worker(self, msg: WorkMsg) -> None:
        # a task of its own per message, not a Background's: :meth:`_worker_done` is the one callback it needs
        # (the exception named in tests/unit/test_background_tasks.py)
        worker = asyncio.create_task(self.intake.handle(msg, self.name))
        self._workers.add(worker)
        worker.add_done_callback(self._worker_done)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        self._workers.discard(task)
        if self._endpoint is not None:
            self._endpoint.wake()
        if not task.cancelled() and task.exception() is not None:
            self.log.error("agent.worker_crashed", error=repr(task.exception()))

    # replies
    async def _send_error(
        self, reply_to: str | None, request_id: JsonRpcId, error: RpcError, attempt: int, seq: int = 1
    ) -> None:
        await send_error(
            self.bus,
            self.settings,
            agent=self.name,
            reply_to=reply_to,
            request_id=request_id,
            error=error,
            attempt=attempt,
            seq=seq,
        )

    async def _publish_final(self, run: _Run) -> None:
        """The final to every target (:meth:`ReplyPublisher.answer`); the Task answers reuse its record's bytes."""
        run.seq = await run.publisher.answer(
            run.targets,
            run.task,
            run.seq,
            streaming=run.streaming,
            task_body=lambda t: run.task_result(t.answer_id, run.history_length if t.primary else None),
        )

    # work
    async def _execute(self, msg: WorkMsg, request: WorkRequest) -> None:
        """Claim and run a valid request (the intake's ``accept``); settles ``msg`` unless another replica runs it."""
        message = request.message
        attempt = msg.num_delivered
        if metrics.enabled:
            metrics.task_received(self.name, attempt, *msg.queue_info(), time.time())
        picked_up = time.monotonic()
        if attempt > 1:
            self.log.info("task.redelivered", message_id=message.message_id, attempt=attempt)
        history: list[Message] = []
        running = self._running.get(message.task_id or task_id_for(self.name, message.message_id))
        if running is not None:
            last = (running.task.history or [])[-1:]
            same = bool(last) and last[0].message_id == message.message_id and last[0].parts == message.parts
            if same and not running.final_stored:
                await self._follow_run(running, msg, request)  # the same request: a resend, or a redelivery
                return
            await running.finished.wait()  # the run before this request is ending here: let it end first
        continues = bool(message.task_id)
        if message.task_id:
            existing = await self.tasks.get(message.task_id)
            if existing is None:
                raise TaskNotFound(message.task_id)
            if already_taken(existing, message):
                # a resend of a message the task took: its caller follows the task (its next answer, or the one
                # stored already), instead of it continuing the task again
                await self._subscribe_caller(message.task_id, msg, Subscriber(request.reply_to, request.request_id))
                return
            refusal = continuation_refusal(existing, message)
            if refusal is not None:
                raise refusal
            task_id = message.task_id
            context_id = message.context_id or existing.context_id or nuid()
            history = list(existing.history or [])
        else:
            task_id = task_id_for(self.name, message.message_id)
            context_id = message.context_id or nuid()
        current = self._running.get(task_id)
        if current is not None and current.msg is not None and not current.final_stored and not current.fenced:
            # redelivered to the replica still working on it (its in-progress acks came late: a starved loop):
            # the run goes on, with the newest delivery kept alive and acked
            current.msg = msg
            if current.add_target(Subscriber(request.reply_to, request.request_id)):
                self.log.info("task.follow_redelivery", task_id=task_id)
            return
        message.task_id, message.context_id = task_id, context_id  # the request's own copy, decoded for this run
        initial = Task.built(  # of validated parts: the request's message, the stored history, ids of ours
            id=task_id,
            context_id=context_id,
            status=TaskStatus.built(state=TaskState.WORKING, timestamp=utc_timestamp()),
            history=[*history, message],
        )
        run = _Run(
            task=initial,
            msg=msg,
            request_id=request.request_id,
            streaming=request.streaming,
            attempt=attempt,
            targets=[_Target(request.reply_to, primary=True, answer_id=request.request_id)],
            publisher=ReplyPublisher(self.bus, self.settings, agent=self.name, task_id=task_id, attempt=attempt),
            history_length=request.history_length,
            deadline=request.deadline,
            call_depth=request.call_depth,
            continues=continues,
        )
        self._running[task_id] = run
        # every log line of this task (ours and the handler's) carries its ids; set and reset by token, which
        # restores what was bound before without copying the whole context as bound_contextvars does
        tokens = structlog.contextvars.bind_contextvars(agent=self.name, task_id=task_id, context_id=context_id)
        try:
            with tracing.task_span(self.name, task_id, attempt, msg.headers.get(h.TRACEPARENT)) as span:
                await self._claim_and_run(run, history)
                if span is not None:
                    tracing.task_done(span, run.task.status.state.value)
            if metrics.enabled and run.final_stored:
                metrics.task_finished(self.name, run.task.status.state.value, time.monotonic() - picked_up)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)
            self._running.pop(task_id, None)
            run.finished.set()

    async def _claim_and_run(self, run: _Run, history: list[Message]) -> None:
        assert run.msg is not None
        msg = run.msg
        self._claiming.add(msg)  # Redis may be slow or paused: the heartbeat's in-progress acks keep it
        try:
            view = await self.tasks.claim(run.task, self.name, self.instance, self._claim_ttl)
        finally:
            self._claiming.discard(msg)
        for s in view.subscribers:
            run.add_target(s)
        run.fence = view.fence
        if view.outcome == "done":
            # a redelivered or re-sent request for a finished task: its caller gets the stored final again,
            # answering this request (its id); subscribers get it with their own
            assert view.task is not None
            message = (run.task.history or [])[-1]
            if run.continues and not already_taken(view.task, message):
                # a continuation that the task did not take (it was canceled or finished meanwhile): refused as
                # one sent after that would be
                refusal = continuation_refusal(view.task, message)
                if refusal is not None:
                    raise refusal
            run.task = await self.tasks.complete_canceled(view.task, run.task)
            try:
                await self._publish_final(run)
            except TransportError as e:  # NATS away: the final stays in Redis, where GetTask answers it
                self.log.warning("reply.republish_failed", subject=run.targets[0].subject, error=str(e))
            await msg.ack()
            return
        if view.outcome == "busy":
            self.log.info("task.claimed_elsewhere", task_id=run.task.id, attempt=run.attempt)
            await self._subscribe_caller(run.task.id, msg, Subscriber(run.targets[0].subject, run.request_id))
            return
        if view.outcome == "canceled":
            await self._finish_canceled(run)
            return
        if view.state is not None and view.state.interrupted and view.task is not None:
            # the stored history (as of the claim), then this message (the last of the history read before it)
            latest = (run.task.history or [])[-1:]
            run.task = run.task.model_copy(update={"history": [*(view.task.history or []), *latest]})
            # WORKING from now on: GetTask says so, and a resend of this message follows the run instead of being
            # answered the interrupted task it continues
            await self.tasks.write(run.task, self.name, self.instance, release=False, fence=run.fence)
        if msg.num_delivered >= self.settings.max_deliver:
            await self._fail_max_deliveries(run, msg)
            return
        faults.crash_point("after_claim")
        if run.streaming:
            snapshot = StreamResponse(task=run.task.with_history(run.history_length))
            run.seq += 1
            await run.publisher.events(run.targets, snapshot, run.seq, streaming=True, what=SNAPSHOT)
        else:
            for target in run.targets[1:]:  # subscribed while the task was queued: the task comes first
                try:
                    await run.publisher.snapshot(target.subject, target.answer_id, run.task, run.seq)
                except TransportError:
                    self.log.warning("reply.subscriber_failed", subject=target.subject)
        outcome = await self._work(run, history)
        if outcome is None:
            return  # shutdown (handed back), or fenced: another replica holds the task now
        await self._finish(run, outcome)

    async def _work(self, run: _Run, history: list[Message]) -> TaskOutcome | None:
        assert run.msg is not None
        last = run.task.history[-1] if run.task.history else None
        assert last is not None
        node_req = control_part(last, NODE_REQUEST) or {}

        ctx = TaskContext(
            agent=self.name,
            task_id=run.task.id,
            context_id=run.task.context_id or "",
            message=last,
            attempt=run.attempt,
            deadline=run.deadline,
            call_depth=run.call_depth,
            max_call_depth=self.settings.max_call_depth,
            headers={k: v for k, v in run.msg.headers.items() if k in h.PROPAGATED},
            client=self.client,
            emitter=lambda parts, meta: self._emit_progress(run, parts, meta),
            history=list(run.task.history[:-1]) if run.task.history else history,
            execution_id=node_req.get("execution_id"),
            node_id=node_req.get("node_id"),
            artifacts=self.artifacts,
            task_store=self.tasks,
            conversations=self.conversations,
            delta=delta_sink(
                self.bus,
                reply_subject=run.targets[0].subject,
                agent=self.name,
                task_id=run.task.id,
                context_id=run.task.context_id or "",
            )
            if run.streaming or node_req.get("stream_deltas") is True  # a workflow relays them to its caller
            else None,
            inline_threshold=self.inline_threshold,
            namespace=self.settings.namespace,
            fence_token=run.fence,
            fencer=functools.partial(self._still_holds, run),
        )
        runtime = self._runtimes.acquire()  # the task finishes on it even if the agent is replaced meanwhile
        span = tracing.handler_span(self.name, run.task.id) if tracing.enabled else None
        # the handler's task starts with its span current (None: the task copies the current context); owned by
        # this call (awaited through ``settled``, stopped by _stop_handler): no owner object, no extra callback
        # per task (the exception named in tests/unit/test_background_tasks.py)
        work = asyncio.create_task(runtime.run(ctx), name=f"task-{run.task.id}", context=tracing.context_with(span))
        run.working = True
        # The first of: the work ends, a cancel request, the deadline. Callbacks on one future rather than
        # asyncio.wait (which builds a waiter, a callback per awaitable and a timer for every task).
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[str] = loop.create_future()

        def settle(why: str) -> None:
            if not settled.done():
                settled.set_result(why)

        def on_cancel(_: Any) -> None:
            settle("cancel")

        work.add_done_callback(lambda _: settle("done"))
        run.cancel_requested.add_done_callback(on_cancel)
        timer = (
            None
            if ctx.deadline is None
            else loop.call_at(loop.time() + max(ctx.deadline - time.time(), 0.001), settle, "deadline")
        )
        try:
            why = await settled
            if why == "done" or (work.done() and not work.cancelled()):
                return work.result()
            if why == "cancel":
                ctx.cancelled.set()
            await self._stop_handler(run, work)
            if run.fenced:
                return None  # taken over by another replica (the heartbeat found the claim lost): not ours to end
            if why == "cancel":
                return TaskOutcome(TaskState.CANCELED, message="canceled by request")
            return TaskOutcome(TaskState.FAILED, message=f"{codes.DEADLINE_EXCEEDED}: the task ran past its deadline")
        except asyncio.CancelledError:
            # Shutdown, not a caller's cancel: hand the message back for another replica.
            await self._stop_handler(run, work)
            with contextlib.suppress(Exception):
                await asyncio.shield(self._hand_back(run))
            raise
        except StoreUnavailable:
            raise  # Redis away: the intake hands the request back (redelivered, not failed)
        except Exception as e:
            self.log.exception("task.crashed", task_id=run.task.id)
            return TaskOutcome(TaskState.FAILED, message=f"internal error: {type(e).__name__}: {e}")
        finally:
            tracing.end(span)
            run.cancel_requested.remove_done_callback(on_cancel)
            if timer is not None:
                timer.cancel()
            self._runtimes.release(runtime)

    async def _still_holds(self, run: _Run) -> bool:
        """``ctx.fence()``: whether this run still holds its task, its claim renewed. A short Redis outage (a
        restart) is ridden out for a claim's TTL, a claim that lapsed meanwhile with nobody taking over being
        taken back; past that, StoreUnavailable hands the task back."""
        give_up = time.monotonic() + self._claim_ttl
        pause = 0.05
        while True:
            if run.fenced:
                return False
            try:
                return await self.tasks.still_owner(run.task.id, self.instance, self._claim_ttl, run.fence)
            except StoreUnavailable:
                if time.monotonic() + pause > give_up:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _stop_handler(self, run: _Run, work: asyncio.Task[TaskOutcome]) -> None:
        if not await cancel_and_wait(work, limit=STOP_LIMIT):
            self.log.warning("task.handler_left_running", task_id=run.task.id, waited=STOP_LIMIT)

    async def _hand_back(self, run: _Run) -> None:
        assert run.msg is not None
        view = await self.tasks.write(run.task, self.name, self.instance, release=True, fence=run.fence)
        if view.outcome == "fenced":
            self._fence_off(run, "hand_back")
            return
        await run.msg.nak()
        self.log.info("task.handed_back", task_id=run.task.id)

    async def _heartbeat(self) -> None:
        """Every ack_wait/3: in-progress acks for the running tasks, and their claims renewed in one round trip.

        One loop for all tasks (not a task each): a host running thousands of tasks sends one pipeline. The loop
        keeps its rate while the renewals are slow (Redis failing over): a renewal is bounded by what is left of
        the period, so the in-progress acks never come further apart than ack_wait/3 and a sweep.
        """
        loop = asyncio.get_running_loop()
        period = self.settings.ack_wait / 3
        due = loop.time()
        while True:
            due = max(due + period, loop.time())
            await asyncio.sleep(due - loop.time())
            for claiming in list(self._claiming):
                with contextlib.suppress(Exception):
                    await claiming.in_progress()
            runs = [r for r in self._running.values() if r.working and r.msg is not None]
            if not runs:
                continue
            faults.crash_point("before_claim_renew")
            for run in runs:
                assert run.msg is not None
                with contextlib.suppress(Exception):
                    await run.msg.in_progress()
            try:
                # bounded, so a paused Redis never delays the next in-progress ack past ack_wait
                async with asyncio.timeout_at(due + period):
                    lost, canceled = await self.tasks.renew(
                        [r.task.id for r in runs], self.instance, self._claim_ttl, {r.task.id: r.fence for r in runs}
                    )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("task.heartbeat_failed", running=len(runs), error=str(e) or type(e).__name__)
                continue
            for run in runs:
                if run.task.id in lost:
                    self._fence_off(run, "claim_renew")
                    run.request_cancel()  # its handler is stopped; nothing of it is stored or answered
                elif run.task.id in canceled:
                    run.request_cancel()

    async def _fail_max_deliveries(self, run: _Run, msg: WorkMsg) -> None:
        """A task delivered ``max_deliver`` times: failed, stored (fenced), answered with the error, terminated."""
        err = transport_rpc_error(
            codes.MAX_DELIVERIES,
            f"task {run.task.id} was delivered {msg.num_delivered} times without finishing "
            f"(max_deliver {self.settings.max_deliver}); it is failed and will not be delivered again",
        )
        run.task = self._final_task(run.task, TaskOutcome(TaskState.FAILED, message=str(err)))
        if not await self._store_fenced(run, "max_deliveries"):
            return
        await self._send_error(run.targets[0].subject, run.request_id, err, run.attempt)
        for t in run.targets[1:]:
            await self._send_error(t.subject, t.answer_id, err, run.attempt)
        await msg.term()

    async def _store_fenced(self, run: _Run, where: str) -> bool:
        """Store ``run.task`` as its final with the claim's token; False when fenced (counted, logged once)."""
        view = await self.tasks.write(run.task, self.name, self.instance, release=True, fence=run.fence)
        if view.outcome == "fenced":
            self._fence_off(run, where)
            return False
        return True

    def _fence_off(self, run: _Run, where: str) -> None:
        """Another replica took ``run``'s task over: stop storing and answering anything of it (counted and
        logged once). Its delivery is left alone: the new owner holds the task's newer delivery."""
        if run.fenced:
            return
        run.fenced = True
        self.fenced += 1
        if metrics.enabled:
            metrics.fenced("agent")
        self.log.warning("task.fenced", task_id=run.task.id, fence=run.fence, at=where, fenced_total=self.fenced)

    async def _emit_progress(self, run: _Run, parts: list[Part], metadata: dict[str, Any] | None) -> None:
        if not run.has_progress_readers:
            return  # build nothing that would be dropped
        status = TaskStatus(
            state=TaskState.WORKING,
            timestamp=utc_timestamp(),
            message=Message(
                message_id=nuid(), role=Role.AGENT, parts=parts, task_id=run.task.id, context_id=run.task.context_id
            )
            if parts
            else None,
        )
        ev = TaskStatusUpdateEvent(
            task_id=run.task.id, context_id=run.task.context_id, status=status, metadata=metadata
        )
        run.seq += 1
        await run.publisher.events(run.targets, StreamResponse(status_update=ev), run.seq, streaming=run.streaming)

    def _final_task(self, task: Task, outcome: TaskOutcome) -> Task:
        parts: list[Part] = []
        if outcome.message:
            parts.append(Part.of_text(outcome.message))
        parts.extend(outcome.status_parts)
        state = outcome.state if type(outcome.state) is TaskState else TaskState(outcome.state)
        if parts:
            message = Message(
                message_id=nuid(), role=Role.AGENT, parts=parts, task_id=task.id, context_id=task.context_id
            )
            status = TaskStatus.built(state=state, timestamp=utc_timestamp(), message=message)
        else:
            status = TaskStatus.built(state=state, timestamp=utc_timestamp())
        artifacts = None
        if outcome.output is not None and outcome.state in (TaskState.COMPLETED, TaskState.INPUT_REQUIRED):
            artifacts = [result_artifact(outcome.output, outcome.result_part)]
        metadata = {**(task.metadata or {}), **(outcome.metadata or {})} or None
        return task.updated(status=status, artifacts=artifacts, metadata=metadata)

    async def _finish(self, run: _Run, outcome: TaskOutcome) -> None:
        assert run.msg is not None
        outcome = await self._spill(run, outcome)
        run.task = self._final_task(run.task, outcome)
        # a shutdown must not cut the final off half way: it waits for workers storing and answering a final
        # rather than cancelling them (see _drain_workers; a shield would cost a task and a future per node)
        worker = asyncio.current_task()
        assert worker is not None
        self._finishing.add(worker)
        try:
            await self._store_and_answer(run)
        finally:
            self._finishing.discard(worker)

    async def _finish_canceled(self, run: _Run) -> None:
        """Store CANCELED a task claimed with a cancel mark and no final: its owner stopped holding it before
        it stored one (SIGKILLed, say). The replicas that got that CancelTask left it to the owner, so it is
        answered here too."""
        await self._finish(run, TaskOutcome(TaskState.CANCELED, message="canceled before it started"))
        if run.final_stored:
            for canceller in await self.tasks.cancellers(run.task.id):
                await self.control.answer_canceller(canceller, self.name, run.task)

    async def _store_and_answer(self, run: _Run) -> None:
        assert run.msg is not None
        record = run.task.to_json_bytes()  # the stored record and the answers' task: one encoding
        view = await self._write_final(run, record)
        run.working = False
        if view.outcome == "fenced":
            self._fence_off(run, "final_write")
            return  # the task is another replica's now: its final is that replica's to store and answer
        run.final_stored = True
        if view.outcome == "terminal" and view.task is not None:
            run.task = view.task  # an earlier final stands: answer with it
        else:
            run.encoded = (run.task, record)
        for s in view.subscribers:
            run.add_target(s)
        faults.crash_point("after_final_write")
        try:
            await self._publish_final(run)
        except TransportError as e:
            # NATS away: the final is stored, so the redelivery re-publishes it (never runs the work again)
            self.log.warning("task.final_publish_failed", task_id=run.task.id, error=str(e))
            with contextlib.suppress(Exception):
                await run.msg.nak(delay=1)
            return
        faults.crash_point("after_final_publish_before_ack")
        await run.msg.ack()
        self.log.info("task.finished", task_id=run.task.id, state=run.task.status.state.value, attempt=run.attempt)

    async def _write_final(self, run: _Run, record: bytes) -> TaskRecordView:
        """Store the final task, retrying while Redis is unreachable.

        The delivery is kept alive meanwhile (in-progress acks): a redelivery would run the work again.
        """
        assert run.msg is not None
        delay = 0.2
        while True:
            try:
                async with self._final_writes.bounded(self.settings.ack_wait / 3):
                    return await self.tasks.write(
                        run.task, self.name, self.instance, release=True, record=record, fence=run.fence
                    )
            except (StoreUnavailable, TimeoutError) as e:
                self.log.warning("task.final_write_retry", task_id=run.task.id, error=str(e) or type(e).__name__)
                with contextlib.suppress(Exception):
                    await run.msg.in_progress()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.ack_wait / 3)

    async def _spill(self, run: _Run, outcome: TaskOutcome) -> TaskOutcome:
        """Store an output above the inline threshold as an artifact; the result then carries its URL."""
        assert run.msg is not None
        try:
            return await spill_large_output(
                outcome,
                store=self.artifacts,
                scope=ArtifactScope(run.task.context_id or "", run.task.id),
                user=run.msg.headers.get(h.USER) or None,
                threshold=self.inline_threshold,
            )
        except StoreUnavailable:
            raise  # Redis away: the request is handed back, not failed
        except A2AMeshError as e:
            return TaskOutcome(TaskState.FAILED, message=f"the output could not be stored as an artifact: {e}")

    # resends
    async def _follow_run(self, run: _Run, msg: WorkMsg, request: WorkRequest) -> None:
        """A request for a task that runs here (a resend with a new ``Nats-Msg-Id``, or a redelivery): its caller
        follows that run, as one on another replica would, instead of running the task a second time."""
        await self._subscribe_caller(run.task.id, msg, Subscriber(request.reply_to, request.request_id))

    async def _subscribe_caller(self, task_id: str, msg: WorkMsg, subscriber: Subscriber) -> None:
        """Add the caller of a request whose task is running to its subscribers: it gets the final, with its own
        request id, from whoever stores it; a final stored already (or the interrupted task) it gets now."""
        view = await self.tasks.add_subscriber(task_id, subscriber)
        if view.outcome == "terminal" and view.task is not None:
            await self._answer_subscriber(subscriber, view.task, msg.num_delivered)
        if msg.num_delivered == 1 or view.outcome == "terminal":
            await msg.ack()  # a re-sent request: its caller now follows the running task
        # a redelivery while the owner still works is left to the owner's in-progress acks

    async def _answer_subscriber(self, subscriber: Subscriber, task: Task, attempt: int) -> None:
        publisher = ReplyPublisher(self.bus, self.settings, agent=self.name, task_id=task.id, attempt=attempt)
        try:
            await publisher.final(subscriber.subject, subscriber.answer_id(task.id), task, 0, streaming=False)
        except TransportError as e:  # NATS away: the final is stored, where GetTask answers it
            self.log.warning("reply.subscriber_failed", subject=subscriber.subject, error=str(e))
