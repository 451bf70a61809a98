"""Everything the dashboard reads and does, as the management API's operations (docs/dashboard.md).

Each function is one operation of the management API (``GET /api/executions`` → :func:`list_executions`…)
and runs the same :mod:`a2amesh.manage` call that operation's route runs, over the same per-process services
(:func:`~a2amesh.gateway.api.executions.runs_of`, :func:`~a2amesh.gateway.api.schedules.schedules_of`,
:func:`~a2amesh.gateway.api.workflows.definitions_of`), so a page and the API always answer alike. The pages
render the same models the API answers with (:mod:`a2amesh.manage`), times formatted by the templates' filters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from a2amesh.errors import A2AMeshError, RpcError, StoreUnavailable, TransportError
from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.api.executions import runs_of
from a2amesh.gateway.api.schedules import schedules_of
from a2amesh.gateway.api.workflows import definitions_of
from a2amesh.manage import executions as mx
from a2amesh.manage.definitions import InvalidWorkflow, StaleWorkflow, WorkflowNotFound
from a2amesh.manage.events import EventQuery, MeshEvent, follow_events, last_event_id
from a2amesh.manage.failures import NotFound, RunsError
from a2amesh.manage.runs import ExecuteRequest, ResumeRequest, RetryRequest
from a2amesh.manage.schedules import Schedule
from a2amesh.protocol import AgentCard, codes

__all__ = [
    "STATUSES",
    "AgentView",
    "DataError",
    "Review",
    "VersionView",
    "WorkflowView",
    "cancel_execution",
    "count_executions",
    "follow",
    "get_definition",
    "get_execution",
    "get_workflow",
    "get_workflow_version",
    "last_event",
    "list_agents",
    "list_execution_nodes",
    "list_executions",
    "list_reviews",
    "list_schedules",
    "list_workflow_versions",
    "list_workflows",
    "pause_schedule",
    "restore_workflow_version",
    "resume_execution",
    "resume_schedule",
    "retry_execution",
    "set_workflow_enabled",
    "start_execution",
]

STATUSES: tuple[str, ...] = mx.STATUSES


class DataError(A2AMeshError):
    """An operation the dashboard asked for failed: ``status`` (404, 409, 422…) and a precise message.

    Attributes:
        status: the HTTP status the management API answers with.
        errors: one entry per problem for 422s (``path``, ``message``).
    """

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or []


@contextlib.asynccontextmanager
async def _answered() -> AsyncIterator[None]:
    """What :mod:`a2amesh.manage` and the mesh raise, as the status the API answers it with."""
    try:
        yield
    except RunsError as e:
        raise DataError(e.status, str(e), getattr(e, "errors", None)) from e
    except InvalidWorkflow as e:
        raise DataError(422, str(e), [i.model_dump() for i in e.errors]) from e
    except WorkflowNotFound as e:
        raise DataError(404, str(e)) from e
    except StaleWorkflow as e:
        raise DataError(412, str(e)) from e
    except TransportError as e:
        status = 504 if e.reason == codes.DEADLINE_EXCEEDED else 503
        raise DataError(status, f"{e.reason}: {e}") from e
    except StoreUnavailable as e:
        raise DataError(503, f"the state store did not answer: {e}") from e
    except RpcError as e:
        raise DataError(502, f"the workflow answered error {e.code}: {e}") from e


# --- executions ------------------------------------------------------------------------------------


class Review(BaseModel):
    """A paused execution's review: where it waits, what it asks, its data and the edit form's schema."""

    execution: mx.ExecutionDetail
    path: str
    prompt: str = ""
    data: Any = None
    edit_schema: dict[str, Any] | None = None


async def list_executions(
    mesh: ApiMesh,
    *,
    workflow: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    parent: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> mx.ExecutionPage:
    """``GET /api/executions``: newest first, with the API's filters and cursor.

    Raises:
        DataError: 422 for an unknown status or a cursor the API did not give.
    """
    query = mx.ExecutionQuery(
        workflow=workflow, status=status, since=since, until=until, parent=parent, limit=limit, cursor=cursor
    )
    async with _answered():
        return await runs_of(mesh).executions.list(query)


async def count_executions(mesh: ApiMesh, *, since: datetime | None = None) -> dict[str, int]:
    """How many executions started since ``since`` are in each status (the API's status indexes, counted)."""
    async with _answered():
        return await runs_of(mesh).executions.counts(since=since)


async def get_execution(mesh: ApiMesh, execution_id: str) -> mx.ExecutionDetail:
    """``GET /api/executions/{id}`` (a unique start of the id is enough, as in ``a2amesh show``).

    Raises:
        DataError: 404 when no execution has that id, 422 when a start of one names several.
    """
    executions = runs_of(mesh).executions
    async with _answered():
        try:
            return await executions.get(execution_id)
        except NotFound:
            if len(execution_id) < 4:
                raise
            return await executions.get(await executions.resolve(execution_id))


async def list_execution_nodes(mesh: ApiMesh, execution_id: str) -> list[mx.NodeRun]:
    """``GET /api/executions/{id}/nodes``: every node instance, in start order (not started ones last)."""
    async with _answered():
        return (await runs_of(mesh).executions.nodes(execution_id)).items


async def get_definition(mesh: ApiMesh, execution: mx.Execution) -> dict[str, Any] | None:
    """The definition an execution runs: its pinned snapshot, else the workflow's live card's."""
    if execution.digest:
        async with _answered():
            snapshot = await runs_of(mesh).executions.store.load_definition(execution.digest)
        if snapshot is not None:
            return snapshot
    card = mesh.client.registry.get(execution.workflow)
    definition = card.workflow_definition if card is not None else None
    if definition is None:
        return None
    return {k: v for k, v in definition.items() if k != "digest"}


async def list_reviews(mesh: ApiMesh, *, limit: int = 50) -> list[Review]:
    """Every paused execution's review: ``GET /api/executions?status=paused``, then each one's detail."""
    page = await list_executions(mesh, status="paused", limit=limit)
    details = await asyncio.gather(*(_detail_or_none(mesh, e.id) for e in page.items))
    reviews: list[Review] = []
    for execution in details:
        if execution is None or execution.status != "paused":  # resumed since the page was read
            continue
        review = execution.review or {}
        schema = review.get("edit_schema")
        reviews.append(
            Review(
                execution=execution,
                path=str(review.get("path") or ""),
                prompt=str(review.get("prompt") or ""),
                data=review.get("data"),
                edit_schema=schema if isinstance(schema, dict) else None,
            )
        )
    return reviews


async def _detail_or_none(mesh: ApiMesh, execution_id: str) -> mx.ExecutionDetail | None:
    try:
        return await get_execution(mesh, execution_id)
    except DataError as e:
        if e.status == 404:
            return None
        raise


async def cancel_execution(mesh: ApiMesh, execution_id: str) -> mx.ExecutionDetail:
    """``POST /api/executions/{id}/cancel``.

    Raises:
        DataError: 404 unknown, 409 when it has already finished or its workflow has no live executor.
    """
    async with _answered():
        return await runs_of(mesh).cancel(execution_id)


async def resume_execution(
    mesh: ApiMesh,
    execution_id: str,
    *,
    decision: Literal["approve", "reject", "edit"],
    data: Any = None,
    reason: str | None = None,
    path: str | None = None,
) -> None:
    """``POST /api/executions/{id}/resume``: a reviewer's decision for a paused execution.

    Raises:
        DataError: 404 unknown, 409 not paused, 422 an edit the workflow's ``edit_schema`` refuses.
    """
    request = ResumeRequest(decision=decision, data=data, reason=reason, path=path)
    async with _answered():
        await runs_of(mesh).resume(execution_id, request)


async def retry_execution(mesh: ApiMesh, execution_id: str, *, from_node: str | None = None) -> str:
    """``POST /api/executions/{id}/retry``: a new execution re-using the outputs before ``from_node``; its id."""
    async with _answered():
        started = await runs_of(mesh).retry(execution_id, RetryRequest(from_node=from_node))
    return started.execution_id


async def start_execution(mesh: ApiMesh, workflow: str, input: Any) -> str:
    """``POST /api/workflows/{id}/execute``: start an execution of ``workflow`` with ``input``; its id.

    Raises:
        DataError: 404 when no executor serves the workflow, 422 when it refuses the input.
    """
    async with _answered():
        started = await runs_of(mesh).execute(workflow, ExecuteRequest(input=input))
    return started.execution_id


# --- workflows and agents -----------------------------------------------------------------------------


class AgentView(BaseModel):
    """A live agent or workflow: its card and how many replicas are alive."""

    name: str
    type: str
    version: str
    description: str
    replicas: int
    card: dict[str, Any]
    remote_url: str | None = Field(None, description="A remote agent's URL (served through a proxy).")
    remote_problem: str | None = Field(None, description="Why the remote's card could not be fetched last time.")


class WorkflowView(BaseModel):
    """A workflow: stored through the definitions API (versioned, can be disabled), or served from an
    executor's folder (its card only)."""

    name: str
    version: str = Field(description="The stored version number, else the card's version.")
    description: str
    digest: str
    replicas: int
    definition: dict[str, Any]
    input_schema: dict[str, Any] | None = None
    stored: bool = Field(False, description="Kept by the definitions API (versions, restore, enable/disable).")
    enabled: bool = True
    served: bool = Field(False, description="A live executor serves it now (its card is in the registry).")


class VersionView(BaseModel):
    """A version of a workflow's definition.

    ``key`` names it in the diff: the version number of a stored workflow, else the definition digest.
    """

    key: str
    label: str
    digest: str
    current: bool
    written_at: str | None = None
    author: str | None = None
    message: str | None = None
    runs: int = Field(0, description="Executions of it among the newest looked at (folder workflows).")
    last_run: datetime | None = None


async def _replicas(mesh: ApiMesh) -> dict[str, int]:
    bus = mesh.client.bus
    try:
        async with asyncio.timeout(2):
            keys = await (await bus.kv(bus.subjects.presence_bucket)).keys()
    except (TimeoutError, A2AMeshError):
        return {}
    counts: dict[str, int] = {}
    for key in keys:
        agent = key.rsplit(".", 1)[0]
        counts[agent] = counts.get(agent, 0) + 1
    return counts


def _agent(card: AgentCard, replicas: dict[str, int]) -> AgentView:
    return AgentView(
        name=card.name,
        type=card.agent_type,
        version=card.version,
        description=card.description,
        replicas=replicas.get(card.name, 0),
        card=card.model_dump(mode="json", by_alias=True, exclude_none=True),
        remote_url=card.remote_url,
        remote_problem=(card.extension(codes.EXT_REMOTE) or {}).get("problem"),
    )


async def list_agents(mesh: ApiMesh) -> list[AgentView]:
    """``GET /agents`` (the directory): every live agent and workflow, by name."""
    replicas = await _replicas(mesh)
    return [_agent(card, replicas) for card in mesh.client.cards()]


def _served(card: AgentCard | None, replicas: dict[str, int]) -> WorkflowView | None:
    params = card.workflow_definition if card is not None else None
    if card is None or params is None:
        return None
    return WorkflowView(
        name=card.name,
        version=card.version,
        description=card.description,
        digest=str(params.get("digest", "")),
        replicas=replicas.get(card.name, 0),
        definition={k: v for k, v in params.items() if k != "digest"},
        input_schema=card.input_schema,
        served=True,
    )


async def list_workflows(mesh: ApiMesh) -> list[WorkflowView]:
    """``GET /api/workflows`` (every stored workflow, enabled or not) with the workflows executors serve from
    their folders, by name."""
    replicas = await _replicas(mesh)
    async with _answered():
        heads = await definitions_of(mesh).all()
    found: dict[str, WorkflowView] = {}
    for head in heads:
        live = _served(mesh.client.registry.get(head.id), replicas)
        found[head.id] = WorkflowView(
            name=head.id,
            version=str(head.version),
            description=head.description or "",
            digest=live.digest if live else head.digest,  # what its executions record, when served
            replicas=live.replicas if live else 0,
            definition={},
            stored=True,
            enabled=head.enabled,
            served=live is not None,
        )
    for card in mesh.client.cards():
        if card.name not in found and (view := _served(card, replicas)) is not None:
            found[card.name] = view
    return [found[name] for name in sorted(found)]


async def get_workflow(mesh: ApiMesh, name: str) -> WorkflowView:
    """``GET /api/workflows/{id}`` for a stored workflow, else the live card of a folder workflow.

    Raises:
        DataError: 404 when no workflow of that name is stored or served.
    """
    replicas = await _replicas(mesh)
    live = _served(mesh.client.registry.get(name), replicas)
    try:
        async with _answered():
            stored = await definitions_of(mesh).get(name)
    except DataError as e:
        if e.status != 404:
            raise
        if live is None:
            raise DataError(404, f"no workflow named {name!r} is stored or served") from e
        return live
    document = stored.document if isinstance(stored.document, dict) else {}
    schema = live.input_schema if live else document.get("input_schema")
    return WorkflowView(
        name=name,
        version=str(stored.head.version),
        description=stored.head.description or "",
        digest=live.digest if live else stored.head.digest,  # what its executions record, when served
        replicas=live.replicas if live else 0,
        definition=document,
        input_schema=schema if isinstance(schema, dict) else None,
        stored=True,
        enabled=stored.head.enabled,
        served=live is not None,
    )


async def list_workflow_versions(mesh: ApiMesh, workflow: WorkflowView) -> list[VersionView]:
    """``GET /api/workflows/{id}/versions`` (newest first) for a stored workflow; for a folder workflow, the
    digest served now and those its newest 1,000 executions pinned."""
    if workflow.stored:
        async with _answered():
            versions = await definitions_of(mesh).versions(workflow.name)
        return [
            VersionView(
                key=str(v.version),
                label=f"v{v.version}",
                digest=v.digest,
                current=str(v.version) == workflow.version,
                written_at=v.created_at,
                author=v.author,
                message=v.message,
            )
            for v in reversed(versions)
        ]
    current = workflow.digest
    seen: dict[str, VersionView] = {current: VersionView(key=current, label=current[:12], digest=current, current=True)}
    runs = await list_executions(mesh, workflow=workflow.name, limit=mx.MAX_LIMIT)
    for execution in runs.items:
        if not execution.digest:
            continue
        digest = execution.digest
        view = seen.setdefault(digest, VersionView(key=digest, label=digest[:12], digest=digest, current=False))
        view.runs += 1
        if execution.started_at is not None and (view.last_run is None or execution.started_at > view.last_run):
            view.last_run = execution.started_at
    return list(seen.values())


async def get_workflow_version(mesh: ApiMesh, name: str, key: str) -> dict[str, Any]:
    """``GET /api/workflows/{id}?version=N`` (a stored workflow), or the snapshot of a digest (a folder one).

    Raises:
        DataError: 404 when the version is not known.
    """
    if key.isdigit():
        async with _answered():
            return dict((await definitions_of(mesh).get(name, int(key))).document)
    card = mesh.client.registry.get(name)
    served = card.workflow_definition if card is not None else None
    if served is not None and served.get("digest") == key:
        return {k: v for k, v in served.items() if k != "digest"}
    async with _answered():
        snapshot = await runs_of(mesh).executions.store.load_definition(key) if key else None
    if snapshot is None or snapshot.get("name", name) != name:
        raise DataError(404, f"workflow {name!r} has no known version {key[:12]!r}")
    return snapshot


async def restore_workflow_version(mesh: ApiMesh, name: str, version: int, *, author: str | None) -> int:
    """``POST /api/workflows/{id}/versions/{version}/restore``: a new version equal to ``version``; its number."""
    async with _answered():
        result = await definitions_of(mesh).restore(name, version, author=author)
    return result.version


async def set_workflow_enabled(mesh: ApiMesh, name: str, enabled: bool, *, author: str | None) -> None:
    """``POST /api/workflows/{id}/enable`` or ``…/disable``."""
    async with _answered():
        await definitions_of(mesh).set_enabled(name, enabled, author=author)


# --- schedules -------------------------------------------------------------------------------------------


async def list_schedules(mesh: ApiMesh, *, workflow: str | None = None) -> list[Schedule]:
    """``GET /api/schedules?workflow=``: every schedule (of ``workflow``), with its next fire time."""
    async with _answered():
        return (await schedules_of(mesh).all(workflow)).items


async def pause_schedule(mesh: ApiMesh, schedule: str) -> None:
    """``POST /api/schedules/{workflow}/{branch}/pause``.

    Raises:
        DataError: 404 when there is no such schedule.
    """
    async with _answered():
        await schedules_of(mesh).pause(schedule)


async def resume_schedule(mesh: ApiMesh, schedule: str) -> None:
    """``POST /api/schedules/{workflow}/{branch}/resume`` (ticks missed while paused are skipped).

    Raises:
        DataError: 404 when there is no such schedule.
    """
    async with _answered():
        await schedules_of(mesh).resume(schedule)


# --- events --------------------------------------------------------------------------------------------


def follow(
    mesh: ApiMesh, *, execution: str | None = None, after: int | None = None, idle: float
) -> contextlib.AbstractAsyncContextManager[AsyncIterator[MeshEvent | None]]:
    """``GET /api/events?execution=`` with ``Last-Event-ID: after``: the lifecycle events from the one after
    ``after`` (from now without it); ``None`` once set up and after each ``idle`` seconds without one."""
    query = EventQuery(execution=execution, after=after)
    return contextlib.aclosing(follow_events(mesh.client.bus, query, idle=idle))


async def last_event(mesh: ApiMesh) -> int | None:
    """The id of the newest lifecycle event stored (what a page rendered now follows from), None when the event
    stream does not answer within a second (the page then starts from its connect message)."""
    try:
        async with asyncio.timeout(1):
            return await last_event_id(mesh.client.bus)
    except (TimeoutError, A2AMeshError):
        return None


def now() -> datetime:
    """The present instant (UTC), for time filters."""
    return datetime.now(UTC)
