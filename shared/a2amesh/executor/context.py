"""What the parts of one executor replica share: its connections and stores, its catalog, and the
executions it drives.

:class:`ExecutorContext` is handed to the intake, resume, takeover and control-plane parts explicitly
(none of them reaches into another's attributes); :class:`Drivers` is the one owner of the tasks that
drive this replica's executions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from a2amesh import metrics, tracing
from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.executor.catalog import Catalog
from a2amesh.executor.runner import ExecutionRunner, RunnerDeps
from a2amesh.lifecycle import STOP_LIMIT, Background, cancel_and_wait
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import ExecutionRecord, ExecutionStore
from a2amesh.store.tasks import TaskStore
from a2amesh.worker.replies import ReplyInfo
from a2amesh.workflow.engine_protocol import ExecutableEngine

__all__ = ["Drivers", "ExecutorContext", "stored_reply_to"]


class Drivers:
    """The executions this replica drives: a runner each, driven by a task owned here.

    Args:
        log: the executor's logger.
        on_end: called whenever an execution stops being driven here (a slot is free again).
    """

    def __init__(self, log: Any, on_end: Callable[[], None]) -> None:
        self.runners: dict[str, ExecutionRunner[Any]] = {}
        self._launched: dict[str, asyncio.Future[ExecutionRunner[Any]]] = {}
        """Executions leased here whose runner is not launched yet, awaited by a CancelTask that came early."""
        self.tasks: dict[str, asyncio.Task[None]] = {}
        """The driver task of each execution (an index: the tasks are owned by the supervisor below)."""
        self._log = log
        self._on_end = on_end
        self._owner = Background()

    def __len__(self) -> int:
        return len(self.runners)

    def launch(
        self,
        runner: ExecutionRunner[Any],
        commands: list[BaseModel],
        *,
        call_ids: dict[str, str] | None = None,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Drive ``runner`` from now on: ``before`` (a takeover's pick-up), then the already-checkpointed
        ``commands``, then its events until the execution ends or is let go."""
        execution_id = runner.execution_id
        self.runners[execution_id] = runner
        waiting = self._launched.pop(execution_id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(runner)

        initial: list[Any] = [commands, call_ids]  # handed over once, not kept by this closure

        async def drive() -> None:
            try:
                with tracing.use(runner.span):  # the runner's log lines carry its trace
                    if before is not None:
                        await before()
                    await runner.run(initial.pop(0), call_ids=initial.pop(0))
            except Exception as e:
                # e.g. the final could not be published: the finished execution stays indexed for a takeover,
                # whose retries are bounded (Takeover.retry_final)
                self._log.warning("execution.driver_failed", execution_id=execution_id, error=str(e) or repr(e))
            finally:
                if runner.span is not None:
                    tracing.execution_done(runner.span, str(runner.state.status), lost=runner.lost)
                state = runner.state
                if metrics.enabled and state.finished and state.finished_at is not None:
                    metrics.execution_finished(state.workflow, str(state.status), state.finished_at - state.started_at)
                if runner.fenced and not runner.state.finished:
                    # stopped for a lapsed presence: hand over at once (a no-op if another replica took it)
                    with contextlib.suppress(Exception):
                        await runner.deps.store.release(execution_id, runner.token, handover=True)
                if self.runners.get(execution_id) is runner:
                    del self.runners[execution_id]
                self.tasks.pop(execution_id, None)
                self._on_end()

        self.tasks[execution_id] = self._owner.spawn(drive(), name=f"exec-{execution_id}")

    async def launched(self, execution_id: str) -> ExecutionRunner[Any]:
        """The runner of an execution this replica leased but has not launched yet, once it is launched
        (its lease was taken and the runner is being made: a create, a takeover or a resume)."""
        runner = self.runners.get(execution_id)
        if runner is not None:
            return runner
        waiting = self._launched.get(execution_id)
        if waiting is None:
            waiting = self._launched[execution_id] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.shield(waiting)
        finally:
            if self._launched.get(execution_id) is waiting and not waiting.done():
                del self._launched[execution_id]  # given up on (the caller's limit): forget it

    async def stop(self, store: ExecutionStore, *, grace: float) -> None:
        """Shutdown: let the executions run ``grace`` seconds, then stop the rest and hand them over."""
        if self.tasks:
            self._log.info("executor.draining", running=len(self.tasks), grace=grace)
            await asyncio.wait(set(self.tasks.values()), timeout=grace)
        for execution_id, driver in list(self.tasks.items()):
            runner = self.runners.get(execution_id)
            if not await cancel_and_wait(driver, limit=STOP_LIMIT):
                # still running: no hand-over; its lease expires and the epoch fence refuses its writes
                self._log.warning("execution.driver_left_running", execution_id=execution_id, waited=STOP_LIMIT)
                continue
            if runner is not None and not runner.lost and not runner.state.finished:
                with contextlib.suppress(Exception):
                    await store.release(execution_id, runner.token, handover=True)
                    self._log.info("execution.handed_over", execution_id=execution_id)


@dataclass(frozen=True, slots=True)
class ExecutorContext:
    """The collaborators of one executor replica's parts.

    Attributes:
        bus: the open bus.
        client: the replica's client (node calls, forwarded resumes).
        settings: the process settings.
        instance: this replica's instance id (the lease owner).
        store: executions in Redis.
        tasks: A2A task records.
        artifacts: artifacts (large inputs and outputs).
        catalog: the served definitions, and every engine loaded.
        deps: what each runner is built with.
        drivers: the executions driven here.
        background: the owner of the replica's other background tasks.
        log: the executor's logger.
        free_slots: how many more executions this replica may take now.
        stopping: whether the replica is shutting down.
    """

    bus: Bus
    client: Client
    settings: Settings
    instance: str
    store: ExecutionStore
    tasks: TaskStore
    artifacts: ArtifactStore
    catalog: Catalog
    deps: RunnerDeps
    drivers: Drivers
    background: Background
    log: Any
    free_slots: Callable[[], int]
    stopping: Callable[[], bool]

    async def engine_for(self, digest: str) -> ExecutableEngine[Any] | None:
        """The engine of a pinned definition version: from the catalog, else its snapshot in Redis."""
        engine = self.catalog.engine(digest)
        if engine is not None:
            return engine
        data = await self.store.load_definition(digest)
        return None if data is None else self.catalog.from_snapshot(digest, data)


def stored_reply_to(record: ExecutionRecord) -> str | None:
    """The reply subject an execution's caller gave (None when there is none or it does not parse)."""
    try:
        return ReplyInfo.model_validate_json(record.reply or "{}").reply_to
    except ValueError:
        return None
