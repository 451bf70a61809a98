"""Routes of schedules: list them with their next fire times, pause, resume, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from a2amesh.gateway.api.deps import ApiMesh, mesh_of
from a2amesh.gateway.api.executions import CONFLICT, NOT_FOUND, Admin, Reader, Runner, translated
from a2amesh.manage.schedules import Schedule, SchedulePage, Schedules
from a2amesh.store.schedules import schedule_id

__all__ = ["router"]

router = APIRouter(prefix="/api/schedules", tags=["schedules"])

NAME = r"^[A-Za-z0-9_-]+$"
Workflow = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME, description="The workflow.")]
Branch = Annotated[
    str, Path(min_length=1, max_length=200, pattern=NAME, description="The branch (``main``: the workflow's graph).")
]


def schedules_of(mesh: ApiMesh) -> Schedules:
    """The process's :class:`Schedules`."""
    return mesh.manage.schedules


@router.get("", response_model=SchedulePage, summary="Every schedule with its next fire time")
async def list_schedules(
    request: Request,
    who: Reader,
    workflow: Annotated[str | None, Query(max_length=200, pattern=NAME, description="Only this workflow's.")] = None,
) -> SchedulePage:
    """Every schedule, by id (``{workflow}/{branch}``)."""
    async with translated():
        return await schedules_of(mesh_of(request)).all(workflow)


@router.post("/{workflow}/{branch}/pause", response_model=Schedule, responses=NOT_FOUND, summary="Pause a schedule")
async def pause(request: Request, who: Runner, workflow: Workflow, branch: Branch) -> Schedule:
    """No fire until resumed (a run in flight goes on)."""
    async with translated():
        return (await schedules_of(mesh_of(request)).pause(schedule_id(workflow, branch)))[0]


@router.post("/{workflow}/{branch}/resume", response_model=Schedule, responses=NOT_FOUND, summary="Resume a schedule")
async def resume(request: Request, who: Runner, workflow: Workflow, branch: Branch) -> Schedule:
    """Fire again from now on (ticks missed while paused are skipped)."""
    async with translated():
        return (await schedules_of(mesh_of(request)).resume(schedule_id(workflow, branch)))[0]


@router.delete(
    "/{workflow}/{branch}",
    status_code=204,
    response_class=Response,
    responses={**NOT_FOUND, **CONFLICT},
    summary="Delete a schedule no executor serves",
)
async def delete(request: Request, who: Admin, workflow: Workflow, branch: Branch) -> Response:
    """Remove a schedule left behind by a workflow no live executor serves (409 while one serves it)."""
    async with translated():
        await schedules_of(mesh_of(request)).delete(schedule_id(workflow, branch))
    return Response(status_code=204)
