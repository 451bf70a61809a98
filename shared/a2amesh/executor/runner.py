"""Drives one execution: feed events to the engine, checkpoint each step, then carry out its commands.

One :class:`ExecutionRunner` per execution this replica owns. It is the only writer of its
execution while its lease holds: events (node results, timers, cancellations) queue in its inbox and
are applied one batch at a time — step, one guarded Redis write, then the commands — so nothing is
dispatched twice and the execution finishes once. A write refused because the lease moved on stops
the runner without side effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from a2amesh import faults, metrics, tracing
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, StoreUnavailable
from a2amesh.executor.calls import NodeCalls
from a2amesh.executor.deltas import DeltaRelay
from a2amesh.executor.dispatch import (
    SEQ_OFFSET,
    CallOutcome,
    publish_event,
    result_event,
    stored_event,
)
from a2amesh.executor.finals import answer_all, final_task, paused_task
from a2amesh.executor.handlers import HANDLERS, CommandHandler
from a2amesh.ids import nuid
from a2amesh.jsontext import fields_json
from a2amesh.logs import get_logger
from a2amesh.mailbox import Mailbox
from a2amesh.protocol import (
    Message,
    Task,
)
from a2amesh.protocol.vocabulary import (
    CALL_CHAIN_KEY,
    REVIEW_REQUEST,
)
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import CommitResult, ExecutionStore
from a2amesh.store.tasks import Subscriber, TaskRecordView, TaskStore
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher
from a2amesh.workflow.engine_protocol import ExecutableEngine, RunState
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    Finish,
    NodeCall,
    RequestReview,
    SetTimer,
    TimerFired,
)

__all__ = ["CALL_CHAIN_KEY", "REVIEW_REQUEST", "ExecutionRunner", "RunnerDeps", "make_runner", "open_runner"]

StateT = TypeVar("StateT", bound=RunState)
C = TypeVar("C")


def without_sent(commands: Sequence[C], *, events: bool = True) -> list[C]:
    """The commands left once a step's dispatches, and with them its events unless ``events=False``, went
    out (:meth:`ExecutionRunner.send_dispatches`); all of them when the step dispatches nothing."""
    if not any(isinstance(c, NodeCall) for c in commands):
        return list(commands)
    sent = NodeCall | EmitEvent if events else NodeCall
    return [c for c in commands if not isinstance(c, sent)]


_EVENT_EXCLUDE = {"kind"}


def event_json(event: EmitEvent) -> str:
    """The event as the execution's record keeps it: ``model_dump_json(exclude={"kind"})``, by orjson (the same
    bytes in a third of the time; pydantic for what orjson does not take)."""
    fields = event.__dict__.copy()
    del fields["kind"]
    return fields_json(event, fields, _EVENT_EXCLUDE)


@dataclass
class FencedWrites:
    """Executions whose step write was refused by their lease epoch (another replica took them over while this
    one was paused or starved): each counted once, as an agent counts its fenced runs (``task.fenced``)."""

    count: int = 0


@dataclass
class RunnerDeps:
    """What a runner needs from its executor process."""

    bus: Bus
    client: Client
    store: ExecutionStore
    tasks: TaskStore
    artifacts: ArtifactStore
    settings: Settings
    instance: str
    handlers: Mapping[type[BaseModel], CommandHandler[Any]] = field(default_factory=lambda: HANDLERS)
    """How the commands engines leave to the executor (``io_commands``) are carried out, by type."""
    deltas: DeltaRelay | None = None
    """Passes token deltas of built-in model nodes on to streaming callers (None: no deltas are passed on)."""
    alive: Callable[[], bool] = field(default=lambda: True)
    """Whether the replica's presence surely still stands (:class:`~a2amesh.executor.presence.PresenceKeeper`);
    a runner takes no step once it may have lapsed."""
    fenced: FencedWrites = field(default_factory=FencedWrites)
    """The replica's count of executions fenced off by a stale lease epoch (``execution.fenced``)."""


def make_runner(
    deps: RunnerDeps, engine: ExecutableEngine[Any], state: RunState, *, epoch: int, reply: ReplyInfo
) -> ExecutionRunner[Any]:
    """The runner of a new execution (``state``: its first state, from ``engine.start``) of either format."""
    return ExecutionRunner(deps, engine, state, epoch=epoch, reply=reply)


