"""The calls of one execution to its nodes' agents: dispatch each request, follow it to its final, and turn that
final into the engine event it stands for (the runner's inbox gets it); cancel a call the engine gives up.

:class:`NodeCalls` is the :class:`~a2amesh.executor.runner.ExecutionRunner`'s collaborator for its
``NodeCall`` and ``CancelCall`` commands: it owns the work that follows each node instance (one task per
path, a newer one replacing an older one) and the caller's delta sink, and reads the runner's state, reply
and dependencies.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeGuard

from a2amesh import faults, metrics, tracing
from a2amesh.bus import headers as h
from a2amesh.client import Call, EncodedMessage
from a2amesh.errors import A2AMeshError
from a2amesh.executor.deltas import STREAMING_BUILTINS, with_stream_deltas
from a2amesh.executor.dispatch import (
    CallRef,
    call_error,
    cancel_callee,
    dispatch_call,
    end_node_span,
    spill_input,
    tracing_node_span,
)
from a2amesh.ids import nuid
from a2amesh.protocol import Message
from a2amesh.worker.deltas import DeltaSink, delta_sink
from a2amesh.workflow.events import CancelCall, NodeCall, NodeFailed

if TYPE_CHECKING:
    from a2amesh.executor.runner import ExecutionRunner

__all__ = ["NodeCalls"]


class NodeCalls:
    """Dispatches and follows the node calls of one execution (``runner``'s)."""

    def __init__(self, runner: ExecutionRunner[Any]) -> None:
        self.runner = runner
        self.tracked: dict[str, asyncio.Task[None]] = {}
        """The work following each node instance (or a handler's command), by path."""
        self._caller_deltas: DeltaSink | None = None

    async def dispatch_all(self, dispatches: list[NodeCall], call_ids: dict[str, str] | None) -> None:
        ids = call_ids or {}
        if len(dispatches) == 1:
            await self._dispatch(dispatches[0], ids.get(dispatches[0].path))  # no task: one less loop turn
        elif dispatches:
            await asyncio.gather(*(self._dispatch(d, ids.get(d.path)) for d in dispatches))

    async def _dispatch(self, command: NodeCall, call_id: str | None) -> None:
        deadline = command.deadline or (time.time() + self.runner.deps.settings.tasks_max_age)
        state = self.runner.state
        sink = self._delta_sink(command)
        # a new call's request written straight to bytes, without a Message model, when nothing spills
        encoded = (
            None
            if sink is not None
            else command.message_json(
                execution_id=self.runner.execution_id,
                workflow=state.workflow,
                context_id=state.context_id,
                inline_limit=self.runner.deps.settings.inline_threshold,
            )
        )
        message: Message | EncodedMessage
        if encoded is not None:
            build = functools.partial(
                command.message,
                execution_id=self.runner.execution_id,
                workflow=state.workflow,
                context_id=state.context_id,
            )
            message = EncodedMessage(command.message_id, encoded, build)
        else:
            message = command.message(
                execution_id=self.runner.execution_id, workflow=state.workflow, context_id=state.context_id
            )
            if sink is not None and self.runner.deps.deltas is not None:
                call_id = call_id or nuid()
                message = with_stream_deltas(message)
                await self.runner.deps.deltas.route(call_id, sink)
            message = await spill_input(
                message,
                command,
                settings=self.runner.deps.settings,
                artifacts=self.runner.deps.artifacts,
                context_id=state.context_id,
                task_id=self.runner.task_id,
                user=self.runner.reply.headers.get(h.USER),
            )
        publish = functools.partial(
            dispatch_call,
            self.runner.deps.client,
            command,
            message,
            deadline=deadline,
            headers=self.runner.reply.headers,
            call_id=call_id,
            lost=lambda: self.runner.lost,
            log=lambda: self.runner.log,
        )
        span = None if self.runner.span is None else tracing_node_span(self.runner.span, command)
        ref = CallRef(command.path, command.attempt, command.agent, span, time.monotonic() if metrics.enabled else 0.0)
        if self.runner.deps.client.registry.get(command.agent) is None:
            # no live card known: the dispatch may wait up to a card TTL for one (dispatch_call), in a task of
            # its own, so this execution's other events (results, cancels, timers) go on meanwhile
            self.track(command.path, self._dispatch_later(ref, call_id, publish))
            return
        with tracing.use(span):  # the request goes out under the node's span
            call = await publish()
        if self._dispatched(call, call_id, ref):
            self._follow(ref, call)

    def _dispatched(self, call: Call | NodeFailed, call_id: str | None, ref: CallRef) -> TypeGuard[Call]:
        """Whether the request went out (a call to follow); a failure goes to the engine."""
        if isinstance(call, NodeFailed):
            end_node_span(ref, call, self.runner.state.workflow)
            if call_id is not None and self.runner.deps.deltas is not None:
                self.runner.deps.deltas.unroute(call_id)
            self.runner.inbox.put_nowait(call)
            return False
        faults.crash_point("after_dispatch_publish")
        return True

    async def _dispatch_later(
        self, ref: CallRef, call_id: str | None, publish: Callable[[], Awaitable[Call | NodeFailed]]
    ) -> None:
        """Dispatch, then wait for the answer, in the task that follows the node instance at ``ref.path``."""
        with tracing.use(ref.span):
            call = await publish()
        del publish  # the request (its input may be large) is not kept while the answer is awaited
        if self._dispatched(call, call_id, ref):
            await self._await_result(ref, call)

    def _follow(self, ref: CallRef, call: Call) -> None:
        # the waiter keeps only the call's reference, not the dispatch (its input may be large)
        self.track(ref.path, self._await_result(ref, call))

    def track(self, path: str, work: Coroutine[Any, Any, None]) -> None:
        """Follow the work of the node instance at ``path`` (replacing any older work for it)."""
        old = self.tracked.pop(path, None)
        if old is not None:
            old.cancel()
        # one task per node call, owned by ``tracked`` with one callback (the exception named in
        # tests/unit/test_background_tasks.py)
        task = asyncio.create_task(work, name=f"call-{path}")
        self.tracked[path] = task
        task.add_done_callback(functools.partial(self._call_done, path))

    def _call_done(self, path: str, task: asyncio.Task[None]) -> None:
        if self.tracked.get(path) is task:
            del self.tracked[path]
        if not task.cancelled() and task.exception() is not None:
            self.runner.log.error("call.crashed", path=path, error=repr(task.exception()))

    def _delta_sink(self, command: NodeCall) -> DeltaSink | None:
        """Where the token deltas of this call go: the streaming caller's delta subject, for a built-in model
        node of a workflow with ``streaming_enabled`` (its input then asks for ``stream``)."""
        reply = self.runner.reply
        if not (reply.streaming and reply.reply_to) or command.agent not in STREAMING_BUILTINS:
            return None
        if not (isinstance(command.input, dict) and command.input.get("stream") is True):
            return None
        if self._caller_deltas is None:
            self._caller_deltas = delta_sink(
                self.runner.deps.bus,
                reply_subject=reply.reply_to,
                agent=self.runner.state.workflow,
                task_id=self.runner.task_id,
                context_id=self.runner.state.context_id or "",
            )
        return self._caller_deltas

    async def _await_result(self, ref: CallRef, call: Call) -> None:
        try:
            task = await call.result()
        except A2AMeshError as e:
            self.runner.inbox.put_nowait(end_node_span(ref, call_error(ref, e), self.runner.state.workflow))
            return
        except asyncio.CancelledError:
            end_node_span(ref, None, self.runner.state.workflow)
            raise
        finally:
            if self.runner.deps.deltas is not None:
                self.runner.deps.deltas.unroute(call.call_id)
        event = await self.runner.result_event(ref.path, ref.attempt, ref.agent, task)
        self.runner.inbox.put_nowait(end_node_span(ref, event, self.runner.state.workflow))

    async def cancel(self, command: CancelCall) -> None:
        task = self.tracked.pop(command.path, None)
        if task is not None:
            task.cancel()
        try:
            await cancel_callee(self.runner.deps.bus, self.runner.deps.tasks, command)
        except Exception as e:  # a failed cancel must not stop the execution; the callee's deadline still holds
            self.runner.log.warning("call.cancel_failed", path=command.path, error=str(e) or type(e).__name__)
