"""The agent host's side of the control plane (:class:`~a2amesh.worker.control.ControlBackend`): CancelTask of
a task held here, and SubscribeToTask of a task running here (SPEC §3.6)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from a2amesh.agent.runs import Run
from a2amesh.errors import TaskNotCancelable
from a2amesh.protocol import Task, TaskState
from a2amesh.store.tasks import Subscriber, TaskRecordView, TaskStore
from a2amesh.worker.control import AnswerNow, AnswerWhenStopped, Cancellation

__all__ = ["AgentControl"]


class AgentControl:
    """Cancels and follows one agent's tasks for its host.

    Args:
        tasks: the task records.
        agent: the agent's name.
        instance: the host's instance id (the owner a claim names).
        running: the host's runs by task id (read, never changed here).
        answer: sends a subscriber a stored final (the host's, with its reply sender).
    """

    def __init__(
        self,
        tasks: TaskStore,
        *,
        agent: str,
        instance: str,
        running: Mapping[str, Run],
        answer: Callable[[Subscriber, Task, int], Awaitable[None]],
    ) -> None:
        self.tasks = tasks
        self.agent = agent
        self.instance = instance
        self._running = running
        self._answer = answer

    async def cancel(self, agent: str, task_id: str, request: str) -> Cancellation:
        """CancelTask: store the task CANCELED when nobody holds it; when it runs here, stop it (it stores its own
        CANCELED final) and answer then; when it runs on another replica, that one answers."""
        view = await self.tasks.cancel(task_id, self.agent, request)
        if view.outcome == "terminal":
            raise TaskNotCancelable(task_id, view.state.value if view.state else "final")
        if view.outcome == "canceled":
            assert view.task is not None
            await self._answer_canceled(view)
            return AnswerNow(view.task)
        run = self._running.get(task_id)
        if run is None and view.owner != self.instance:
            return None  # the owning replica answers
        if run is not None:
            run.request_cancel()

        async def current() -> Task | None:
            return await self.tasks.get(task_id)

        return AnswerWhenStopped(lambda: self._settle_cancel(task_id, request, run), current)

    async def _settle_cancel(self, task_id: str, request: str, run: Run | None) -> Task | None:
        """The answer of a CancelTask of a task held here, once it has stopped: stored CANCELED (by its run, or by
        this cancel if it paused meanwhile), else TaskNotCancelable; None when another replica took it."""
        while True:
            if run is not None:
                await run.finished.wait()
            else:
                await asyncio.sleep(0.02)  # claimed here, its run not registered (yet, or any more)
            view = await self.tasks.cancel(task_id, self.agent, request)
            if view.outcome == "canceled":
                await self._answer_canceled(view)
                return view.task
            if view.outcome == "terminal":
                if view.state == TaskState.CANCELED:
                    return view.task  # stopped by this cancel (or one at the same time)
                raise TaskNotCancelable(task_id, view.state.value if view.state else "final")
            run = self._running.get(task_id)
            if run is None and view.owner != self.instance:
                return None  # another replica holds it now: it answers
            if run is not None:
                run.request_cancel()

    async def _answer_canceled(self, view: TaskRecordView) -> None:
        """Answer the subscribers of a task this replica just stored CANCELED (callers that followed it queued)."""
        assert view.task is not None
        for subscriber in view.subscribers:
            await self._answer(subscriber, view.task, 1)

    async def follow(self, agent: str, task_id: str, subscriber: Subscriber) -> bool:
        """SubscribeToTask of a task running here: the subscriber gets a snapshot (one per subscriber, whoever
        sends it), then every event."""
        run = self._running.get(task_id)
        if run is None or run.msg is None or run.final_stored:
            return False
        target = run.add_target(subscriber)
        if target is not None:
            await run.publisher.snapshot(target.subject, target.answer_id, run.task, run.seq)
        return True
