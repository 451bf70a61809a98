"""The executor's side of the control plane (:class:`a2amesh.worker.control.ControlBackend`).

CancelTask of an execution running here, paused for a human, pausing, running elsewhere or never started; and
SubscribeToTask of an execution running here. Everything else (GetTask, ListTasks, the answers and their
errors, subscribing to a task that does not run here) is the shared :class:`~a2amesh.worker.control.ControlPlane`.

A cancel is first written as the execution's cancel mark (``exec_mark_cancel.lua``), which every later holder
honours: the runner applying the next step, a takeover, a resume, and a runner letting a paused execution go
(``exec_park.lua`` keeps the lease then, and the runner applies the cancellation). The canceller is answered
CANCELED only once the execution's CANCELED final is stored (docs/lifecycle.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from a2amesh.errors import TaskNotCancelable, TransportError
from a2amesh.executor.context import ExecutorContext
from a2amesh.executor.resume import Resumer
from a2amesh.executor.runner import ExecutionRunner
from a2amesh.lifecycle import CANCEL_ANSWER_LIMIT
from a2amesh.protocol import Task, TaskState
from a2amesh.store.tasks import Subscriber
from a2amesh.worker.control import AnswerNow, AnswerWhenStopped, Cancellation
from a2amesh.worker.replies import ReplyPublisher

__all__ = ["ExecutionControl"]

_FINISHED = ("completed", "failed", "canceled")

Wait = Callable[[], Awaitable[object]]
"""Waits until the execution's holder here has let it go (stopped, finished or parked)."""


