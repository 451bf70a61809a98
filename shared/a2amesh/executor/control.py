"""The executor's side of the control plane (:class:`a2amesh.worker.control.ControlBackend`).

CancelTask of an execution running here, paused for a human, running elsewhere or never started; and
SubscribeToTask of an execution running here. Everything else (GetTask, ListTasks, the answers and their
errors, subscribing to a task that does not run here) is the shared :class:`~a2amesh.worker.control.ControlPlane`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from a2amesh.errors import RpcError, TaskNotCancelable, TransportError
from a2amesh.executor.runner import ExecutionRunner, open_runner
from a2amesh.protocol import Task, TaskState, TaskStatus, codes
from a2amesh.protocol.base import utc_timestamp
from a2amesh.store.executions import ExecutionRecord
from a2amesh.worker.control import AnswerNow, AnswerWhenStopped, Cancellation
from a2amesh.worker.replies import ReplyInfo, ReplyPublisher

if TYPE_CHECKING:
    from a2amesh.executor.service import WorkflowExecutor

__all__ = ["ExecutionControl"]


def _canceled(task: Task) -> Task:
    return task.model_copy(update={"status": TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp())})


class ExecutionControl:
    """Stops and follows the executions of one executor replica for the control plane."""

    def __init__(self, executor: WorkflowExecutor) -> None:
        self.ex = executor

    async def cancel(self, agent: str, task_id: str) -> Cancellation:
        """CancelTask: cancel a running or paused execution, or mark a task that has not started."""
        ex = self.ex
        runner = ex.runners.get(task_id)
        if runner is not None and runner.final_task is None and not runner.finished.done():
            runner.cancel()
            return self._when_stopped(runner)
        status = await ex.store.mark_cancel(task_id)
        if status == "":
            view = await ex.tasks.mark_canceled(task_id)
            if view.outcome == "terminal":
                raise TaskNotCancelable(task_id, view.state.value if view.state else "final")
            return AnswerNow(Task(id=task_id, status=TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp())))
        if status == "paused":
            return await self._cancel_parked(task_id)
        if status != "running":
            raise TaskNotCancelable(task_id, status)
        if await ex.store.redis.get(ex.store.keys.lease(task_id)):
            return None  # its owner answers once the cancellation is applied
        task = await ex.tasks.get(task_id) or Task(id=task_id, status=TaskStatus(state=TaskState.WORKING))
        return AnswerNow(_canceled(task))

    def _when_stopped(self, runner: ExecutionRunner[Any]) -> AnswerWhenStopped:
        async def stopped() -> None:
            await asyncio.shield(runner.finished)

        async def task() -> Task | None:
            return runner.final_task or await self.ex.tasks.get(runner.task_id)

        return AnswerWhenStopped(stopped, task)

    async def _cancel_parked(self, task_id: str) -> Cancellation:
        """Cancel an execution paused for a human: take it back, apply the cancellation (``on_cancel`` runs).

        When another replica holds it (a resume being applied), the ``cancel`` mark set by
        ``exec_mark_cancel.lua`` makes that replica apply the cancellation; it answers the callers it has.
        """
        ex = self.ex
        outcome, epoch = await ex.store.acquire(task_id, ex.instance)
        if outcome != "acquired":
            return None
        record = await ex.store.execution(task_id) or ExecutionRecord()
        raw = await ex.store.state(task_id)
        engine = await ex._engine_for(record.digest)
        if raw is None or engine is None:
            await ex.store.release(task_id, f"{ex.instance}:{epoch}", handover=False)
            raise RpcError(codes.INTERNAL_ERROR, f"execution {task_id} cannot be canceled: its state is missing")
        reply = ReplyInfo.model_validate_json(record.reply or "{}")
        runner = open_runner(ex.deps, engine, raw, epoch=epoch, reply=reply)
        runner.cancel()
        ex.log.info("execution.cancel_paused", execution_id=task_id)
        ex._launch(runner, [])
        return self._when_stopped(runner)

    async def follow(self, agent: str, task_id: str, reply_to: str) -> bool:
        """SubscribeToTask of an execution running here: a snapshot of its task, then every event."""
        ex = self.ex
        runner = ex.runners.get(task_id)
        if runner is None or runner.final_task is not None or runner.finished.done():
            return False  # its final is stored: the control plane answers with it
        if reply_to not in runner.targets:
            runner.targets.append(reply_to)
        task = await ex.tasks.get(task_id)
        if task is not None:
            publisher = ReplyPublisher(ex.bus, ex.settings, agent=agent, task_id=task_id, attempt=runner.epoch)
            with contextlib.suppress(TransportError):
                await publisher.snapshot(reply_to, task_id, task, 1)
        return True
