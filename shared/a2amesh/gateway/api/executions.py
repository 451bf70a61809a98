"""Routes of executions: execute a workflow, list and read executions and their nodes, cancel, resume, retry.

Thin: each route checks the caller's scope, lets pydantic validate the request, and calls
:mod:`a2amesh.manage` (the code the CLI and the MCP server run too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, Field

from a2amesh.bus import headers as h
from a2amesh.errors import RpcError, StoreUnavailable, TransportError
from a2amesh.gateway.api.deps import ApiMesh, mesh_of, require
from a2amesh.gateway.api.problems import Problem, problem_doc
from a2amesh.gateway.auth import Caller
from a2amesh.manage.executions import MAX_LIMIT, ExecutionDetail, ExecutionPage, ExecutionQuery, NodePage
from a2amesh.manage.failures import RunsError
from a2amesh.manage.runs import ExecuteRequest, ResumeRequest, RetryRequest, Runs, Started
from a2amesh.protocol import codes
from a2amesh.protocol.states import parse_state

__all__ = ["Accepted", "Admin", "Reader", "Reviewer", "Runner", "router", "runs_of", "translated"]

router = APIRouter(prefix="/api", tags=["executions"])

T = TypeVar("T")

Reader = Annotated[Caller, Depends(require("read"))]
Runner = Annotated[Caller, Depends(require("run"))]
Reviewer = Annotated[Caller, Depends(require("review"))]
Admin = Annotated[Caller, Depends(require("admin"))]

NAME = r"^[A-Za-z0-9_-]+$"
ExecutionId = Annotated[
    str, Path(min_length=1, max_length=200, description="The execution id, or a prefix of it that names one.")
]
WorkflowId = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME, description="The workflow's id.")]
Wait = Annotated[
    bool, Query(description="Answer once the execution finished or paused (200), not once it started (202).")
]


def _status_word(text: str | None) -> str | None:
    return None if text is None else parse_state(text)


class Accepted(BaseModel):
    """An action was taken by the mesh; follow the execution by its id."""

    execution_id: str = Field(description="The execution started or moved on.")


Documented = dict[int | str, dict[str, Any]]
NOT_FOUND: Documented = {404: problem_doc("No such execution or workflow.")}
CONFLICT: Documented = {409: problem_doc("The action does not apply to the execution as it is now.")}
UNAVAILABLE: Documented = {503: problem_doc("The mesh (NATS, Redis or the workflow's executor) did not answer.")}


def runs_of(mesh: ApiMesh) -> Runs:
    """The process's :class:`Runs`."""
    return mesh.manage.runs


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """Turn what :mod:`a2amesh.manage` and the mesh raise into problems."""
    try:
        yield
    except RunsError as e:
        title = {404: "not-found", 409: "conflict", 403: "forbidden"}.get(e.status, "invalid-request")
        raise Problem(e.status, title, str(e), errors=getattr(e, "errors", None)) from e
    except TransportError as e:
        status = 504 if e.reason == codes.DEADLINE_EXCEEDED else 503
        raise Problem(status, "unavailable", f"{e.reason}: {e}") from e
    except StoreUnavailable as e:
        raise Problem(503, "unavailable", f"the state store did not answer: {e}") from e
    except RpcError as e:
        raise Problem(502, "mesh-error", f"the workflow answered error {e.code}: {e}") from e


async def _call(work: Awaitable[T]) -> T:
    async with translated():
        return await work


def _headers(who: Caller, request: Request) -> dict[str, str]:
    """What a mesh call made for ``who`` carries: the caller as ``A2A-User``, the trace context."""
    out: dict[str, str] = {}
    if who.key_id:
        out[h.USER] = who.key_id
    trace = request.headers.get("traceparent")
    if trace:
        out[h.TRACEPARENT] = trace
    return out


def _allowed(who: Caller, workflow: str) -> None:
    if not who.allows(workflow):
        raise Problem(403, "forbidden", f"API key {who.key_id!r} may not call workflow {workflow!r}")


def _answer(started: Started) -> JSONResponse:
    if started.execution is not None:
        return JSONResponse(started.execution.model_dump(mode="json"), status_code=200)
    return JSONResponse(Accepted(execution_id=started.execution_id).model_dump(mode="json"), status_code=202)


STARTED_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ExecutionDetail, "description": "With wait=true: the execution once it finished or paused."},
    202: {"model": Accepted, "description": "The mesh took the request; the execution goes on."},
    **NOT_FOUND,
    **UNAVAILABLE,
}


@router.post(
    "/workflows/{workflow_id}/execute",
    status_code=202,
    response_model=None,
    responses=STARTED_RESPONSES,
    summary="Run a workflow",
)
async def execute(
    request: Request, who: Runner, workflow_id: WorkflowId, body: Annotated[ExecuteRequest, Body()], wait: Wait = False
) -> JSONResponse:
    """Start an execution of a workflow through the mesh, like any A2A caller."""
    _allowed(who, workflow_id)
    runs = runs_of(mesh_of(request))
    return _answer(await _call(runs.execute(workflow_id, body, wait=wait, headers=_headers(who, request))))


