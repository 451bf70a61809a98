"""The workflow executor: serves every workflow of a folder as an agent and drives their executions.

For each loaded workflow a replica publishes a card, pulls the workflow's durable consumer on
``{NS}_TASKS`` (only as many requests as it has free execution slots) and answers its control
subject; the workflows are those of the folder and every enabled workflow of the definitions store
(:mod:`~a2amesh.executor.stored`). A request becomes an execution created with NX in Redis, *then* the
request is acked: the replica never holds a message while the execution runs. Executions are driven by
:class:`~a2amesh.executor.runner.ExecutionRunner` under a lease; a tick polls due timers of owned
executions and takes over executions whose lease expired. The folder is re-scanned for changes
(hot reload): new definitions serve new executions, running ones stay on their pinned version.

This module is the service alone (lifecycle, serving, reload). Its parts, each handed an
:class:`~a2amesh.executor.context.ExecutorContext`: :mod:`~a2amesh.executor.intake` (the one create
path, for requests and schedules), :mod:`~a2amesh.executor.resume` (paused executions),
:mod:`~a2amesh.executor.takeover` (leases, adoption, unanswered finals) and
:mod:`~a2amesh.executor.control` (the control plane's backend).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2amesh import metrics
from a2amesh.bus.nats import Bus, Received, WorkMsg
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import ConfigError
from a2amesh.executor.cards import workflow_card
from a2amesh.executor.catalog import Catalog, CatalogChange
from a2amesh.executor.context import Drivers, ExecutorContext
from a2amesh.executor.control import ExecutionControl
from a2amesh.executor.deltas import DeltaRelay
from a2amesh.executor.intake import CONTROL_TYPES, ExecutionIntake
from a2amesh.executor.presence import PresenceKeeper
from a2amesh.executor.resume import Resumer
from a2amesh.executor.runner import ExecutionRunner, RunnerDeps
from a2amesh.executor.scheduler import ScheduledGraph, Scheduler, scheduled_graphs
from a2amesh.executor.starts import starters
from a2amesh.executor.stored import StoredWorkflows
from a2amesh.executor.takeover import Takeover
from a2amesh.ids import instance_id
from a2amesh.lifecycle import Background, Worker
from a2amesh.logs import get_logger
from a2amesh.registry import CardPublisher
from a2amesh.service import ProcessService
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.definitions import DefinitionStore
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from a2amesh.store.tasks import TaskStore
from a2amesh.worker.control import ControlPlane
from a2amesh.worker.decode import WorkRequest
from a2amesh.worker.endpoint import Endpoint
from a2amesh.worker.intake import Intake
from a2amesh.workflow.formats import Loaded

__all__ = ["CONTROL_TYPES", "WorkflowExecutor", "executor_service"]


@dataclass
class _Served:
    """One workflow this replica serves."""

    name: str
    digest: str
    endpoint: Endpoint


class WorkflowExecutor(Worker):
    """Serves the workflows of a folder; ``run()`` returns when shutdown is done.

    Args:
        folder: the folder of workflow definitions.
        bus: an open bus (not closed here).
        redis: a Redis client (not closed here).
        settings: the process settings.
        instance: this replica's instance id (fresh by default).
        reload_interval: seconds between scans of the folder.
        store_interval: seconds between reconciles with the definitions store when no event came.
        on_folder_change: called after a scan found a file's workflows changed (``a2amesh executor`` applies
            the folder into the store with it).
        serve_folder: serve the folder's workflows themselves (``False`` when the folder is applied into the
            store: the store alone is then what is served, so a delete through the API takes a workflow off).
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
        store_interval: float = 5.0,
        on_folder_change: Callable[[], Awaitable[None]] | None = None,
        serve_folder: bool = True,
    ) -> None:
        super().__init__()
        self.folder = folder
        self.bus = bus
        self.settings = settings
        self.instance = instance or instance_id(settings.reply_scope)
        self.reload_interval = reload_interval
        self.catalog = Catalog(folder, serve_folder=serve_folder)
        self.on_folder_change = on_folder_change
        self._changes = asyncio.Lock()
        """Serialises applying catalog changes (folder scans and store reconciles)."""
        keys = Keys(settings.namespace)
        self.client = Client(bus, settings, instance=self.instance)
        self.store = ExecutionStore(redis, keys, retention=settings.task_retention, lease_ttl=settings.lease_ttl)
        self.tasks = TaskStore(redis, keys, retention=settings.task_retention, queued_ttl=settings.tasks_max_age)
        artifacts = ArtifactStore(
            redis, keys, retention=settings.artifact_retention, max_bytes=settings.artifact_max_bytes
        )
        self.max_executions = settings.max_executions_per_replica
        self.served: dict[str, _Served] = {}
        self.log = get_logger("executor", instance=self.instance)
        self.drivers = Drivers(self.log, on_end=self._wake_consumers)
        self.background = Background(on_error=self._crashed)
        """The replica's loops and other background work (the executions' drivers are :attr:`drivers`')."""
        self._intake_tasks = Background()
        """Requests being taken in (each holds an execution slot until it is created or refused)."""
        self.deltas = DeltaRelay(bus, self.instance)
        self.presence = PresenceKeeper(self.store.presence, self.instance, self.drivers.runners, self.log)
        self.ctx = ExecutorContext(
            bus=bus,
            client=self.client,
            settings=settings,
            instance=self.instance,
            store=self.store,
            tasks=self.tasks,
            artifacts=artifacts,
            catalog=self.catalog,
            deps=RunnerDeps(
                bus,
                self.client,
                self.store,
                self.tasks,
                artifacts,
                settings,
                self.instance,
                deltas=self.deltas,
                alive=self.presence.alive,
            ),
            drivers=self.drivers,
            background=self.background,
            log=self.log,
            free_slots=self._free_slots,
            stopping=lambda: self._stop.is_set(),
        )
        self.executions = ExecutionIntake(self.ctx, starters(self.store))
        self.resumer = Resumer(self.ctx)
        self.takeover = Takeover(self.ctx)
        self.intake = Intake(bus, settings, log=self.log, accept=self._accept)
        self.control = ControlPlane(bus, settings, self.tasks, ExecutionControl(self.ctx, self.resumer), log=self.log)
        self._tick = max(0.05, min(0.25, settings.lease_ttl / 8))
        self.scheduler = Scheduler(
            ScheduleStore(redis, keys), self.store, start=self.executions.start_scheduled, timezone=settings.timezone
        )
        self._scheduled: tuple[object, dict[str, ScheduledGraph]] = (None, {})
        self.stored = StoredWorkflows(
            bus, DefinitionStore(redis, keys), self._apply_stored, log=self.log, interval=store_interval
        )

    @property
    def fenced(self) -> int:
        """Executions whose step write was refused by a stale lease epoch (each counted once)."""
        return self.ctx.deps.fenced.count

    @property
    def runners(self) -> dict[str, ExecutionRunner[Any]]:
        """The runners of the executions driven here, by execution id."""
        return self.drivers.runners

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`shutdown`; then stop pulling, let executions finish or hand them over."""
        await init_mesh(self.bus, self.settings)
        await self.client.start()
        try:
            await self.presence.start()  # present before it drives anything
            change = await asyncio.to_thread(self.catalog.scan)
            for problem in change.errors.values():
                self.log.error("workflow.invalid", error=problem)
            # the control plane's CancelTask answers still waiting are awaited before the stores close
            async with self.control:
                try:
                    for name in sorted(self.catalog.workflows):
                        await self._serve(name)
                    await self.stored.start()
                    loops = (self._heartbeat_loop, self.takeover.renew_loop, self._tick_loop, self._reload_loop)
                    for loop in (*loops, self.stored.loop):
                        self.background.spawn(loop(), name=f"executor-{loop.__name__}")
                    self.log.info("executor.ready", workflows=sorted(self.served), folder=str(self.folder))
                    if metrics.enabled:
                        metrics.track_runners(lambda: len(self.drivers))
                    self.ready.set()
                    await self._stop.wait()
                finally:
                    await self._shutdown_sequence()
        finally:
            await self.stored.stop()
            await self.deltas.close()
            with contextlib.suppress(Exception):
                await self.presence.withdraw()  # what it drove is handed over: nothing left to take over
            await self.client.close()
            await self.store.aclose()
            await self.tasks.aclose()
            self.log.info("executor.stopped")
            self._stopped.set()

    def _crashed(self, error: BaseException) -> None:
        self.log.error("executor.task_crashed", error=repr(error))

    def _wake_consumers(self) -> None:
        for served in self.served.values():
            served.endpoint.wake()

    async def _shutdown_sequence(self) -> None:
        """Leave every workflow's endpoint (see :mod:`~a2amesh.worker.endpoint`): first no workflow pulls (each
        one's queued messages nak'ed), then the requests being taken in and the drivers finish or hand over,
        then the control subjects are unsubscribed and the cards withdrawn."""
        endpoints = [s.endpoint for s in self.served.values()]
        # all pulls end together: a pull loop still taking work would fill the slots the drain frees
        await asyncio.gather(*(e.stop_pulling() for e in endpoints))
        await self._intake_tasks.wait(timeout=5)
        await self.drivers.stop(self.store, grace=self.settings.shutdown_grace)
        self.background.cancel()
        await self.background.wait(timeout=5)
        for endpoint in endpoints:
            await endpoint.close()
        # all at once: each is bounded (WITHDRAW_LIMIT) when NATS is away, so the stop is bounded once, not per card
        await asyncio.gather(*(e.withdraw() for e in endpoints))
        self.served.clear()

    # --- serving workflows -------------------------------------------------------------------

    async def _serve(self, name: str) -> None:
        workflow = self.catalog.workflows[name]
        card = workflow_card(
            name, workflow.definition, self.settings.namespace, digest=workflow.digest, mcp_export=workflow.mcp_export
        )
        publisher = CardPublisher(self.bus, card, instance=self.instance, card_ttl=self.settings.card_ttl)

        async def on_control(msg: Received) -> None:
            await self.control.handle(msg, name)

        def start(msg: WorkMsg) -> None:
            task = self._intake_tasks.spawn(self.intake.handle(msg, name))
            task.add_done_callback(lambda _: endpoint.wake())

        endpoint = Endpoint(
            self.bus,
            self.settings,
            publisher,
            on_control=on_control,
            start_work=start,
            free=lambda: min(self._free_slots(), 64),
            until=self._stop,
            max_ack_pending=max(self.max_executions * 2, 256),
            heartbeat=False,  # every served card is refreshed by the one _heartbeat_loop
        )
        try:
            await endpoint.publish()
        except ConfigError as e:
            self.log.error("workflow.not_served", workflow=name, error=str(e))
            return
        await endpoint.start()
        self.served[name] = _Served(name, workflow.digest, endpoint)
        self.log.info("workflow.served", workflow=name, digest=workflow.digest[:12])

    async def _unserve(self, name: str) -> None:
        served = self.served.pop(name, None)
        if served is None:
            return
        await served.endpoint.stop()
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
        before = {name: w.digest for name, w in self.catalog.folder_workflows.items()}
        async with self._changes:
            change = await asyncio.to_thread(self.catalog.scan)
            await self._apply_change(change)
        after = {name: w.digest for name, w in self.catalog.folder_workflows.items()}
        if self.on_folder_change is not None and after != before:
            await self.on_folder_change()

    async def _apply_stored(self, stored: dict[str, Loaded[Any]]) -> None:
        async with self._changes:
            change = self.catalog.set_stored(stored)
            await self._apply_change(change)

    async def _apply_change(self, change: CatalogChange) -> None:
        if self._stop.is_set():
            return
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
            served.endpoint.publisher.card = workflow_card(
                name,
                workflow.definition,
                self.settings.namespace,
                digest=workflow.digest,
                mcp_export=workflow.mcp_export,
            )
            await served.endpoint.publisher.refresh()
            self.log.info("workflow.reloaded", workflow=name, digest=workflow.digest[:12])

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.card_ttl / 3)
            for served in list(self.served.values()):
                try:
                    await served.endpoint.publisher.refresh()
                except Exception as e:
                    self.log.warning("card.refresh_failed", workflow=served.name, error=str(e) or type(e).__name__)

    def _free_slots(self) -> int:
        return self.max_executions - len(self.drivers) - len(self._intake_tasks)

    async def _accept(self, msg: WorkMsg, request: WorkRequest) -> None:
        """A valid request (the intake's ``accept``): a new run, or the answer to a paused one; then ack."""
        workflow = self.catalog.workflows.get(request.agent)
        if workflow is None:
            await msg.nak(delay=1)
            return
        if metrics.enabled:  # queue wait, redeliveries and backlog of the workflow's requests, as an agent's
            metrics.task_received(request.agent, msg.num_delivered, *msg.queue_info(), time.time())
        async with msg.kept_alive(self.settings.ack_wait / 3):  # Redis may be slow or paused
            if request.message.task_id:
                await self.resumer.resume(msg, request)
            else:
                await self.executions.start_request(workflow, msg, request)

    # --- the tick ------------------------------------------------------------------------------

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
        await self.takeover.tick()

    def _scheduled_graphs(self) -> dict[str, ScheduledGraph]:
        source = self.catalog.workflows  # a new dict after every scan that changed something
        if self._scheduled[0] is not source:
            self._scheduled = (source, scheduled_graphs(source.values()))
        return self._scheduled[1]


def executor_service(
    folder: Path,
    settings: Settings,
    *,
    reload_interval: float = 1.0,
    on_folder_change: Callable[[], Awaitable[None]] | None = None,
    serve_folder: bool = True,
) -> ProcessService:
    """The process of one executor replica over a folder of definitions (and the definitions store)."""
    return ProcessService(
        settings,
        name="executor",
        build=lambda bus, redis: WorkflowExecutor(
            folder,
            bus=bus,
            redis=redis,
            settings=settings,
            reload_interval=reload_interval,
            on_folder_change=on_folder_change,
            serve_folder=serve_folder,
        ),
    )
