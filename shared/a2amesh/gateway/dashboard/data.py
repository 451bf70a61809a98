"""Everything the dashboard reads and does, as the management API's operations (docs/dashboard.md).

Each function is named after one operation of the management API (``GET /api/executions`` →
:func:`list_executions`…) and returns that operation's shape, so the pages never see where the data comes
from. Today the bodies read the live card registry through the gateway's :class:`~a2amesh.client.Client`, the
execution records through :class:`~a2amesh.store.executions.ExecutionStore` (what ``a2amesh runs`` and
``a2amesh show`` read), and act through the client as ``a2amesh cancel`` / ``resume`` / ``retry`` do; they can
be swapped for the management library without a change to a page.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from a2amesh.bus.nats import Received, Subscription
from a2amesh.client import make_message
from a2amesh.errors import A2AMeshError, RpcError
from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.protocol import AgentCard, Part, codes
from a2amesh.protocol.vocabulary import RETRY_REQUEST
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.schedules import ScheduleStore

__all__ = [
    "STATUSES",
    "AgentView",
    "DataError",
    "Execution",
    "NodeRecord",
    "Page",
    "Review",
    "ScheduleView",
    "VersionView",
    "WorkflowView",
    "cancel_execution",
    "get_definition",
    "get_execution",
    "get_workflow",
    "get_workflow_version",
    "list_agents",
    "list_execution_nodes",
    "list_executions",
    "list_reviews",
    "list_schedules",
    "pause_schedule",
    "list_workflow_versions",
    "list_workflows",
    "resume_execution",
    "resume_schedule",
    "retry_execution",
    "start_execution",
    "subscribe_events",
]

Status = Literal["running", "paused", "completed", "failed", "cancelled"]
STATUSES: tuple[str, ...] = ("running", "paused", "completed", "failed", "cancelled")
_STORED = {"cancelled": "canceled"}
"""API status → the store's spelling (the store writes ``canceled``)."""
_ACTION_TIMEOUT = 15.0