@router.get("/executions", response_model=ExecutionPage, summary="List executions, newest first")
async def list_executions(
    request: Request,
    who: Reader,
    workflow: Annotated[str | None, Query(max_length=200, pattern=NAME, description="Only this workflow's.")] = None,
    status: Annotated[
        str | None,
        AfterValidator(_status_word),
        Query(
            max_length=40,
            description="Only this status: running, paused, completed, failed or cancelled (also spelled "
            "canceled, or as an A2A state such as TASK_STATE_CANCELED).",
        ),
    ] = None,
    since: Annotated[datetime | None, Query(description="Only those started at or after this instant.")] = None,
    until: Annotated[datetime | None, Query(description="Only those started at or before this instant.")] = None,
    parent: Annotated[
        str | None, Query(min_length=1, max_length=200, description="Only sub-workflow executions of this one.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = 50,
    cursor: Annotated[
        str | None,
        Query(max_length=1000, pattern=r"^[A-Za-z0-9_-]+$", description="next_cursor of the previous page, unchanged."),
    ] = None,
) -> ExecutionPage:
    """A page of executions; pass ``next_cursor`` back as ``cursor`` for the next one."""
    query = ExecutionQuery(
        workflow=workflow, status=status, since=since, until=until, parent=parent, limit=limit, cursor=cursor
    )
    return await _call(runs_of(mesh_of(request)).executions.list(query))


@router.get(
    "/executions/{execution_id}",
    response_model=ExecutionDetail,
    responses=NOT_FOUND,
    summary="One execution, with its trail",
)
async def get_execution(request: Request, who: Reader, execution_id: ExecutionId) -> ExecutionDetail:
    """Status, input, output, error, timings, usage, definition, parent and children, and the event trail."""
    executions = runs_of(mesh_of(request)).executions
    return await _call(executions.get(await _call(executions.resolve(execution_id))))


@router.get(
    "/executions/{execution_id}/nodes",
    response_model=NodePage,
    responses=NOT_FOUND,
    summary="The node instances of an execution",
)
async def get_nodes(request: Request, who: Reader, execution_id: ExecutionId) -> NodePage:
    """Per node instance: status, input, output, error, attempts, callee task, sub-execution, times, usage."""
    executions = runs_of(mesh_of(request)).executions
    return await _call(executions.nodes(await _call(executions.resolve(execution_id))))


async def _resolved(runs: Runs, given: str) -> tuple[str, str]:
    """The full execution id a path's id (or unique prefix of one, as the CLI takes) names, and its workflow."""
    execution_id = await _call(runs.executions.resolve(given))
    record = await _call(runs.executions.record(execution_id))
    return execution_id, record.get("workflow", "")


@router.post(
    "/executions/{execution_id}/cancel",
    response_model=ExecutionDetail,
    responses={**NOT_FOUND, **CONFLICT, **UNAVAILABLE},
    summary="Cancel a running or paused execution",
)
async def cancel(request: Request, who: Runner, execution_id: ExecutionId) -> ExecutionDetail:
    """CancelTask on the execution's task: every callee it has running is cancelled too, then ``on_cancel`` runs."""
    runs = runs_of(mesh_of(request))
    execution_id, workflow = await _resolved(runs, execution_id)
    _allowed(who, workflow)
    return await _call(runs.cancel(execution_id, headers=_headers(who, request)))


@router.post(
    "/executions/{execution_id}/resume",
    status_code=202,
    response_model=None,
    responses={**STARTED_RESPONSES, **CONFLICT},
    summary="Answer the review a paused execution waits for",
)
async def resume(
    request: Request,
    who: Reviewer,
    execution_id: ExecutionId,
    body: Annotated[ResumeRequest, Body()],
    wait: Wait = False,
) -> JSONResponse:
    """Approve, edit (validated against the review's edit_schema: 422 and it stays paused) or reject."""
    runs = runs_of(mesh_of(request))
    execution_id, workflow = await _resolved(runs, execution_id)
    _allowed(who, workflow)
    return _answer(await _call(runs.resume(execution_id, body, wait=wait, headers=_headers(who, request))))


@router.post(
    "/executions/{execution_id}/retry",
    status_code=202,
    response_model=None,
    responses={**STARTED_RESPONSES, **CONFLICT},
    summary="Run a finished execution again, reusing outputs",
)
async def retry(
    request: Request,
    who: Runner,
    execution_id: ExecutionId,
    body: Annotated[RetryRequest | None, Body()] = None,
    wait: Wait = False,
) -> JSONResponse:
    """A new execution with the same input that reuses the outputs of the nodes before ``from_node``."""
    runs = runs_of(mesh_of(request))
    execution_id, workflow = await _resolved(runs, execution_id)
    _allowed(who, workflow)
    started = await _call(runs.retry(execution_id, body or RetryRequest(), wait=wait, headers=_headers(who, request)))
    return _answer(started)
