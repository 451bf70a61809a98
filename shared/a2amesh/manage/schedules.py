"""Schedules as the API, the CLI and MCP show them: list with next fire times, pause, resume, delete.

A schedule is registered by the executors that serve its workflow (:mod:`a2amesh.executor.scheduler`), so a
delete is refused while a live workflow card of that name exists — the next re-registration would bring
it back, fresh. Delete is for schedules left behind by workflows no executor serves any more; pause stops a
served one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from a2amesh.manage.failures import ActionConflict, NotFound
from a2amesh.protocol.states import Instant
from a2amesh.registry import Registry
from a2amesh.schedules import ScheduleState
from a2amesh.store.schedules import ScheduleStore, split_schedule_id

__all__ = ["Schedule", "SchedulePage", "Schedules"]


class Schedule(BaseModel):
    """One schedule (a workflow's own graph, or one of its branches)."""

    id: str = Field(description="``{workflow}/{branch}`` (``main``: the workflow's own graph).")
    workflow: str
    branch: str
    mode: str = Field(description="``interval`` or ``continuous``.")
    schedule: str | None = Field(None, description="The canonical schedule text.")
    describe: str = Field(description="The schedule in words.")
    timezone: str
    paused: bool
    running: bool = Field(description="A run it fired is in flight (continuous mode waits for it).")
    last_fire: Instant | None = Field(None, description="The last fire that made a run (UTC).")
    next_fire: Instant | None = Field(None, description="The next fire (UTC); null while paused or a run is in flight.")


class SchedulePage(BaseModel):
    """Every schedule, by id."""

    items: list[Schedule]
    next_cursor: str | None = None


def schedule_of(schedule: str, state: ScheduleState) -> Schedule:
    """The API view of a stored schedule state."""
    return Schedule(
        id=schedule,
        workflow=state.workflow,
        branch=state.branch,
        mode=state.mode,
        schedule=state.schedule,
        describe=state.spec.describe(),
        timezone=state.timezone,
        paused=state.paused,
        running=state.running,
        last_fire=state.last_fire,
        next_fire=state.next_fire,
    )


class Schedules:
    """Reads and steers the schedules of one namespace.

    Args:
        store: the schedule store.
        registry: the live cards (a delete is refused while the workflow is served).
    """

    def __init__(self, store: ScheduleStore, registry: Registry | None = None) -> None:
        self.store = store
        self.registry = registry

    async def all(self, workflow: str | None = None) -> SchedulePage:
        """Every schedule (of ``workflow``), by id."""
        found = [
            schedule_of(s.id, s.state)
            for s in await self.store.all()
            if s.state is not None and (not workflow or s.state.workflow == workflow)
        ]
        return SchedulePage(items=found)

    async def _chosen(self, target: str) -> list[str]:
        """The schedule ids ``target`` names: ``workflow/branch`` exactly, or every schedule of ``workflow``."""
        workflow, branch = split_schedule_id(target)
        chosen = [
            s.id
            for s in await self.store.all()
            if s.state is not None and s.state.workflow == workflow and branch in (None, s.state.branch)
        ]
        if not chosen:
            raise NotFound("schedule", target)
        return chosen

    async def pause(self, target: str) -> list[Schedule]:
        """Pause a schedule (``workflow/branch``), or every schedule of a workflow.

        Raises:
            NotFound: no such schedule.
        """
        out = []
        for schedule in await self._chosen(target):
            state = await self.store.pause(schedule)
            if state is not None:
                out.append(schedule_of(schedule, state))
        return out

    async def resume(self, target: str) -> list[Schedule]:
        """Resume a paused schedule from now (ticks missed while paused are skipped).

        Raises:
            NotFound: no such schedule.
        """
        out = []
        for schedule in await self._chosen(target):
            state = await self.store.resume(schedule, datetime.now(UTC))
            if state is not None:
                out.append(schedule_of(schedule, state))
        return out

    async def delete(self, target: str) -> list[str]:
        """Delete a schedule (its state and timer) whose workflow no live executor serves.

        Raises:
            NotFound: no such schedule.
            ActionConflict: the workflow is live (its executors would register the schedule again).
        """
        chosen = await self._chosen(target)
        workflow, _ = split_schedule_id(target)
        if self.registry is not None and self.registry.get(workflow) is not None:
            raise ActionConflict(
                f"workflow {workflow!r} is served by a live executor, which keeps its schedules registered; "
                "pause the schedule, or remove it from the workflow's definition"
            )
        deleted = []
        for schedule in chosen:
            stored = await self.store.get(schedule)
            if stored is not None and await self.store.write(schedule, stored.raw, None):
                deleted.append(schedule)
        return deleted