class DataError(A2AMeshError):
    """An operation the dashboard asked for failed: ``status`` (404, 409, 422…) and a precise message.

    Attributes:
        status: the HTTP status the management API answers with.
        errors: one entry per problem for 422s (``path``, ``message``).
    """

    def __init__(self, status: int, message: str, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or []


class Execution(BaseModel):
    """An execution, as ``GET /api/executions/{id}`` answers it."""

    id: str
    workflow: str
    version: str = Field("", description="The definition's content digest.")
    status: str
    input: Any = None
    output: Any = None
    error: str | None = None
    started_at: float | None = Field(None, description="Epoch seconds.")
    finished_at: float | None = Field(None, description="Epoch seconds.")
    usage: dict[str, Any] = Field(default_factory=dict)
    parent_id: str | None = None
    review: dict[str, Any] | None = Field(None, description="What a paused execution waits for.")


class Page(BaseModel):
    """A page of a list: its items and the cursor of the next page (None at the end)."""

    items: list[Execution]
    next_cursor: str | None = None


class NodeRecord(BaseModel):
    """One node instance of an execution, as ``GET /api/executions/{id}/nodes`` answers it."""

    path: str
    node_id: str
    type: str = ""
    status: str = "pending"
    attempt: int = 0
    index: int | None = None
    iteration: int = 0
    parent: str | None = None
    agent: str | None = None
    task_id: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    reason: str | None = None
    started_at: float | None = None
    attempt_started_at: float | None = Field(None, description="When the latest attempt started (retries).")
    finished_at: float | None = None
    usage: dict[str, Any] | None = None


class Review(BaseModel):
    """A paused execution's review: where it waits, what it asks, its data and the edit form's schema."""

    execution: Execution
    path: str
    prompt: str = ""
    data: Any = None
    edit_schema: dict[str, Any] | None = None


class AgentView(BaseModel):
    """A live agent or workflow: its card and how many replicas are alive."""

    name: str
    type: str
    version: str
    description: str
    replicas: int
    card: dict[str, Any]


class WorkflowView(BaseModel):
    """A workflow served by an executor: its card's definition and digest."""

    name: str
    version: str
    description: str
    digest: str
    replicas: int
    definition: dict[str, Any]
    input_schema: dict[str, Any] | None = None


class VersionView(BaseModel):
    """A version of a workflow's definition: its digest, whether executors serve it now, its runs seen."""

    digest: str
    current: bool
    runs: int = Field(0, description="Executions of it among the newest looked at.")
    last_run: float | None = Field(None, description="Start of its newest execution (epoch seconds).")


class ScheduleView(BaseModel):
    """A schedule, as ``GET /api/schedules`` answers it (times in epoch seconds)."""

    id: str
    workflow: str
    branch: str
    mode: str
    describe: str
    timezone: str
    paused: bool
    running: bool
    last_fire: float | None = None
    next_fire: float | None = None


def _store(mesh: ApiMesh) -> ExecutionStore:
    store = mesh.extras.get("dashboard.executions")
    if store is None:
        s = mesh.settings
        store = ExecutionStore(mesh.redis, Keys(s.namespace), retention=s.task_retention, lease_ttl=s.lease_ttl)
        mesh.extras["dashboard.executions"] = store
    assert isinstance(store, ExecutionStore)
    return store


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _seconds(ms: str | None) -> float | None:
    return int(ms) / 1000 if ms and ms.lstrip("-").isdigit() else None


def _execution(execution_id: str, record: dict[str, str]) -> Execution:
    status = record.get("status", "")
    review = _json(record.get("review")) if status == "paused" else None
    return Execution(
        id=execution_id,
        workflow=record.get("workflow", ""),
        version=record.get("digest", ""),
        status="cancelled" if status == "canceled" else status,
        input=_json(record.get("input")),
        output=_json(record.get("output")),
        error=record.get("error") or None,
        started_at=_seconds(record.get("created")),
        finished_at=_seconds(record.get("finished")),
        usage=_json(record.get("usage")) or {},
        parent_id=record.get("parent_id") or None,
        review=review if isinstance(review, dict) else None,
    )


# --- executions ------------------------------------------------------------------------------------


async def list_executions(
    mesh: ApiMesh,
    *,
    workflow: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    """``GET /api/executions?workflow=&status=&cursor=``: newest first.

    Raises:
        DataError: 422 for an unknown status or a cursor this list did not give.
    """
    if status and status not in STATUSES:
        raise DataError(422, f"status {status!r} is not one of {', '.join(STATUSES)}")
    offset = 0
    if cursor:
        if not cursor.isdigit():
            raise DataError(422, f"cursor {cursor!r} is not one this list gave")
        offset = int(cursor)
    stored = _STORED.get(status or "", status)
    records = await _store(mesh).list(workflow=workflow or None, status=stored or None, limit=offset + limit + 1)
    page = records[offset : offset + limit]
    more = len(records) > offset + limit
    return Page(
        items=[_execution(r["execution_id"], r) for r in page], next_cursor=str(offset + limit) if more else None
    )


async def get_execution(mesh: ApiMesh, execution_id: str) -> Execution:
    """``GET /api/executions/{id}`` (a unique prefix of the id is enough).

    Raises:
        DataError: 404 when no execution has that id, 409 when a prefix names several.
    """
    store = _store(mesh)
    record = await store.record(execution_id)
    if record is None:
        matches = await store.resolve_id(execution_id) if len(execution_id) >= 4 else []
        if len(matches) > 1:
            raise DataError(409, f"{execution_id!r} names {len(matches)} executions; give more of the id")
        if matches:
            execution_id = matches[0]
            record = await store.record(execution_id)
    if record is None:
        raise DataError(404, f"no execution {execution_id!r} (it may have expired)")
    return _execution(execution_id, record)


async def list_execution_nodes(mesh: ApiMesh, execution_id: str) -> list[NodeRecord]:
    """``GET /api/executions/{id}/nodes``: every node instance, in start order (not started ones last)."""
    raw = await _store(mesh).nodes(execution_id)
    nodes = [
        NodeRecord.model_validate({**r, "path": path, "node_id": r.get("node_id") or path}) for path, r in raw.items()
    ]
    return sorted(nodes, key=lambda n: (n.started_at is None, n.started_at or 0.0, n.path))


async def get_definition(mesh: ApiMesh, execution: Execution) -> dict[str, Any] | None:
    """The definition an execution runs: its pinned snapshot, else the workflow's live card's."""
    if execution.version:
        snapshot = await _store(mesh).load_definition(execution.version)
        if snapshot is not None:
            return snapshot
    card = mesh.client.registry.get(execution.workflow)
    definition = card.workflow_definition if card is not None else None
    if definition is None:
        return None
    return {k: v for k, v in definition.items() if k != "digest"}


async def list_reviews(mesh: ApiMesh, *, limit: int = 50) -> list[Review]:
    """Every paused execution's review (``GET /api/executions?status=paused``, with each one's review)."""
    page = await list_executions(mesh, status="paused", limit=limit)
    reviews: list[Review] = []
    for execution in page.items:
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


async def _first_answer(mesh: ApiMesh, workflow: str, message: Any, what: str) -> str:
    """Send ``message`` to ``workflow`` and wait for its first answer: accepted (returns the task's id, which is
    the execution's), or refused with an error."""
    try:
        call = await mesh.client.dispatch(workflow, message, stream=True, timeout=mesh.settings.call_timeout)
        async with asyncio.timeout(_ACTION_TIMEOUT):
            async for _ in call.events():
                break
    except TimeoutError as e:
        raise DataError(504, f"{workflow!r} did not answer the {what} within {_ACTION_TIMEOUT:g}s") from e
    except RpcError as e:
        status = 422 if e.code == codes.INVALID_PARAMS else 409
        raise DataError(status, str(e), [{"path": what, "message": str(e)}]) from e
    except A2AMeshError as e:
        raise DataError(503, f"the {what} could not be sent: {e}") from e
    return call.task_id


async def cancel_execution(mesh: ApiMesh, execution_id: str) -> Execution:
    """``POST /api/executions/{id}/cancel``.

    Raises:
        DataError: 404 unknown, 409 when it has already finished, 503 when its workflow cannot be reached.
    """
    execution = await get_execution(mesh, execution_id)
    if execution.status not in ("running", "paused"):
        raise DataError(
            409, f"execution {execution.id} is {execution.status}; only a running or paused one can be cancelled"
        )
    try:
        await mesh.client.cancel_task(execution.workflow, execution.id, timeout=_ACTION_TIMEOUT)
    except RpcError as e:
        raise DataError(409, f"execution {execution.id} could not be cancelled: {e}") from e
    except A2AMeshError as e:
        raise DataError(503, f"the cancel could not be sent: {e}") from e
    return await get_execution(mesh, execution.id)


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
        DataError: 404 unknown, 409 not paused, 422 an edit ``edit_schema`` refuses (the workflow's own check).
    """
    execution = await get_execution(mesh, execution_id)
    if execution.status != "paused":
        raise DataError(409, f"execution {execution.id} is {execution.status}, not paused for a review")
    body: dict[str, Any] = {"decision": decision}
    if decision == "edit":
        body["data"] = data
    if reason:
        body["reason"] = reason
    if path:
        body["path"] = path
    record = await _store(mesh).record(execution.id) or {}
    message = make_message(
        data=body, task_id=record.get("task_id") or execution.id, context_id=record.get("context_id") or None
    )
    await _first_answer(mesh, execution.workflow, message, "resume")


async def retry_execution(mesh: ApiMesh, execution_id: str, *, from_node: str | None = None) -> str:
    """``POST /api/executions/{id}/retry``: a new execution re-using the outputs before ``from_node``; its id."""
    execution = await get_execution(mesh, execution_id)
    if execution.status not in ("failed", "cancelled", "completed"):
        raise DataError(409, f"execution {execution.id} is {execution.status}; only a finished one can be retried")
    control = {"type": RETRY_REQUEST, "execution_id": execution.id, "from_node": from_node}
    message = make_message(data=execution.input or {}, parts=[Part.of_data(control)])
    return await _first_answer(mesh, execution.workflow, message, "retry")


async def start_execution(mesh: ApiMesh, workflow: str, input: Any) -> str:
    """``POST /api/workflows/{id}/execute``: start an execution of ``workflow`` with ``input``; its id.

    Raises:
        DataError: 404 when no executor serves the workflow, 422 when it refuses the input.
    """
    await get_workflow(mesh, workflow)
    return await _first_answer(mesh, workflow, make_message(data=input), "run")


# --- workflows and agents -----------------------------------------------------------------------------


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
    )


async def list_agents(mesh: ApiMesh) -> list[AgentView]:
    """``GET /agents`` (the directory): every live agent and workflow, by name."""
    replicas = await _replicas(mesh)
    return [_agent(card, replicas) for card in mesh.client.cards()]


def _workflow(card: AgentCard, replicas: dict[str, int]) -> WorkflowView | None:
    params = card.workflow_definition
    if params is None:
        return None
    return WorkflowView(
        name=card.name,
        version=card.version,
        description=card.description,
        digest=str(params.get("digest", "")),
        replicas=replicas.get(card.name, 0),
        definition={k: v for k, v in params.items() if k != "digest"},
        input_schema=card.input_schema,
    )


async def list_workflows(mesh: ApiMesh) -> list[WorkflowView]:
    """``GET /api/workflows``: every workflow an executor serves now."""
    replicas = await _replicas(mesh)
    return [w for card in mesh.client.cards() if (w := _workflow(card, replicas)) is not None]


async def get_workflow(mesh: ApiMesh, name: str) -> WorkflowView:
    """``GET /api/workflows/{id}``.

    Raises:
        DataError: 404 when no executor serves a workflow of that name.
    """
    card = mesh.client.registry.get(name)
    view = _workflow(card, await _replicas(mesh)) if card is not None else None
    if view is None:
        raise DataError(404, f"no live workflow named {name!r}")
    return view


async def list_workflow_versions(mesh: ApiMesh, name: str) -> list[VersionView]:
    """``GET /api/workflows/{id}/versions``: the version served now, then those its executions ran, newest first.

    Today's body knows a version only once an execution pinned it (among the newest 1,000 of the workflow).
    """
    current = (await get_workflow(mesh, name)).digest
    runs = await list_executions(mesh, workflow=name, limit=1000)
    seen: dict[str, VersionView] = {current: VersionView(digest=current, current=True)}
    for execution in runs.items:
        if not execution.version:
            continue
        view = seen.setdefault(execution.version, VersionView(digest=execution.version, current=False))
        view.runs += 1
        view.last_run = max(view.last_run or 0.0, execution.started_at or 0.0) or None
    return list(seen.values())


async def get_workflow_version(mesh: ApiMesh, name: str, digest: str) -> dict[str, Any]:
    """``GET /api/workflows/{id}/versions/{digest}``: that version's definition.

    Raises:
        DataError: 404 when the version is not known (never run, or its snapshot expired).
    """
    card = mesh.client.registry.get(name)
    served = card.workflow_definition if card is not None else None
    if served is not None and served.get("digest") == digest:
        return {k: v for k, v in served.items() if k != "digest"}
    snapshot = await _store(mesh).load_definition(digest) if digest else None
    if snapshot is None or snapshot.get("name", name) != name:
        raise DataError(404, f"workflow {name!r} has no known version {digest[:12]!r}")
    return snapshot


# --- schedules -------------------------------------------------------------------------------------------


def _schedules(mesh: ApiMesh) -> ScheduleStore:
    store = mesh.extras.get("dashboard.schedules")
    if store is None:
        store = mesh.extras["dashboard.schedules"] = ScheduleStore(mesh.redis, Keys(mesh.settings.namespace))
    assert isinstance(store, ScheduleStore)
    return store


async def list_schedules(mesh: ApiMesh, *, workflow: str | None = None) -> list[ScheduleView]:
    """``GET /api/schedules``: every schedule (of ``workflow``), with its next fire time."""
    out: list[ScheduleView] = []
    for stored in await _schedules(mesh).all():
        state = stored.state
        if state is None or (workflow and state.workflow != workflow):
            continue
        out.append(
            ScheduleView(
                id=stored.id,
                workflow=state.workflow,
                branch=state.branch,
                mode=str(state.mode),
                describe=state.spec.describe(),
                timezone=state.timezone,
                paused=state.paused,
                running=state.running,
                last_fire=state.last_fire.timestamp() if state.last_fire else None,
                next_fire=state.next_fire.timestamp() if state.next_fire else None,
            )
        )
    return out


async def pause_schedule(mesh: ApiMesh, schedule: str) -> None:
    """``POST /api/schedules/{id}/pause``.

    Raises:
        DataError: 404 when there is no such schedule.
    """
    if await _schedules(mesh).pause(schedule) is None:
        raise DataError(404, f"no schedule {schedule!r}")


async def resume_schedule(mesh: ApiMesh, schedule: str) -> None:
    """``POST /api/schedules/{id}/resume`` (ticks missed while paused are skipped).

    Raises:
        DataError: 404 when there is no such schedule.
    """
    if await _schedules(mesh).resume(schedule, datetime.now(UTC)) is None:
        raise DataError(404, f"no schedule {schedule!r}")


# --- events --------------------------------------------------------------------------------------------


async def subscribe_events(mesh: ApiMesh, handler: Callable[[dict[str, Any]], Awaitable[None]]) -> list[Subscription]:
    """``GET /api/events``: call ``handler`` with every workflow and node lifecycle event from now on.

    Each event is the executor's payload (``execution_id``, ``workflow``, ``event``, ``node_id``, ``status``,
    ``seq``…). Unsubscribe the returned subscriptions when done.
    """

    async def on_msg(msg: Received) -> None:
        try:
            event = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(event, dict):
            await handler(event)

    bus = mesh.client.bus
    return [await bus.subscribe(subject, on_msg) for subject in bus.subjects.events_all]
