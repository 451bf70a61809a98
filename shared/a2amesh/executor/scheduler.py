"""Schedules at run time (SPEC §7, seed 003): the executor's tick fires due schedules as executions.

Every replica runs the same :class:`Scheduler` from its tick; nothing is elected. The state of each
schedule (:class:`~a2amesh.schedules.ScheduleState`) and its timer live in Redis
(:mod:`a2amesh.store.schedules`), so any replica fires a tick and a restart loses nothing. One
tick of one replica:

1. **sync** (when its catalog changed, and every ``resync`` seconds): register each scheduled graph
   it serves — a DAG workflow, a graph workflow or one of its branches — unless Redis already holds
   it; replace a schedule whose mode, schedule or time zone changed in this replica's catalog
   (keeping ``paused``); delete the schedules of graphs that left its catalog;
2. **fire**: for every schedule whose timer is due, read the state and ask it which fire is due
   (at most one: the on-time tick or the single catch-up after downtime); create the execution
   ``sched:{workflow}:{branch}:{fire_ts}`` through the executor's NX creation path, *then* advance
   the state with a compare-and-set. Replicas that see the same tick compute the same id, so only
   one creates the run; a replica killed between the two steps leaves the state un-advanced and the
   next one finds the run already there and only advances it;
3. **continuous** schedules keep their timer due while their run is in flight; each tick reads the
   run's record and, once it has finished, stores the end, which puts the next start ``delay``
   seconds after it. A run never starts while the previous one is in flight.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from a2amesh import faults
from a2amesh.jsontext import JsonValue
from a2amesh.logs import get_logger
from a2amesh.schedules import ScheduleSpec, ScheduleState, resolve_timezone, run_id
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.schedules import ScheduleStore, StoredSchedule, schedule_id
from a2amesh.workflow.formats import Definition

__all__ = ["FINISHED", "ScheduledGraph", "Scheduler", "StartRun", "scheduled_graphs"]

FINISHED = frozenset({"completed", "failed", "canceled"})
"""Execution statuses after which a continuous schedule starts its next run."""
_ATTEMPTS = 5


@dataclass(frozen=True)
class ScheduledGraph:
    """One graph that runs on its own: a DAG workflow, a graph workflow, or one of its branches.

    Attributes:
        workflow: the workflow name.
        branch: the branch id, or ``None`` for the workflow's own graph.
        spec: its parsed ``executionMode`` + ``schedule`` (never one_time).
        input: the input of each run.
    """

    workflow: str
    branch: str | None
    spec: ScheduleSpec
    input: JsonValue

    @property
    def id(self) -> str:
        """The schedule id, ``{workflow}/{branch}``."""
        return schedule_id(self.workflow, self.branch)


class _Loaded(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def definition(self) -> Definition: ...


def scheduled_graphs(workflows: Iterable[_Loaded]) -> dict[str, ScheduledGraph]:
    """Every scheduled graph of loaded workflows (DAG and graph, with their branches), by schedule id."""
    graphs: dict[str, ScheduledGraph] = {}
    for workflow in workflows:
        for branch, spec, value in workflow.definition.schedules():
            graph = ScheduledGraph(workflow.name, branch, spec, value)
            graphs[graph.id] = graph
    return graphs


StartRun = Callable[[ScheduledGraph, str, datetime], Awaitable[bool | None]]
"""Start one run: ``(graph, execution id, fire) -> True`` (created now), ``False`` (it already
existed) or ``None`` (this replica cannot run it now: no free slot, shutting down, not served)."""


def _stamp(graph: ScheduledGraph, timezone: str) -> tuple[str, str | None, str]:
    return graph.spec.mode, graph.spec.text, timezone


def _matches(state: ScheduleState, graph: ScheduledGraph, timezone: str) -> bool:
    return (state.mode, state.schedule, state.timezone) == _stamp(graph, timezone)


def _instant(ms: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(ms) / 1000, UTC) if ms and ms.isdigit() else None


class Scheduler:
    """Fires the due schedules of the graphs one executor replica serves (call :meth:`tick` often).

    Args:
        store: schedule states and timers.
        executions: the execution store (to see when a continuous run ended).
        start: creates one run with a given execution id (NX) and drives it.
        timezone: the IANA time zone of calendar schedules (``Settings.timezone``).
        resync: seconds between re-registrations of this replica's schedules (repairs deletions).
        clock: the wall clock (epoch seconds).

    Raises:
        ConfigError: ``timezone`` is not a known time zone.
    """

    def __init__(
        self,
        store: ScheduleStore,
        executions: ExecutionStore,
        *,
        start: StartRun,
        timezone: str = "UTC",
        resync: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        resolve_timezone(timezone)
        self.store = store
        self.executions = executions
        self.start = start
        self.timezone = timezone
        self.resync = resync
        self.clock = clock
        self.log = get_logger("executor.scheduler")
        self._synced: dict[str, tuple[str, str | None, str]] = {}
        self._synced_at = 0.0

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    async def tick(self, graphs: Mapping[str, ScheduledGraph]) -> None:
        """Register what changed, then fire every due schedule this replica serves (errors are logged)."""
        try:
            stamps = {i: _stamp(g, self.timezone) for i, g in graphs.items()}
            if stamps != self._synced:
                await self.sync(graphs)
            elif self.clock() - self._synced_at >= self.resync:
                await self.sync(graphs, replace=False)
            now = self._now()
            due = await self.store.due(int(now.timestamp() * 1000))
        except Exception as e:
            self.log.warning("schedule.tick_failed", error=str(e) or type(e).__name__)
            return
        for schedule in due:
            graph = graphs.get(schedule)
            if graph is None:
                continue  # not served here (another replica's catalog, or a removed workflow)
            try:
                await self.fire(graph, self._now())
            except Exception as e:
                self.log.warning("schedule.fire_failed", schedule=schedule, error=str(e) or type(e).__name__)

    async def sync(self, graphs: Mapping[str, ScheduledGraph], *, replace: bool = True) -> None:
        """Make Redis hold a schedule for every graph served here.

        Args:
            graphs: this replica's scheduled graphs, by schedule id.
            replace: replace schedules whose mode, schedule or time zone differ from ours, and delete
                those that left our catalog (after a change of the catalog); without it, only
                register missing ones (the periodic repair, which must not fight a replica that
                already runs a newer version).
        """
        now = self._now()
        if replace:
            for schedule in set(self._synced) - set(graphs):
                await self._delete(schedule)
        for graph in graphs.values():
            await self.register(graph, now, replace=replace)
        self._synced = {i: _stamp(g, self.timezone) for i, g in graphs.items()}
        self._synced_at = self.clock()

    async def register(self, graph: ScheduledGraph, now: datetime, *, replace: bool = True) -> ScheduleState | None:
        """Store a graph's schedule unless an equal one exists; returns the state Redis holds."""
        for _ in range(_ATTEMPTS):
            stored = await self.store.get(graph.id)
            old = None if stored is None else stored.state
            if stored is not None and old is not None and (_matches(old, graph, self.timezone) or not replace):
                return old
            new = self._fresh(graph, old, now)
            if await self.store.write(graph.id, None if stored is None else stored.raw, new):
                self.log.info(
                    "schedule.registered",
                    schedule=graph.id,
                    mode=new.mode,
                    schedule_text=new.schedule,
                    next_fire=new.next_fire.isoformat() if new.next_fire else None,
                    replaced=stored is not None,
                )
                return new
        return None

    def _fresh(self, graph: ScheduledGraph, old: ScheduleState | None, now: datetime) -> ScheduleState:
        state = ScheduleState.new(graph.workflow, graph.spec, now=now, branch=graph.branch, timezone=self.timezone)
        if old is None:
            return state
        # A changed schedule keeps its history and its pause; it counts from now (no catch-up of the old one).
        kept = state.model_copy(update={"last_fire": old.last_fire, "last_end": old.last_end, "paused": True})
        kept = kept.resume(now)  # recomputes next_fire with the history
        return kept.pause() if old.paused else kept

    async def _delete(self, schedule: str) -> None:
        for _ in range(_ATTEMPTS):
            stored = await self.store.get(schedule)
            if stored is None or await self.store.write(schedule, stored.raw, None):
                self.log.info("schedule.removed", schedule=schedule)
                return

    async def fire(self, graph: ScheduledGraph, now: datetime) -> str | None:
        """Run the due fire of one schedule, if any; returns the execution id it made or found."""
        stored = await self.store.get(graph.id)
        if stored is None or stored.state is None:
            return None
        state = stored.state
        if state.paused:
            await self.store.write(graph.id, stored.raw, state)  # drops a stray timer
            return None
        if state.running:
            await self._check_end(graph, stored, state)
            return None
        fire = state.due(now)
        if fire is None:
            await self.store.write(graph.id, stored.raw, state)  # early: re-arm at next_fire
            return None
        execution_id = run_id(graph.workflow, graph.branch, fire)
        created = await self.start(graph, execution_id, fire)
        if created is None:
            return None  # another replica (or a later tick) runs it; the state is left as it was
        faults.crash_point("after_schedule_fire_before_advance")
        advanced = state.fired(fire)
        if await self.store.write(graph.id, stored.raw, advanced):
            self.log.info(
                "schedule.fired",
                schedule=graph.id,
                execution_id=execution_id,
                fire=fire.isoformat(),
                late_s=round((now - fire).total_seconds(), 3),
                created=created,
                next_fire=advanced.next_fire.isoformat() if advanced.next_fire else None,
            )
        return execution_id

    async def _check_end(self, graph: ScheduledGraph, stored: StoredSchedule, state: ScheduleState) -> None:
        assert state.last_fire is not None
        execution_id = run_id(graph.workflow, graph.branch, state.last_fire)
        record = await self.executions.record(execution_id)
        if record is None:
            ended = self._now()  # the record expired or was never made: nothing is in flight
        elif record.get("status") in FINISHED:
            ended = _instant(record.get("finished")) or self._now()
        else:
            return
        if await self.store.write(graph.id, stored.raw, state.ended(ended)):
            self.log.info("schedule.run_ended", schedule=graph.id, execution_id=execution_id, ended=ended.isoformat())
