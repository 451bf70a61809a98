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
import functools
import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from a2amesh import faults
from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, StoredMsg
from a2amesh.client import Call, Client
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, RpcError, StoreUnavailable, TransportError
from a2amesh.ids import nuid
from a2amesh.jsontext import dumps_bytes
from a2amesh.logs import get_logger
from a2amesh.mailbox import Mailbox
from a2amesh.protocol import (
    Artifact,
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
    CALL_CHAIN_KEY,
    NODE_PATH_KEY,
    NODE_REQUEST,
    NODE_RESULT,
    REVIEW_REQUEST,
    WORKFLOW_EVENT_KEY,
)
from a2amesh.rpc import decode_stream_reply, encode_request
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore
from a2amesh.store.executions import CommitResult, ExecutionStore
from a2amesh.store.tasks import TaskRecordView, TaskStore
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher
from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.dag.state import Command, DispatchNode, Event, ExecutionState, NodePaused, NodeRun, NodeStatus
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    ExecutionStatus,
    Finish,
    NodeFailed,
    NodeSucceeded,
    RequestReview,
    SetTimer,
    TimerFired,
)
from a2amesh.workflow.graph.state import DispatchGraphNode

AnyDispatch = DispatchNode | DispatchGraphNode

__all__ = ["CALL_CHAIN_KEY", "REVIEW_REQUEST", "ExecutionRunner", "RunnerDeps", "node_record"]

DISPATCH_RETRY_FOR = 30.0
"""Seconds a node request is re-published while JetStream is unavailable (a NATS restart) before the node fails."""
SEQ_OFFSET = 1
"""A2A-Seq of an engine event is its seq + 1: seq 1 is the ``task`` event that opens a stream."""
_RECORD_EXCLUDE = {
    "items",
    "children",
    "last_output",
    "launched",
    "timer",
    "open_children",
    "completed_children",
    "failed_children",
}
_LIFECYCLE_NODE_EVENTS = {"started", "completed", "failed", "skipped"}
_TASK_STATE = {
    ExecutionStatus.COMPLETED: TaskState.COMPLETED,
    ExecutionStatus.FAILED: TaskState.FAILED,
    ExecutionStatus.CANCELED: TaskState.CANCELED,
}


def node_record(run: NodeRun) -> str:
    """The JSON record of a node instance kept for ``a2amesh show`` (container bookkeeping left out)."""
    return run.model_dump_json(exclude=_RECORD_EXCLUDE)


def without_sent(commands: list[Any], *, events: bool = True) -> list[Any]:
    """The commands left once a step's dispatches, and with them its events unless ``events=False``, went
    out (:meth:`ExecutionRunner.send_dispatches`); all of them when the step dispatches nothing."""
    if not any(isinstance(c, DispatchNode | DispatchGraphNode) for c in commands):
        return commands
    sent = DispatchNode | DispatchGraphNode | EmitEvent if events else DispatchNode | DispatchGraphNode
    return [c for c in commands if not isinstance(c, sent)]


def _event_json(event: EmitEvent) -> str:
    return event.model_dump_json(exclude={"kind"})


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


@dataclass(frozen=True, slots=True)
class _CallRef:
    """What a call's waiter needs of its dispatch."""

    path: str
    attempt: int
    agent: str