class ExecutionControl:
    """Stops and follows the executions of one executor replica for the control plane.

    Args:
        ctx: the replica's collaborators.
        resumer: takes back a paused execution to cancel it.
    """

    def __init__(self, ctx: ExecutorContext, resumer: Resumer) -> None:
        self.ctx = ctx
        self.resumer = resumer

    async def cancel(self, agent: str, task_id: str, request: str) -> Cancellation:
        """CancelTask: cancel a running, pausing or paused execution, or a task that has not started."""
        step = await self._step(agent, task_id, request, settling=False)
        if step is None or isinstance(step, AnswerNow):
            return step

        async def current() -> Task | None:
            return await self.ctx.tasks.get(task_id)

        return AnswerWhenStopped(lambda: self._settle(agent, task_id, request, step), current)

    async def _settle(self, agent: str, task_id: str, request: str, wait: Wait) -> Task | None:
        """Wait for the holder here to let the execution go, then look again, until it is stored CANCELED."""
        while True:
            await wait()
            step = await self._step(agent, task_id, request, settling=True)
            if step is None:
                return None
            if isinstance(step, AnswerNow):
                return step.task
            wait = step

    async def _step(self, agent: str, task_id: str, request: str, *, settling: bool) -> AnswerNow | Wait | None:
        """One look at the execution, its cancel mark written first: the answer (stored CANCELED), what to wait
        for before looking again, or None when another replica holds it (that one answers).

        ``settling``: after a wait for a stop this cancel asked for, a CANCELED execution is its success; on the
        first look, one canceled by an earlier CancelTask is TaskNotCancelable.
        """
        ex = self.ctx
        status, canceled_by = await ex.store.mark_cancel(task_id, request)
        if status == "":
            return await self._cancel_task(agent, task_id, request)
        if status in _FINISHED:
            task = await ex.tasks.get(task_id)
            mine = settling or (bool(request) and canceled_by == request)
            if status == "canceled" and mine:
                if task is not None and task.status.state == TaskState.CANCELED:
                    return AnswerNow(task)
                if task is None or not task.status.state.terminal:
                    return _pause  # finished CANCELED, its final task not stored yet
            raise TaskNotCancelable(task_id, task.status.state.value if task is not None else status)
        runner = ex.drivers.runners.get(task_id)
        if runner is not None and not runner.finished.done():
            runner.cancel()  # applied as its next step, or when it parks (the mark keeps its lease then)
            return _finished(runner)
        owner = await ex.store.lease_owner(task_id)
        if owner == ex.instance:
            # leased here, its runner not launched yet (a create, takeover or resume between its lease and its
            # launch) or just ended: cancel it once launched, or look again
            return self._when_launched(task_id)
        if owner:
            return None  # its holder applies the mark and answers
        if status == "paused":
            parked = await self.resumer.cancel_parked(task_id)
            return _pause if parked is None else _finished(parked)
        return _pause  # running with no lease (a holder gone): a takeover applies the mark; look again

    async def _cancel_task(self, agent: str, task_id: str, request: str) -> AnswerNow | Wait:
        """CancelTask of a workflow task with no execution (still queued, or never sent): stored CANCELED, unless
        its execution was created meanwhile (then looked at again)."""
        ex = self.ctx
        view = await ex.tasks.cancel(task_id, agent, request, workflow=True)
        if view.outcome == "terminal":
            raise TaskNotCancelable(task_id, view.state.value if view.state else "final")
        if view.outcome == "canceled" and view.task is not None:
            publisher = ReplyPublisher(ex.bus, ex.settings, agent=agent, task_id=task_id, attempt=1)
            for subscriber in view.subscribers:
                with contextlib.suppress(TransportError):
                    await publisher.final(
                        subscriber.subject, subscriber.answer_id(task_id), view.task, 1, streaming=False
                    )
            return AnswerNow(view.task)
        return _pause

    def _when_launched(self, task_id: str) -> Wait:
        async def launched() -> None:
            runner = self.ctx.drivers.runners.get(task_id)
            if runner is None:
                try:
                    async with asyncio.timeout(0.5):
                        runner = await self.ctx.drivers.launched(task_id)
                except TimeoutError:
                    return  # not launched after all (or already gone): look again
            runner.cancel()
            await asyncio.shield(runner.finished)

        return launched

    async def follow(self, agent: str, task_id: str, subscriber: Subscriber) -> bool:
        """SubscribeToTask of an execution running here: a snapshot of its task, then every event."""
        ex = self.ctx
        runner = ex.drivers.runners.get(task_id)
        if runner is None:
            if await ex.store.lease_owner(task_id) != ex.instance:
                return False  # not driven here: the control plane records the subscriber or answers the final
            # leased here a moment ago, its runner not launched yet: follow it once it is (not waited for here,
            # since control requests are answered one at a time)
            ex.background.spawn(self._follow_when_launched(agent, task_id, subscriber), name=f"follow-{task_id}")
            return True
        if runner.final_task is not None or runner.finished.done():
            return False  # its final is stored: the control plane answers with it
        await self._follow(agent, runner, subscriber)
        return True

    async def _follow(self, agent: str, runner: ExecutionRunner[Any], subscriber: Subscriber) -> None:
        """Follow a running execution: its progress from the runner, its next answer from the task record.

        The subscriber is recorded in the task's subscriber set first: the write that stores the task's next
        answer (its final, or the INPUT_REQUIRED of a pause) reads that set in the same script, so it answers this
        subscriber too; an answer stored already (a pause published a moment ago, its runner not yet parked) is
        sent here. The runner's targets alone would miss a pause answered while this was added (issue 35, #7)."""
        ex = self.ctx
        publisher = ReplyPublisher(ex.bus, ex.settings, agent=agent, task_id=runner.task_id, attempt=runner.epoch)
        answer_id = subscriber.answer_id(runner.task_id)
        view = await ex.tasks.add_subscriber(runner.task_id, subscriber)
        if view.outcome == "terminal" and view.task is not None:
            with contextlib.suppress(TransportError):
                await publisher.final(subscriber.subject, answer_id, view.task, 1, streaming=True)
            return
        if all(t.subject != subscriber.subject for t in runner.targets):
            runner.targets.append(subscriber)
        task = view.task or await ex.tasks.get(runner.task_id)
        if task is not None:
            with contextlib.suppress(TransportError):
                await publisher.snapshot(subscriber.subject, answer_id, task, 1)

    async def _follow_when_launched(self, agent: str, task_id: str, subscriber: Subscriber) -> None:
        try:
            async with asyncio.timeout(CANCEL_ANSWER_LIMIT):
                runner = await self.ctx.drivers.launched(task_id)
        except TimeoutError:
            runner = None
        with contextlib.suppress(Exception):
            if runner is not None and runner.final_task is None and not runner.finished.done():
                await self._follow(agent, runner, subscriber)
                return
            # over already (or never launched here): the final, as a subscriber to a finished task gets it
            final = runner.final_task if runner is not None else None
            if final is None:
                view = await self.ctx.tasks.add_subscriber(task_id, subscriber)
                final = view.task if view.outcome == "terminal" else None
            if final is not None:
                epoch = runner.epoch if runner is not None else 1
                publisher = ReplyPublisher(self.ctx.bus, self.ctx.settings, agent=agent, task_id=task_id, attempt=epoch)
                await publisher.final(subscriber.subject, subscriber.answer_id(task_id), final, 1, streaming=True)


def _finished(runner: ExecutionRunner[Any]) -> Wait:
    async def finished() -> None:
        await asyncio.shield(runner.finished)

    return finished


async def _pause() -> None:
    await asyncio.sleep(0.05)