def open_runner(
    deps: RunnerDeps, engine: ExecutableEngine[StateT], raw: str, *, epoch: int, reply: ReplyInfo
) -> ExecutionRunner[StateT]:
    """The runner of a checkpointed execution (``raw``: its stored state), with the engine that runs it."""
    state = engine.parse_state(raw)
    return ExecutionRunner(deps, engine.for_state(state), state, epoch=epoch, reply=reply)


class ExecutionRunner(Generic[StateT]):
    """Owns one execution while its lease holds, whatever its format (through :class:`ExecutableEngine`).

    Args:
        deps: the executor's connections and stores.
        engine: the engine of the execution's pinned definition.
        state: the last checkpointed state.
        epoch: the lease epoch this runner holds.
        reply: how the caller wants its answer.

    Raises:
        ConfigError: the engine leaves commands to the executor that no handler carries out.
    """

    def __init__(
        self, deps: RunnerDeps, engine: ExecutableEngine[StateT], state: StateT, *, epoch: int, reply: ReplyInfo
    ) -> None:
        missing = [kind.__name__ for kind in engine.io_commands if kind not in deps.handlers]
        if missing:
            raise ConfigError("executor", "handlers", f"no handler for {', '.join(missing)} ({engine.name})")
        self.deps = deps
        self.engine = engine
        self.state = state
        self.epoch = epoch
        self.token = f"{deps.instance}:{epoch}"
        self.reply = reply
        self.execution_id = state.execution_id
        self.task_id = state.task_id or state.execution_id
        self.inbox: Mailbox[BaseModel] = Mailbox()
        self.targets: list[Subscriber] = []
        """Who follows the execution besides its caller (SubscribeToTask, a streaming resend): progress and answers."""
        self.lost = False
        self.write_fenced = False
        """A step write of this runner was refused by the lease epoch (counted and logged once)."""
        self.fenced = False
        """Stopped because this replica's presence may have lapsed: its lease is handed over when it ends."""
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.final_task: Task | None = None
        self.history: list[Message] | None = None
        """The task's messages from its callers (its start, then each resume), as its answers carry them; None:
        not known here yet (a takeover), read from the task record when an answer is built."""
        self._stored_final: tuple[Task, TaskRecordView] | None = None  # written by the finishing commit
        self.calls = NodeCalls(self)
        self._positions: dict[str, int] | None = None
        """Ordinal of each node instance in the last split checkpoint written (None: write them all next)."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._usage_written: tuple[dict[str, int], str] = ({}, "{}")
        self._publisher = ReplyPublisher(
            deps.bus, deps.settings, agent=state.workflow, task_id=self.task_id, attempt=epoch
        )
        self.span = (
            tracing.execution_span(state.workflow, self.execution_id, epoch, reply.headers.get(h.TRACEPARENT))
            if tracing.enabled
            else None
        )
        """This runner's span (None when tracing is off): its node attempts are its children."""

    @property
    def log(self) -> Any:
        """This execution's logger (made when used: a runner that waits for hours keeps none)."""
        return get_logger("executor.run", execution_id=self.execution_id, workflow=self.state.workflow)

    # --- loop --------------------------------------------------------------------------------

    async def run(self, commands: Iterable[BaseModel] = (), *, call_ids: dict[str, str] | None = None) -> None:
        """Carry out the already-checkpointed ``commands``, then apply events until the execution ends."""
        try:
            for timer_id, due in self.state.timers.items():
                self._arm(timer_id, due)
            await self._carry(list(commands), call_ids)
            del commands, call_ids  # a runner may wait for hours: keep nothing it no longer needs
            while True:
                while not self.state.finished and not self.lost and not (self.parked and self.inbox.empty()):
                    await self.inbox.wait()
                    batch = self.inbox.take_all()
                    try:
                        await self._apply(batch)
                    except StoreUnavailable as e:
                        # Redis away: whether the step was written is unknown. Stop; the lease lapses and a
                        # replica (maybe this one) resumes from the checkpoint, re-dispatching unanswered calls.
                        self.log.warning("execution.store_unavailable", error=str(e) or type(e).__name__)
                        self.lost = True
                if not self.parked or self.lost or await self.park():
                    break
                # marked for cancellation while it paused: the lease is kept, and the cancellation applied here
                if self.inbox.empty():
                    self.cancel()
        finally:
            for task in self.calls.tracked.values():
                task.cancel()
            for handle in self._timers.values():
                handle.cancel()
            if self.calls.tracked:
                await asyncio.wait(set(self.calls.tracked.values()), timeout=5)
            if not self.finished.done():
                self.finished.set_result(None)

    def drop_calls(self) -> None:
        """Stop following the calls of a runner that will not run (its start failed)."""
        for task in self.calls.tracked.values():
            task.cancel()
        self.calls.tracked.clear()

    @property
    def parked(self) -> bool:
        """Paused for a human with nothing in flight: the runner lets the execution go until a resume or timer."""
        return str(self.state.status) == "paused"

    async def park(self) -> bool:
        """Release a paused execution: no lease, no slot; a resume or a due timer brings it back on any replica.

        Returns False, keeping the lease, when the execution is marked for cancellation: the runner applies it.
        """
        next_due = min(self.state.timers.values(), default=None)
        due_ms = None if next_due is None else int(next_due * 1000)
        if not await self.deps.store.park(self.execution_id, self.token, due_ms):
            return False
        self.log.info("execution.parked", timers=sorted(self.state.timers))
        return True

    def cancel(self, reason: str = "canceled by request") -> None:
        """Ask for cancellation (applied as the next event)."""
        self.inbox.put_nowait(CancelRequested(reason=reason))

    def poke(self) -> int | None:
        """Fire every due timer of the in-memory state; returns the next due time (ms) still armed."""
        now = time.time()
        upcoming = []
        for timer_id, due in self.state.timers.items():
            if due <= now:
                self.inbox.put_nowait(TimerFired(timer_id=timer_id))
            else:
                upcoming.append(due)
        return int(min(upcoming) * 1000) if upcoming else None

    def _arm(self, timer_id: str, due: float) -> None:
        old = self._timers.pop(timer_id, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        delay = max(due - time.time(), 0.0)
        self._timers[timer_id] = loop.call_later(delay, self._timer_fired, timer_id)

    def _timer_fired(self, timer_id: str) -> None:
        self.inbox.put_nowait(TimerFired(timer_id=timer_id))

    async def _apply(self, batch: list[BaseModel]) -> None:
        if not self.deps.alive():
            # this replica's presence may have lapsed: another one may be taking the execution over
            self.log.warning("execution.presence_lapsed")
            self.lost = self.fenced = True
            return
        step = self.engine.advance(self.state, batch, time.time)
        state = step.state
        if state is self.state or (not step.commands and state == self.state):
            return
        await self.checkpoint(state, step.commands, step.applied, touched=step.touched)

    def _fence_off(self, holder: str) -> None:
        """A step write was refused by the lease epoch: another replica holds the execution now. Nothing of the
        step was stored; the runner stops (counted and logged once per execution, ``execution.fenced``)."""
        self.lost = True
        if self.write_fenced:
            return
        self.write_fenced = True
        self.deps.fenced.count += 1
        if metrics.enabled:
            metrics.fenced("executor")
        self.log.warning("execution.fenced", epoch=self.epoch, holder=holder, fenced_total=self.deps.fenced.count)

    def prepare(self, commands: Sequence[BaseModel], state: StateT | None = None) -> dict[str, str]:
        """Mint the call id of every dispatch and record its reply subject in the state (before the write)."""
        target = self.state if state is None else state
        call_ids: dict[str, str] = {}
        for command in commands:
            if isinstance(command, NodeCall):
                call_ids[command.path] = call_id = nuid()
                subject = self.deps.bus.subjects.reply(self.deps.client.instance, command.agent, call_id)
                self.engine.set_reply_to(target, command.path, subject)
        return call_ids

    def state_json(self) -> str:
        """The whole state as JSON (an execution's first write)."""
        return self.engine.state_json(self.state)

    def initial_records(self) -> dict[str, str]:
        """The node records of a new execution."""
        return self.engine.initial_records(self.state)

    async def checkpoint(
        self,
        state: StateT,
        commands: Sequence[BaseModel],
        applied: list[str],
        *,
        extra: dict[str, Any] | None = None,
        touched: Iterable[str] | None = None,
    ) -> bool:
        """Write a step (guarded by the lease epoch) and carry out its commands; False when refused.

        The step's dispatches are published while the step is written: a dispatch is fixed by the state
        it comes from (its message id is derived from the execution, node path, iteration and attempt),
        so a replica that resumes from the previous checkpoint publishes the same request again, which
        JetStream drops as a duplicate and the caller follows (:meth:`Client.dispatch`). Everything else
        (events, timers, the final answer) waits until the write has landed.

        ``touched``: the node paths the engine steps from ``self.state`` to ``state`` may have changed
        (:meth:`ExecutableEngine.advance`), so only those records are compared; None compares every record.
        """
        call_ids = self.prepare(commands, state)
        final_task = await self._final_for(state, commands)
        sending = self.send_dispatches(commands, call_ids)
        try:
            if sending is not None:
                # two loop turns: the dispatch builds and queues its request, the NATS client's flusher
                # writes it; the callee starts on it while this step is serialised and written
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                if faults.armed("dispatched_before_checkpoint"):
                    await sending
                    faults.crash_point("dispatched_before_checkpoint")
            result, positions = await self._write_step(state, commands, applied, extra, touched, final_task)
        except BaseException:
            if sending is not None:
                sending.cancel()  # the step is not known to be written: a resuming replica sends it again
            raise
        if sending is not None:
            await sending
        if result.outcome == "stale":
            self._fence_off(result.detail)
            return False
        if result.outcome == "duplicate":
            # Redis holds a step this runner never saw (a retried write that had landed after all), so
            # its commands may not have run: hand over, to resume from the checkpoint (maybe here).
            self.log.warning("execution.duplicate_result", key=result.detail)
            self.lost = True
            with contextlib.suppress(Exception):
                await self.deps.store.release(self.execution_id, self.token, handover=True)
            return False
        self._positions = positions
        if final_task is not None and result.final_task is not None:
            self._stored_final = (final_task, result.final_task)
        faults.crash_point("after_checkpoint")
        self.state = state
        await self._carry(without_sent(commands))
        return True

    async def _final_for(self, state: StateT, commands: Sequence[BaseModel]) -> Task | None:
        """The final Task of a step that finishes the execution, for its commit to store with it (None when
        the step does not finish it, or when the task's record is not in the execution's slot)."""
        if self.task_id != self.execution_id or self.state.finished or not state.finished:
            return None
        if not any(isinstance(c, Finish) for c in commands):
            return None
        return await self.build_final_task(state)

    def _usage_json(self, usage: dict[str, int]) -> str:
        """The JSON of the execution's token usage, made again only when it changed (most steps add nothing)."""
        last, text = self._usage_written
        if usage != last:
            text = json.dumps(usage)
            self._usage_written = (dict(usage), text)
        return text

    async def _write_step(
        self,
        state: StateT,
        commands: Sequence[BaseModel],
        applied: list[str],
        extra: dict[str, Any] | None,
        touched: Iterable[str] | None,
        final_task: Task | None = None,
    ) -> tuple[CommitResult, dict[str, int] | None]:
        """The epoch-guarded commit of one step; returns its result and the split checkpoint's ordinals."""
        old = self.state
        changed = self.engine.node_records(old, state, touched, time.time())
        finishing = state.finished and not old.finished
        fields: dict[str, Any] = {"status": str(state.status), "usage": self._usage_json(state.usage), **(extra or {})}
        reviews = [c for c in commands if isinstance(c, RequestReview)]
        if reviews:
            fields["review"] = json.dumps(reviews[-1].review, default=str)
        if finishing:
            fields.update(
                error=state.error or "",
                output=json.dumps(state.output, default=str),
                finished=int((state.finished_at or time.time()) * 1000),
            )
        write = self.engine.state_write(old, state, touched, self._positions, changed)
        self._positions = None  # until this write is known to have landed
        result = await self.deps.store.commit(
            self.execution_id,
            self.token,
            state_json=write.state_json,
            state_nodes=write.nodes,
            reset_state_nodes=write.reset,
            state_outputs=write.outputs,
            reset_state_outputs=write.outputs_reset,
            nodes=changed,
            events=[event_json(c) for c in commands if isinstance(c, EmitEvent)],
            applied=applied,
            set_timers={c.timer_id: int(c.due * 1000) for c in commands if isinstance(c, SetTimer)},
            clear_timers=[c.timer_id for c in commands if isinstance(c, ClearTimer)],
            fields=fields,
            final_status=str(state.status) if finishing else None,
            final_task=None if final_task is None else (final_task, self.deps.instance),
        )
        return result, write.positions

    def send_dispatches(
        self, commands: Sequence[BaseModel], call_ids: dict[str, str] | None, *, events: bool = True
    ) -> asyncio.Future[None] | None:
        """Publish the dispatches among ``commands``, and the step's events with them unless ``events=False``
        (a start, whose streaming caller gets the task first), in the background (None when there are no
        dispatches).

        For a step being written meanwhile (see :meth:`checkpoint`); the other commands are carried out
        once it has landed (:func:`without_sent`). The events go in the same loop turn as the requests,
        so they leave in the same socket write; a replica that resumes from the previous checkpoint
        publishes them again with the same ``Nats-Msg-Id``, which the events stream drops.
        """
        dispatches = [c for c in commands if isinstance(c, NodeCall)]
        if not dispatches:
            return None
        emitted = [c for c in commands if isinstance(c, EmitEvent)] if events else []
        # one task per step, awaited by the caller: no owner's callback added (the exception named in
        # tests/unit/test_background_tasks.py)
        return asyncio.ensure_future(self._send_step(emitted, dispatches, call_ids))

    async def _send_step(
        self, events: list[EmitEvent], dispatches: list[NodeCall], call_ids: dict[str, str] | None
    ) -> None:
        for event in events:
            await self._emit(event)
        await self.calls.dispatch_all(dispatches, call_ids)

    # --- commands ----------------------------------------------------------------------------

    async def _carry(self, commands: Iterable[BaseModel], call_ids: dict[str, str] | None = None) -> None:
        dispatches: list[NodeCall] = []
        finish: Finish | None = None
        review: RequestReview | None = None
        for command in commands:
            if isinstance(command, NodeCall):
                dispatches.append(command)
            elif isinstance(command, RequestReview):
                review = command
            elif isinstance(command, CancelCall):
                await self.calls.cancel(command)
            elif isinstance(command, SetTimer):
                self._arm(command.timer_id, command.due)
            elif isinstance(command, ClearTimer):
                handle = self._timers.pop(command.timer_id, None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(command, EmitEvent):
                await self._emit(command)
            elif isinstance(command, Finish):
                finish = command
            else:
                self._start_io(command)
        await self.calls.dispatch_all(dispatches, call_ids)
        if finish is not None:
            await self.publish_final()
        elif review is not None:
            await self.publish_paused(review)

    def _start_io(self, command: BaseModel) -> None:
        """Hand a command the engine leaves to the executor to its handler; follow the work like a call."""
        handler = self.deps.handlers.get(type(command))
        started = None if handler is None else handler.start(command, self)
        if started is None:
            self.log.error("command.unhandled", kind=type(command).__name__)
            return
        key, work = started
        self.calls.track(key, self._await_io(work))

    async def _await_io(self, work: Awaitable[BaseModel]) -> None:
        self.inbox.put_nowait(await work)

    async def result_event(self, path: str, attempt: int, agent: str, task: Task) -> CallOutcome:
        """The engine event a callee's final Task stands for."""
        return await result_event(
            path, attempt, agent, task, artifacts=self.deps.artifacts, user=self.reply.headers.get(h.USER)
        )

    async def _emit(self, event: EmitEvent) -> None:
        if self.span is not None and event.event == "node.retrying":
            tracing.event(self.span, "a2amesh.node.retrying", {"a2amesh.node.path": event.path})
        try:
            await publish_event(
                self.deps.bus,
                self._publisher,
                event,
                state=self.state,
                task_id=self.task_id,
                reply=self.reply,
                targets=self.targets,
            )
        except Exception as e:  # progress is best effort
            self.log.warning("event.publish_failed", event=event.event, error=str(e) or type(e).__name__)

    # --- the answer --------------------------------------------------------------------------

    async def build_final_task(self, state: StateT | None = None) -> Task:
        """The final Task of the workflow's task (output as ``artifacts[0]``; large outputs as artifacts), from
        ``state`` (default: the checkpointed one)."""
        return await final_task(
            self.state if state is None else state,
            task_id=self.task_id,
            reply=self.reply,
            settings=self.deps.settings,
            artifacts=self.deps.artifacts,
            history=await self.task_history(),
        )

    async def task_history(self) -> list[Message]:
        """:attr:`history`, read from the task record the first time it is not known here."""
        if self.history is None:
            stored = await self.deps.tasks.get(self.task_id)
            self.history = list(stored.history or []) if stored is not None else []
        return self.history

    async def publish_final(self) -> None:
        """Store the final Task (unless the finishing commit stored it), answer the caller and every subscriber,
        then move the execution to its status's listing and mark it published, in one round trip (the listing
        moves alone when the answer failed)."""
        stored, self._stored_final = self._stored_final, None
        status = str(self.state.status)
        if stored is None:
            task = await self.build_final_task()
            write = self.deps.tasks.write(task, self.state.workflow, self.deps.instance, release=True)
            view = await asyncio.shield(write)
        else:
            task, view = stored
        if view.outcome == "terminal" and view.task is not None and view.task.status.state != task.status.state:
            self.log.info("execution.earlier_final", state=view.task.status.state.value)
        self.final_task = task
        faults.crash_point("after_final_write")
        seq = self.state.seq + SEQ_OFFSET
        try:
            await answer_all(
                self._publisher,
                task,
                seq,
                reply=self.reply,
                others=[*self.targets, *view.subscribers],
                task_id=self.task_id,
                primary_errors=True,
            )
        except BaseException:
            with contextlib.suppress(Exception):  # a replica that answers it later moves it again
                await asyncio.shield(self.deps.store.index_finished(self.execution_id, status))
            raise
        await self.deps.store.mark_published(self.execution_id, finished=status)
        self.log.info(
            "execution.finished",
            status=status,
            ms=int(((self.state.finished_at or time.time()) - self.state.started_at) * 1000),
        )

    async def publish_paused(self, command: RequestReview) -> None:
        """Answer the current request with TASK_STATE_INPUT_REQUIRED and the review (SPEC §7), then forget it."""
        state = self.state
        task = paused_task(state, command, task_id=self.task_id, history=await self.task_history())
        view = await asyncio.shield(self.deps.tasks.write(task, state.workflow, self.deps.instance, release=True))
        await answer_all(
            self._publisher,
            task,
            state.seq + SEQ_OFFSET,
            reply=self.reply,
            others=[*self.targets, *view.subscribers],
            task_id=self.task_id,
            primary_errors=False,
        )
        # the pause answered the current request: later answers go to whoever resumes the execution
        self.targets = []
        self.reply = ReplyInfo(node_request=self.reply.node_request, headers=self.reply.headers)
        await self.deps.store.set_fields(self.execution_id, {"reply": self.reply.model_dump_json()})
        self.log.info("execution.paused", path=command.review.get("path"))

    def pending_review(self) -> RequestReview | None:
        """The review a paused execution waits for (answered again after a takeover)."""
        return self.engine.pending_review(self.state)

    async def republish_pause(self) -> None:
        """Answer the pause again (a takeover between the paused checkpoint and its answer)."""
        review = self.pending_review()
        if self.parked and review is not None and self.reply.reply_to:
            await self.publish_paused(review)

    # --- takeover ----------------------------------------------------------------------------

    async def resume_calls(self) -> None:
        """After a takeover: apply finals already on the old reply subjects, re-point the other calls, and
        carry out again what the engine says must be (a graph's tool run).

        Calls re-dispatched with the same messageId are JetStream duplicates (the client then
        subscribes to the running task) or find the callee's claim, which answers the new subject.
        """
        calls, again = self.engine.takeover(self.state)
        for command in again:
            self._start_io(command)
        redispatch: list[BaseModel] = []
        for call in calls:
            stored = None
            if call.reply_to:
                with contextlib.suppress(Exception):
                    stored = await self.deps.bus.direct_get_last(self.deps.bus.subjects.replies_stream, call.reply_to)
            event = await stored_event(call, stored, artifacts=self.deps.artifacts, user=self.reply.headers.get(h.USER))
            if event is not None:
                self.inbox.put_nowait(event)
                continue
            if call.resend is not None:
                redispatch.append(call.resend)
        if not redispatch:
            return
        state = self.state.model_copy(deep=True)
        await self.checkpoint(state, redispatch, [])