class ExecutionRunner:
    """Owns one execution while its lease holds.

    Args:
        deps: the executor's connections and stores.
        engine: the engine of the execution's pinned definition.
        state: the last checkpointed state.
        epoch: the lease epoch this runner holds.
        reply: how the caller wants its answer.
    """

    def __init__(
        self, deps: RunnerDeps, engine: Engine, state: ExecutionState, *, epoch: int, reply: ReplyInfo
    ) -> None:
        self.deps = deps
        self.engine = engine
        self.state = state
        self.epoch = epoch
        self.token = f"{deps.instance}:{epoch}"
        self.reply = reply
        self.execution_id = state.execution_id
        self.task_id = state.task_id or state.execution_id
        self.inbox: Mailbox[Event] = Mailbox()
        self.targets: list[str] = []
        self.lost = False
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.final_task: Task | None = None
        self._stored_final: tuple[Task, TaskRecordView] | None = None  # written by the finishing commit
        self._calls: dict[str, asyncio.Task[None]] = {}
        self._positions: dict[str, int] | None = None
        """Ordinal of each node instance in the last split checkpoint written (None: write them all next)."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._publisher = ReplyPublisher(
            deps.bus, deps.settings, agent=state.workflow, task_id=self.task_id, attempt=epoch
        )

    @property
    def log(self) -> Any:
        """This execution's logger (made when used: a runner that waits for hours keeps none)."""
        return get_logger("executor.run", execution_id=self.execution_id, workflow=self.state.workflow)

    # --- loop --------------------------------------------------------------------------------

    async def run(self, commands: Iterable[Command] = (), *, call_ids: dict[str, str] | None = None) -> None:
        """Carry out the already-checkpointed ``commands``, then apply events until the execution ends."""
        try:
            for timer_id, due in self.state.timers.items():
                self._arm(timer_id, due)
            await self._carry(list(commands), call_ids)
            del commands, call_ids  # a runner may wait for hours: keep nothing it no longer needs
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
            if self.parked and not self.lost:
                await self.park()
        finally:
            for task in self._calls.values():
                task.cancel()
            for handle in self._timers.values():
                handle.cancel()
            if self._calls:
                await asyncio.wait(set(self._calls.values()), timeout=5)
            if not self.finished.done():
                self.finished.set_result(None)

    def drop_calls(self) -> None:
        """Stop following the calls of a runner that will not run (its start failed)."""
        for task in self._calls.values():
            task.cancel()
        self._calls.clear()

    @property
    def parked(self) -> bool:
        """Paused for a human with nothing in flight: the runner lets the execution go until a resume or timer."""
        return str(self.state.status) == "paused"

    async def park(self) -> None:
        """Release a paused execution: no lease, no slot; a resume or a due timer brings it back on any replica."""
        next_due = min(self.state.timers.values(), default=None)
        await self.deps.store.park(self.execution_id, self.token, None if next_due is None else int(next_due * 1000))
        self.log.info("execution.parked", timers=sorted(self.state.timers))

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

    async def _apply(self, batch: list[Event]) -> None:
        state = self.state
        commands: list[Command] = []
        applied: list[str] = []
        touched: set[str] = set()
        for event in batch:
            if isinstance(event, NodeSucceeded | NodeFailed):
                run = state.nodes.get(event.path)
                if run is None or run.attempt != event.attempt or run.status is not NodeStatus.RUNNING:
                    continue
                applied.append(f"{event.path}#{run.iteration}@{event.attempt}")
            state, step_commands, step_touched = self.engine.apply(state, event, time.time())
            commands.extend(step_commands)
            touched |= step_touched
        if state is self.state or (not commands and state == self.state):
            return
        await self.checkpoint(state, commands, applied, touched=touched)

    def prepare(self, commands: list[Command], state: ExecutionState | None = None) -> dict[str, str]:
        """Mint the call id of every dispatch and record its reply subject in the state (before the write)."""
        target = self.state if state is None else state
        call_ids: dict[str, str] = {}
        for command in commands:
            if isinstance(command, DispatchNode):
                call_ids[command.path] = nuid()
                target.nodes[command.path].reply_to = self.deps.bus.subjects.reply(
                    self.deps.client.instance, call_ids[command.path]
                )
        return call_ids

    def node_records(self, old: Any, new: Any) -> dict[str, str]:
        """The node records a step changed (path → JSON)."""
        return {path: node_record(run) for path, run in new.nodes.items() if old.nodes.get(path) != run}

    def state_checkpoint(
        self, old: Any, new: Any, touched: Iterable[str] | None
    ) -> tuple[str, dict[str, str] | None, dict[str, int] | None, bool]:
        """What to write of ``new``: (state JSON, changed node instances, every ordinal, whether all are written).

        An :class:`ExecutionState` is written split (see :meth:`ExecutionStore.commit`): its ``nodes`` left
        out (``null``), and only the instances changed since ``old`` (the last write) written, with their
        place in ``nodes``; the first write of a runner (or after a failed one) writes every instance.
        """
        if not isinstance(new, ExecutionState):
            return new.model_dump_json(), None, None, False
        nodes = new.nodes
        positions = self._positions
        reset = positions is None
        fresh: list[str] = []
        if positions is not None and len(nodes) >= len(positions):
            fresh = list(itertools.islice(reversed(nodes), len(nodes) - len(positions)))
            fresh.reverse()
            if any(path in positions for path in fresh):
                positions = None  # not an append-only change: write everything
        if positions is None:
            positions = {path: index for index, path in enumerate(nodes)}
            paths: Iterable[str] = nodes
            reset = True
        else:
            for path in fresh:
                positions[path] = len(positions)
            if touched is None:
                paths = [path for path, run in nodes.items() if dict.get(old.nodes, path) is not run]
            else:
                paths = {*touched, *fresh}
        records = {
            path: f"{positions[path]} {dict.__getitem__(nodes, path).model_dump_json()}"
            for path in paths
            if path in nodes
        }
        head = new.model_dump_json(exclude={"nodes"})
        return head[:-1] + ',"nodes":null}', records, positions, reset

    def touched_records(self, old: Any, new: Any, touched: Iterable[str]) -> dict[str, str]:
        """The node records a step changed, among the paths it touched (path → JSON)."""
        records: dict[str, str] = {}
        for path in touched:
            run = dict.get(new.nodes, path)  # read without copying (the engine's nodes copy on write)
            if run is not None and dict.get(old.nodes, path) != run:
                records[path] = node_record(run)
        return records

    def parse_state(self, raw: str) -> Any:
        """A checkpointed state of this runner's engine."""
        return ExecutionState.model_validate_json(raw)

    async def checkpoint(
        self,
        state: Any,
        commands: list[Any],
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
        (:meth:`Engine.apply`), so only those records are compared; None compares every record.
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
            self.log.warning("execution.lease_lost", holder=result.detail)
            self.lost = True
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

    async def _final_for(self, state: Any, commands: list[Any]) -> Task | None:
        """The final Task of a step that finishes the execution, for its commit to store with it (None when
        the step does not finish it, or when the task's record is not in the execution's slot)."""
        if self.task_id != self.execution_id or self.state.finished or not state.finished:
            return None
        if not any(isinstance(c, Finish) for c in commands):
            return None
        return await self.build_final_task(state)

    async def _write_step(
        self,
        state: Any,
        commands: list[Any],
        applied: list[str],
        extra: dict[str, Any] | None,
        touched: Iterable[str] | None,
        final_task: Task | None = None,
    ) -> tuple[CommitResult, dict[str, int] | None]:
        """The epoch-guarded commit of one step; returns its result and the split checkpoint's ordinals."""
        old = self.state
        changed = self.node_records(old, state) if touched is None else self.touched_records(old, state, touched)
        finishing = state.finished and not old.finished
        fields: dict[str, Any] = {"status": str(state.status), "usage": json.dumps(state.usage), **(extra or {})}
        reviews = [c for c in commands if isinstance(c, RequestReview)]
        if reviews:
            fields["review"] = json.dumps(reviews[-1].review, default=str)
        if finishing:
            fields.update(
                error=state.error or "",
                output=json.dumps(state.output, default=str),
                finished=int((state.finished_at or time.time()) * 1000),
            )
        state_json, state_nodes, positions, reset = self.state_checkpoint(old, state, touched)
        self._positions = None  # until this write is known to have landed
        result = await self.deps.store.commit(
            self.execution_id,
            self.token,
            state_json=state_json,
            state_nodes=state_nodes,
            reset_state_nodes=reset,
            nodes=changed,
            events=[_event_json(c) for c in commands if isinstance(c, EmitEvent)],
            applied=applied,
            set_timers={c.timer_id: int(c.due * 1000) for c in commands if isinstance(c, SetTimer)},
            clear_timers=[c.timer_id for c in commands if isinstance(c, ClearTimer)],
            fields=fields,
            final_status=str(state.status) if finishing else None,
            final_task=None if final_task is None else (final_task, self.deps.instance),
        )
        return result, positions

    def send_dispatches(
        self, commands: list[Any], call_ids: dict[str, str] | None, *, events: bool = True
    ) -> asyncio.Future[None] | None:
        """Publish the dispatches among ``commands``, and the step's events with them unless ``events=False``
        (a start, whose streaming caller gets the task first), in the background (None when there are no
        dispatches).

        For a step being written meanwhile (see :meth:`checkpoint`); the other commands are carried out
        once it has landed (:func:`without_sent`). The events go in the same loop turn as the requests,
        so they leave in the same socket write; a replica that resumes from the previous checkpoint
        publishes them again with the same ``Nats-Msg-Id``, which the events stream drops.
        """
        dispatches = [c for c in commands if isinstance(c, DispatchNode | DispatchGraphNode)]
        if not dispatches:
            return None
        emitted = [c for c in commands if isinstance(c, EmitEvent)] if events else []
        return asyncio.ensure_future(self._send_step(emitted, dispatches, call_ids))

    async def _send_step(
        self, events: list[EmitEvent], dispatches: list[AnyDispatch], call_ids: dict[str, str] | None
    ) -> None:
        for event in events:
            await self._emit(event)
        await self._dispatch_all(dispatches, call_ids)

    # --- commands ----------------------------------------------------------------------------

    async def _carry(self, commands: list[Any], call_ids: dict[str, str] | None = None) -> None:
        dispatches: list[AnyDispatch] = []
        finish: Finish | None = None
        review: RequestReview | None = None
        for command in commands:
            if isinstance(command, DispatchNode | DispatchGraphNode):
                dispatches.append(command)
            elif isinstance(command, RequestReview):
                review = command
            elif isinstance(command, CancelCall):
                await self._cancel_call(command)
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
        await self._dispatch_all(dispatches, call_ids)
        if finish is not None:
            await self.publish_final()
        elif review is not None:
            await self.publish_paused(review)

    async def _dispatch_all(self, dispatches: list[AnyDispatch], call_ids: dict[str, str] | None) -> None:
        ids = call_ids or {}
        if len(dispatches) == 1:
            await self._dispatch(dispatches[0], ids.get(dispatches[0].path))  # no task: one less loop turn
        elif dispatches:
            await asyncio.gather(*(self._dispatch(d, ids.get(d.path)) for d in dispatches))

    def _message(self, command: Any) -> Message:
        if command.resume is not None:
            # continue the callee's paused task with the human's answer
            return Message(
                message_id=command.message_id,
                role=Role.USER,
                parts=[Part.of_data(command.resume)],
                task_id=command.task_id,
                context_id=self.state.context_id,
                metadata={CALL_CHAIN_KEY: command.call_chain, NODE_PATH_KEY: command.path},
            )
        control = {
            "type": NODE_REQUEST,
            "execution_id": self.execution_id,
            "node_id": command.node_id,
            "workflow_name": self.state.workflow,
            "input_schema": command.input_schema,
            "output_schema": command.output_schema,
            "instruction": command.instruction,
            "max_retries": None,
            "suggested_output_name": f"{command.node_id}_output.json",
        }
        return Message(
            message_id=command.message_id,
            role=Role.USER,
            parts=[Part.of_data(control), Part.of_data({} if command.input is None else command.input)],
            context_id=self.state.context_id,
            metadata={CALL_CHAIN_KEY: command.call_chain, NODE_PATH_KEY: command.path},
        )

    async def _spill_input(self, message: Message, command: AnyDispatch) -> Message:
        """Send a node input above the inline threshold as an artifact URL part (SPEC §4), never inline."""
        parts = list(message.parts)
        for i, part in enumerate(parts):
            if part.data is None or (isinstance(part.data, dict) and part.data.get("type") == NODE_REQUEST):
                continue
            if len(dumps_bytes(part.data, default=str)) <= self.deps.settings.inline_threshold:
                continue
            meta = await self.deps.artifacts.save(
                ArtifactScope(self.state.context_id or self.task_id, self.task_id),
                f"input-{command.message_id}",
                part.data,
                user=self.reply.headers.get(h.USER),
            )
            parts[i] = Part(
                url=meta.uri,
                media_type=meta.media_type,
                filename=meta.name,
                metadata={"size": meta.size, "sha256": meta.sha256},
            )
        return message if parts == message.parts else message.model_copy(update={"parts": parts})

    async def _dispatch(self, command: AnyDispatch, call_id: str | None) -> None:
        deadline = command.deadline or (time.time() + self.deps.settings.tasks_max_age)
        give_up = min(deadline, time.time() + DISPATCH_RETRY_FOR)
        delay = 0.2
        message = await self._spill_input(self._message(command), command)
        while True:
            try:
                call = await self.deps.client.dispatch(
                    command.agent,
                    message,
                    deadline=deadline,
                    headers=self.reply.headers,
                    call_depth=command.call_depth,
                    request_id=command.message_id,
                    call_id=call_id,
                    history_length=0,
                )
                break
            except TransportError as e:
                # NATS restarting: publish again (same messageId, so a publish that landed is a duplicate)
                if e.reason != codes.UNAVAILABLE or self.lost or time.time() + delay > give_up:
                    self.inbox.put_nowait(self._call_error(command, e))
                    return
                self.log.warning("call.dispatch_retry", path=command.path, error=str(e))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except A2AMeshError as e:
                self.inbox.put_nowait(self._call_error(command, e))
                return
        faults.crash_point("after_dispatch_publish")
        self._follow(_CallRef(command.path, command.attempt, command.agent), call)

    def _follow(self, ref: _CallRef, call: Call) -> None:
        old = self._calls.pop(ref.path, None)
        if old is not None:
            old.cancel()
        # the waiter keeps only the call's reference, not the dispatch (its input may be large)
        task = asyncio.create_task(self._await_result(ref, call), name=f"call-{ref.path}")
        self._calls[ref.path] = task
        task.add_done_callback(functools.partial(self._call_done, ref.path))

    def _call_done(self, path: str, task: asyncio.Task[None]) -> None:
        if self._calls.get(path) is task:
            del self._calls[path]
        if not task.cancelled() and task.exception() is not None:
            self.log.error("call.crashed", path=path, error=repr(task.exception()))

    async def _await_result(self, ref: _CallRef, call: Call) -> None:
        try:
            task = await call.result()
        except A2AMeshError as e:
            self.inbox.put_nowait(self._call_error(ref, e))
            return
        self.inbox.put_nowait(await self.result_event(ref.path, ref.attempt, ref.agent, task))

    def _call_error(self, command: AnyDispatch | _CallRef, error: A2AMeshError) -> NodeFailed:
        if isinstance(error, TransportError):
            text = f"{error.reason}: {error}"
        elif isinstance(error, RpcError):
            text = f"{command.agent} answered JSON-RPC error {error.code}: {error}"
        else:
            text = str(error)
        return NodeFailed(path=command.path, attempt=command.attempt, error=text, error_kind="error")

    async def result_event(self, path: str, attempt: int, agent: str, task: Task) -> Event:
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
            if part is not None and part.url is not None and part.url.startswith("artifact://"):
                try:
                    output = (await self.deps.artifacts.load_uri(part.url, user=self.reply.headers.get(h.USER))).value
                except StoreUnavailable:
                    raise  # Redis away: not the callee's failure
                except A2AMeshError as e:
                    return NodeFailed(
                        path=path, attempt=attempt, error=f"cannot load the result: {e}", error_kind="error"
                    )
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
            }
            return NodePaused(path=path, attempt=attempt, review=review, task_id=task.id, usage=usage)
        kind = "error" if error.split(":", 1)[0] in codes.TRANSPORT_REASONS else "failure"
        return NodeFailed(path=path, attempt=attempt, error=error, error_kind=kind, task_id=task.id, usage=usage)

    async def _cancel_call(self, command: CancelCall) -> None:
        task = self._calls.pop(command.path, None)
        if task is not None:
            task.cancel()
        try:
            await self.deps.tasks.mark_canceled(command.task_id)
            body = encode_request(codes.CANCEL_TASK, CancelTaskRequest(id=command.task_id), nuid())
            await self.deps.bus.publish(
                self.deps.bus.subjects.control(command.agent), body, {h.VERSION: codes.A2A_VERSION}
            )
        except Exception as e:  # a failed cancel must not stop the execution; the callee's deadline still holds
            self.log.warning("call.cancel_failed", path=command.path, error=str(e) or type(e).__name__)

    async def _emit(self, event: EmitEvent) -> None:
        bus = self.deps.bus
        payload = {
            "execution_id": self.execution_id,
            "workflow": self.state.workflow,
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
            subject = bus.subjects.workflow_event(self.state.workflow, name)
        elif group == "node" and name in _LIFECYCLE_NODE_EVENTS:
            subject = bus.subjects.node_event(self.state.workflow, name)
        try:
            if subject is not None:
                msg_id = {h.MSG_ID: f"{self.execution_id}:{event.seq}"}  # a step sent again is one event
                await bus.publish(subject, dumps_bytes(payload, default=str), msg_id)
            targets = [*([self.reply.reply_to] if self.reply.streaming and self.reply.reply_to else []), *self.targets]
            if targets and (not event.event.startswith("execution.") or event.event == "execution.started"):
                status = TaskStatusUpdateEvent(
                    task_id=self.task_id,
                    context_id=self.state.context_id,
                    status=TaskStatus(
                        state=TaskState.WORKING,
                        timestamp=utc_timestamp(event.at),
                        message=Message(
                            message_id=nuid(),
                            role=Role.AGENT,
                            parts=[Part.of_text(_describe(event))],
                            task_id=self.task_id,
                            context_id=self.state.context_id,
                        ),
                    ),
                    metadata={WORKFLOW_EVENT_KEY: payload},
                )
                for subject_to in targets:
                    primary = subject_to == self.reply.reply_to
                    await self._publisher.progress(
                        subject_to, self.reply.request_id if primary else self.task_id, status, event.seq + SEQ_OFFSET
                    )
        except Exception as e:  # progress is best effort
            self.log.warning("event.publish_failed", event=event.event, error=str(e) or type(e).__name__)

    # --- the answer --------------------------------------------------------------------------

    async def build_final_task(self, state: Any | None = None) -> Task:
        """The final Task of the workflow's task (output as ``artifacts[0]``; large outputs as artifacts), from
        ``state`` (default: the checkpointed one)."""
        state = self.state if state is None else state
        task_state = _TASK_STATE.get(state.status, TaskState.FAILED)
        ok = state.status == ExecutionStatus.COMPLETED
        output = state.output if ok else None
        text = f"workflow {state.workflow} completed" if ok else (state.error or f"workflow {state.workflow} failed")
        parts = [Part.of_text(text)]
        artifacts: list[Artifact] | None = None
        node_result: dict[str, Any] | None = None
        if self.reply.node_request is not None:
            node_result = {
                "type": NODE_RESULT,
                "status": "success" if ok else "failure",
                "execution_id": state.execution_id,
                "node_id": self.reply.node_request.get("node_id"),
                "attempts": 1,
                "usage": state.usage,
            }
            if not ok:
                node_result["error"] = text
        if ok:
            value = {} if output is None else output
            size = len(json.dumps(value, default=str).encode())
            if size > self.deps.settings.inline_threshold:
                meta = await self.deps.artifacts.save(
                    ArtifactScope(state.context_id or self.task_id, self.task_id),
                    "result",
                    value,
                    user=self.reply.headers.get(h.USER),
                )
                part = Part(
                    url=meta.uri,
                    media_type=meta.media_type,
                    filename=meta.name,
                    metadata={"size": meta.size, "sha256": meta.sha256},
                )
                if node_result is not None:
                    node_result["artifact"] = meta.ref()
            else:
                part = Part.of_text(value) if isinstance(value, str) else Part.of_data(value)
                if node_result is not None:
                    node_result["output"] = value
            artifacts = [Artifact(artifact_id=f"{self.task_id}-result", name="result", parts=[part])]
        if node_result is not None:
            parts.append(Part.of_data(node_result))
        return Task(
            id=self.task_id,
            context_id=state.context_id,
            status=TaskStatus(
                state=task_state,
                timestamp=utc_timestamp(state.finished_at),
                message=Message(
                    message_id=f"{self.task_id}-final",
                    role=Role.AGENT,
                    parts=parts,
                    task_id=self.task_id,
                    context_id=state.context_id,
                ),
            ),
            artifacts=artifacts,
            metadata={"execution_id": state.execution_id, "workflow": state.workflow, "usage": state.usage},
        )

    async def publish_final(self) -> None:
        """Store the final Task (unless the finishing commit stored it), answer the caller and every subscriber,
        then mark it published. The status index moves with the store, or while the answer goes out."""
        stored, self._stored_final = self._stored_final, None
        indexing: asyncio.Future[None] | None = None
        if stored is None:
            task = await self.build_final_task()
            view, _ = await asyncio.shield(
                asyncio.gather(
                    self.deps.tasks.write(task, self.state.workflow, self.deps.instance, release=True),
                    self.deps.store.index_finished(self.execution_id, str(self.state.status)),
                )
            )
        else:
            task, view = stored
            indexing = asyncio.ensure_future(self.deps.store.index_finished(self.execution_id, str(self.state.status)))
        if view.outcome == "terminal" and view.task is not None and view.task.status.state != task.status.state:
            self.log.info("execution.earlier_final", state=view.task.status.state.value)
        self.final_task = task
        faults.crash_point("after_final_write")
        seq = self.state.seq + SEQ_OFFSET
        try:
            if self.reply.reply_to:
                await self._publisher.final(
                    self.reply.reply_to, self.reply.request_id, task, seq, streaming=self.reply.streaming
                )
            for subject in {*view.subscribers, *self.targets} - {self.reply.reply_to}:
                with contextlib.suppress(TransportError):
                    await self._publisher.final(subject, self.task_id, task, seq, streaming=False)
        finally:
            if indexing is not None:
                await asyncio.shield(indexing)
        await self.deps.store.mark_published(self.execution_id)
        self.log.info(
            "execution.finished",
            status=str(self.state.status),
            ms=int(((self.state.finished_at or time.time()) - self.state.started_at) * 1000),
        )

    async def publish_paused(self, command: RequestReview) -> None:
        """Answer the current request with TASK_STATE_INPUT_REQUIRED and the review (SPEC §7), then forget it."""
        state = self.state
        review = dict(command.review)
        prompt = str(review.get("prompt") or "input required")
        task = Task(
            id=self.task_id,
            context_id=state.context_id,
            status=TaskStatus(
                state=TaskState.INPUT_REQUIRED,
                timestamp=utc_timestamp(),
                message=Message(
                    message_id=f"{self.task_id}-review-{state.seq}",
                    role=Role.AGENT,
                    parts=[Part.of_text(prompt), Part.of_data(review)],
                    task_id=self.task_id,
                    context_id=state.context_id,
                ),
            ),
            metadata={"execution_id": state.execution_id, "workflow": state.workflow, "review": review},
        )
        view = await asyncio.shield(self.deps.tasks.write(task, state.workflow, self.deps.instance, release=True))
        seq = state.seq + SEQ_OFFSET
        if self.reply.reply_to:
            with contextlib.suppress(TransportError):
                await self._publisher.final(
                    self.reply.reply_to, self.reply.request_id, task, seq, streaming=self.reply.streaming
                )
        for subject in {*view.subscribers, *self.targets} - {self.reply.reply_to}:
            with contextlib.suppress(TransportError):
                await self._publisher.final(subject, self.task_id, task, seq, streaming=False)
        # the pause answered the current request: later answers go to whoever resumes the execution
        self.targets = []
        self.reply = ReplyInfo(node_request=self.reply.node_request, headers=self.reply.headers)
        await self.deps.store.set_fields(self.execution_id, {"reply": self.reply.model_dump_json()})
        self.log.info("execution.paused", path=review.get("path"))

    def pending_review(self) -> RequestReview | None:
        """The review a paused execution waits for (answered again after a takeover)."""
        for run in self.state.nodes.values():
            if run.status is NodeStatus.WAITING_INPUT and run.review:
                path = str(run.review.get("path") or run.path)
                return RequestReview(path=path, node_id=run.node_id, review=run.review)
        return None

    async def republish_pause(self) -> None:
        """Answer the pause again (a takeover between the paused checkpoint and its answer)."""
        review = self.pending_review()
        if self.parked and review is not None and self.reply.reply_to:
            await self.publish_paused(review)

    # --- takeover ----------------------------------------------------------------------------

    async def resume_calls(self) -> None:
        """After a takeover: apply finals already on the old reply subjects, re-point the other calls.

        Calls re-dispatched with the same messageId are JetStream duplicates (the client then
        subscribes to the running task) or find the callee's claim, which answers the new subject.
        """
        redispatch: list[DispatchNode] = []
        for run in self.state.running_calls():
            stored = None
            if run.reply_to:
                with contextlib.suppress(Exception):
                    stored = await self.deps.bus.direct_get_last(self.deps.bus.subjects.replies_stream, run.reply_to)
            event = await self._stored_event(run, stored)
            if event is not None:
                self.inbox.put_nowait(event)
                continue
            command = self.engine.redispatch(self.state, run.path)
            if command is not None:
                redispatch.append(command)
        if not redispatch:
            return
        state = self.state.model_copy(deep=True)
        await self.checkpoint(state, list(redispatch), [])

    async def _stored_event(self, run: NodeRun, stored: StoredMsg | None) -> Event | None:
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
        return await self.result_event(run.path, run.attempt, run.agent, response.result.task)


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
