"""The executor's side of the control plane (:class:`a2amesh.worker.control.ControlBackend`).

CancelTask of an execution running here, paused for a human, running elsewhere or never started; and
SubscribeToTask of an execution running here. Everything else (GetTask, ListTasks, the answers and their
errors, subscribing to a task that does not run here) is the shared :class:`~a2amesh.worker.control.ControlPlane`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from a2amesh.errors import TaskNotCancelable, TransportError
from a2amesh.executor.context import ExecutorContext
from a2amesh.executor.resume import Resumer
from a2amesh.executor.runner import ExecutionRunner
from a2amesh.lifecycle import CANCEL_ANSWER_LIMIT
from a2amesh.protocol import Task, TaskState, TaskStatus
from a2amesh.protocol.base import utc_timestamp
from a2amesh.worker.control import AnswerNow, AnswerWhenStopped, Cancellation
from a2amesh.worker.replies import ReplyPublisher

__all__ = ["ExecutionControl"]


def _canceled(task: Task) -> Task:
    return task.model_copy(update={"status": TaskStatus(state=TaskState.CANCELED, timestamp=utc_timestamp())})


class ExecutionControl:
    """Stops and follows the executions of one executor replica for the control plane.

    Args:
        ctx: the replica's collaborators.
        resumer: takes back a paused execution to cancel it.
    """

    def __init__(self, ctx: ExecutorContext, resumer: Resumer) -> None:
        self.ctx = ctx
        self.resumer = resumer

    async def cancel(self, agent: str, task_id: str) -> Cancellation:
        """CancelTask: cancel a running or paused execution, or mark a task that has not started."""
        ex = self.ctx
        runner = ex.drivers.runners.get(task_id)
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
            # taken back here to apply it (on_cancel runs); held elsewhere (a resume being applied), the
            # cancel mark just set makes that replica apply it and answer the callers it has
            parked = await self.resumer.cancel_parked(task_id)
            return None if parked is None else self._when_stopped(parked)
        if status != "running":
            raise TaskNotCancelable(task_id, status)
        owner = await ex.store.lease_owner(task_id)
        if owner == ex.instance:
            # leased here a moment ago, its runner not launched yet (a create, takeover or resume between its
            # lease and its launch): cancel it once it is
            return self._when_launched(task_id)
        if owner:
            return None  # its owner answers once the cancellation is applied
        task = await ex.tasks.get(task_id) or Task(id=task_id, status=TaskStatus(state=TaskState.WORKING))
        return AnswerNow(_canceled(task))

    def _when_launched(self, task_id: str) -> AnswerWhenStopped:
        launched: list[ExecutionRunner[Any]] = []

        async def stopped() -> None:
            runner = await self.ctx.drivers.launched(task_id)
            launched.append(runner)
            runner.cancel()
            await asyncio.shield(runner.finished)

        async def task() -> Task | None:
            final = launched[0].final_task if launched else None
            return final or await self.ctx.tasks.get(task_id)

        return AnswerWhenStopped(stopped, task)

    def _when_stopped(self, runner: ExecutionRunner[Any]) -> AnswerWhenStopped:
        async def stopped() -> None:
            await asyncio.shield(runner.finished)

        async def task() -> Task | None:
            return runner.final_task or await self.ctx.tasks.get(runner.task_id)

        return AnswerWhenStopped(stopped, task)

    async def follow(self, agent: str, task_id: str, reply_to: str) -> bool:
        """SubscribeToTask of an execution running here: a snapshot of its task, then every event."""
        ex = self.ctx
        runner = ex.drivers.runners.get(task_id)
        if runner is None:
            if await ex.store.lease_owner(task_id) != ex.instance:
                return False  # not driven here: the control plane records the subscriber or answers the final
            # leased here a moment ago, its runner not launched yet: follow it once it is (not waited for here,
            # since control requests are answered one at a time)
            ex.background.spawn(self._follow_when_launched(agent, task_id, reply_to), name=f"follow-{task_id}")
            return True
        if runner.final_task is not None or runner.finished.done():
            return False  # its final is stored: the control plane answers with it
        await self._follow(agent, runner, reply_to)
        return True

    async def _follow(self, agent: str, runner: ExecutionRunner[Any], reply_to: str) -> None:
        ex = self.ctx
        if reply_to not in runner.targets:
            runner.targets.append(reply_to)
        task = await ex.tasks.get(runner.task_id)
        if task is not None:
            publisher = ReplyPublisher(ex.bus, ex.settings, agent=agent, task_id=runner.task_id, attempt=runner.epoch)
            with contextlib.suppress(TransportError):
                await publisher.snapshot(reply_to, runner.task_id, task, 1)

    async def _follow_when_launched(self, agent: str, task_id: str, reply_to: str) -> None:
        try:
            async with asyncio.timeout(CANCEL_ANSWER_LIMIT):
                runner = await self.ctx.drivers.launched(task_id)
        except TimeoutError:
            runner = None
        with contextlib.suppress(Exception):
            if runner is not None and runner.final_task is None and not runner.finished.done():
                await self._follow(agent, runner, reply_to)
                return
            # over already (or never launched here): the final, as a subscriber to a finished task gets it
            final = runner.final_task if runner is not None else None
            if final is None:
                view = await self.ctx.tasks.add_subscriber(task_id, reply_to)
                final = view.task if view.outcome == "terminal" else None
            if final is not None:
                epoch = runner.epoch if runner is not None else 1
                publisher = ReplyPublisher(self.ctx.bus, self.ctx.settings, agent=agent, task_id=task_id, attempt=epoch)
                await publisher.final(reply_to, task_id, final, 1, streaming=True)
