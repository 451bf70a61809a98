"""Executions as the management API, the CLI and the MCP server show them: pages, details, node runs.

Reads the records the executor writes (:mod:`a2amesh.store.executions`) through the listing indexes
(:mod:`a2amesh.store.listing`); nothing here scans keys. A page is ``{items, next_cursor}``; the cursor is
an opaque token naming the position after the page's last execution, so a client that pages while new
executions arrive reads each execution that existed when it began exactly once.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from a2amesh.manage.failures import InvalidRequest, NotFound
from a2amesh.protocol.states import STATES, Instant, State, parse_state, rfc3339, state_word
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.listing import ExecutionListing, IndexName, Position
from a2amesh.tracing import trace_id_of

__all__ = [
    "STATUSES",
    "Execution",
    "ExecutionDetail",
    "ExecutionPage",
    "ExecutionQuery",
    "Executions",
    "NodeAttempt",
    "NodePage",
    "NodeRun",
    "decode_cursor",
    "encode_cursor",
]

Status = State
STATUSES: tuple[str, ...] = STATES
"""Execution statuses as the API spells them (:mod:`a2amesh.protocol.states`; the store writes ``canceled``)."""

_STORED = {"cancelled": "canceled"}

MAX_LIMIT = 500
"""The largest page a caller may ask for."""

SCAN_BUDGET = 2000
"""Index entries one page request examines at most when filters leave most of them out; the page then
ends early with a cursor to carry on from (``items`` may be shorter than ``limit``)."""

_CURSOR_VERSION = 1


# --- models -------------------------------------------------------------------------------------------


class Execution(BaseModel):
    """One workflow execution (a row of a listing)."""

    id: str = Field(description="The execution id (also the workflow task's id).")
    workflow: str = Field(description="The workflow it runs.")
    version: int | None = Field(None, description="The stored definition version it runs, when known.")
    digest: str | None = Field(None, description="Content hash of the definition snapshot it runs on.")
    status: Status
    input: Any = Field(None, description="The execution's input.")
    output: Any = Field(None, description="Its output, once completed.")
    error: str | None = Field(None, description="Why it failed or was cancelled.")
    started_at: Instant | None = None
    finished_at: Instant | None = None
    usage: dict[str, Any] | None = Field(None, description="Token usage rolled up from every node and sub-workflow.")
    parent_id: str | None = Field(None, description="The execution whose workflow node started this one.")


class ExecutionDetail(Execution):
    """One execution with everything known about it."""

    duration_ms: int | None = Field(None, description="Finish minus start (so far, while it runs).")
    context_id: str | None = None
    reused_from: str | None = Field(None, description="The execution a retry reused node outputs of.")
    schedule: str | None = Field(None, description="The schedule that fired it, if any.")
    cancel_requested: bool = False
    review: dict[str, Any] | None = Field(None, description="The review a paused execution waits for.")
    children: list[str] = Field(default_factory=list, description="Sub-workflow executions its nodes started.")
    trail: list[dict[str, Any]] = Field(default_factory=list, description="Its event log, oldest first.")
    trace_id: str | None = Field(None, description="The trace its request carried (W3C traceparent), if any.")


class NodeAttempt(BaseModel):
    """One attempt of a node instance, from the execution's event log."""

    attempt: int
    status: str
    started_at: Instant | None = None
    finished_at: Instant | None = None
    error: str | None = None


class NodeRun(BaseModel):
    """One node instance of an execution (a map item, a loop iteration and a fork branch are instances)."""

    path: str = Field(description="The instance's path (node id, with ``[i]`` / ``#n`` for items and iterations).")
    node_id: str
    type: str
    status: str
    agent: str | None = Field(None, description="The agent or workflow it called.")
    input: Any = None
    output: Any = None
    error: str | None = None
    reason: str | None = Field(None, description="Why it was skipped or cancelled.")
    attempt: int = Field(0, description="The current (or last) attempt, from 1.")
    attempts: list[NodeAttempt] = Field(default_factory=list)
    task_id: str | None = Field(None, description="The callee's task id (current attempt).")
    sub_execution_id: str | None = Field(None, description="The execution of a called workflow.")
    started_at: Instant | None = None
    finished_at: Instant | None = None
    duration_ms: int | None = None
    usage: dict[str, Any] | None = None


class ExecutionPage(BaseModel):
    """A page of executions, newest first."""

    items: list[Execution]
    next_cursor: str | None = Field(None, description="Pass as ``cursor`` for the next page; null at the end.")


class NodePage(BaseModel):
    """The node instances of an execution, in the order they started."""

    items: list[NodeRun]
    next_cursor: str | None = None


@dataclass(frozen=True)
class ExecutionQuery:
    """Which executions a listing returns.

    Attributes:
        workflow: only this workflow's.
        status: only executions in this status (API spelling).
        since: only those started at or after this instant.
        until: only those started at or before this instant.
        parent: only the sub-workflow executions this execution started.
        limit: the page size (1…``MAX_LIMIT``).
        cursor: where the previous page stopped.
    """

    workflow: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    parent: str | None = None
    limit: int = 50
    cursor: str | None = None


# --- cursors --------------------------------------------------------------------------------------------


def encode_cursor(position: Position) -> str:
    """The opaque cursor of a position."""
    raw = json.dumps([_CURSOR_VERSION, position.score, position.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names.

    Raises:
        InvalidRequest: not a cursor this API issued (its ``path`` is ``query.cursor``).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, score, ident = json.loads(raw)
        if version != _CURSOR_VERSION or not isinstance(score, int) or not isinstance(ident, str) or not ident:
            raise ValueError("unexpected content")
    except (ValueError, TypeError, binascii.Error) as e:
        message = "not a cursor issued by this API (pass next_cursor of the previous page unchanged)"
        raise InvalidRequest(f"cursor: {message}", [{"path": "query.cursor", "message": message}]) from e
    return Position(score, ident)


# --- conversions ----------------------------------------------------------------------------------------


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _instant_ms(value: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(value) / 1000, UTC) if value and value.isdigit() else None


def _instant_s(value: Any) -> datetime | None:
    return datetime.fromtimestamp(float(value), UTC) if isinstance(value, int | float) and value > 0 else None


def shown_status(stored: str) -> Status:
    """The API's spelling of a stored execution status."""
    shown = state_word(stored)
    return shown if shown in STATUSES else "running"  # type: ignore[return-value]


def shown_event(event: dict[str, Any]) -> dict[str, Any]:
    """A trail entry as the API shows it: ``at`` in RFC 3339, the status in :data:`STATUSES`' words, and an
    execution event's nested ``data.data`` lifted into ``data``."""
    out = dict(event)
    data = out.get("data")
    if isinstance(data, dict) and isinstance(data.get("data"), dict):
        out["data"] = {**{k: v for k, v in data.items() if k != "data"}, **data["data"]}
    if isinstance(out.get("status"), str):
        out["status"] = state_word(out["status"])
    at = out.get("at")
    if isinstance(at, int | float):
        out["at"] = rfc3339(at)
    return out


def stored_status(shown: str) -> str:
    """The store's spelling of an API status."""
    return _STORED.get(shown, shown)


def _parent_of(reply: str | None) -> str | None:
    data = _json(reply)
    request = data.get("node_request") if isinstance(data, dict) else None
    parent = request.get("execution_id") if isinstance(request, dict) else None
    return str(parent) if parent else None


def _usage(text: str | None) -> dict[str, Any] | None:
    value = _json(text)
    return value if isinstance(value, dict) and value else None


def execution_of(execution_id: str, row: dict[str, str]) -> Execution:
    """The listing row of a stored record's fields."""
    version = row.get("version", "")
    return Execution(
        id=execution_id,
        workflow=row.get("workflow", ""),
        version=int(version) if version.isdigit() else None,
        digest=row.get("digest") or None,
        status=shown_status(row.get("status", "")),
        input=_json(row.get("input")),
        output=_json(row.get("output")),
        error=row.get("error") or None,
        started_at=_instant_ms(row.get("created")),
        finished_at=_instant_ms(row.get("finished")),
        usage=_usage(row.get("usage")),
        parent_id=_parent_of(row.get("reply")),
    )


def _matches(execution: Execution, query: ExecutionQuery) -> bool:
    """Whether a row read from an index also passes the filters that index does not apply (a status index
    may lag a record by one write)."""
    if query.workflow and execution.workflow != query.workflow:
        return False
    if query.status and execution.status != query.status:
        return False
    return not (query.parent and execution.parent_id != query.parent)


def _attempts(path: str, trail: list[dict[str, Any]]) -> list[NodeAttempt]:
    attempts: list[NodeAttempt] = []
    for event in trail:
        if event.get("path") != path:
            continue
        kind = str(event.get("event", ""))
        raw = event.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        at = _instant_s(event.get("at"))
        if kind == "node.started":
            number = data.get("attempt") if isinstance(data.get("attempt"), int) else len(attempts) + 1
            attempts.append(NodeAttempt(attempt=number, status="running", started_at=at))
        elif attempts and kind in ("node.completed", "node.failed", "node.retrying", "node.canceled"):
            ended = {"node.retrying": "failed", "node.canceled": "cancelled"}.get(kind, kind.partition(".")[2])
            error = data.get("error") if isinstance(data.get("error"), str) else None
            attempts[-1] = attempts[-1].model_copy(update={"status": ended, "finished_at": at, "error": error})
    return attempts


def node_run(record: dict[str, Any], trail: list[dict[str, Any]], children: set[str]) -> NodeRun:
    """The API view of a stored node record."""
    started, finished = _instant_s(record.get("started_at")), _instant_s(record.get("finished_at"))
    task_id = record.get("task_id") or None
    path = str(record.get("path", ""))
    usage = record.get("usage")
    return NodeRun(
        path=path,
        node_id=str(record.get("node_id") or path),
        type=str(record.get("type", "")),
        status=state_word(str(record.get("status", ""))),
        agent=record.get("agent") or None,
        input=record.get("input"),
        output=record.get("output"),
        error=record.get("error") or None,
        reason=record.get("reason") or None,
        attempt=int(record.get("attempt") or 0),
        attempts=_attempts(path, trail),
        task_id=task_id,
        sub_execution_id=task_id if task_id in children else None,
        started_at=started,
        finished_at=finished,
        duration_ms=int((finished - started).total_seconds() * 1000) if started and finished else None,
        usage=usage if isinstance(usage, dict) and usage else None,
    )


# --- the reader -----------------------------------------------------------------------------------------


class Executions:
    """Reads executions for the API, the CLI and the MCP server.

    Args:
        store: the namespace's execution store.
    """

    def __init__(self, store: ExecutionStore) -> None:
        self.store = store
        self.listing = ExecutionListing(store.redis, store.keys)

    async def _index(self, query: ExecutionQuery) -> tuple[IndexName, str]:
        """The most selective index for a query (the other filters are applied to the rows read): the parent's,
        else the smaller of the workflow's and the status's."""
        if query.parent:
            return "parent", query.parent
        chosen: list[tuple[IndexName, str]] = []
        if query.workflow:
            chosen.append(("workflow", query.workflow))
        if query.status:
            chosen.append(("status", stored_status(query.status)))
        if len(chosen) == 2:
            sizes = await self.listing.sizes(chosen)
            return chosen[0] if sizes[0] <= sizes[1] else chosen[1]
        return chosen[0] if chosen else ("all", "")

    async def list(self, query: ExecutionQuery) -> ExecutionPage:
        """A page of executions, newest first.

        Raises:
            InvalidRequest: a cursor this API did not issue, an unknown status, a limit out of range.
        """
        if query.status is not None:
            try:
                query = replace(query, status=parse_state(query.status))
            except ValueError as e:
                raise InvalidRequest(f"status: {e}", [{"path": "query.status", "message": str(e)}]) from e
        if not 1 <= query.limit <= MAX_LIMIT:
            message = f"must be between 1 and {MAX_LIMIT}"
            raise InvalidRequest(f"limit: {message}", [{"path": "query.limit", "message": message}])
        after = decode_cursor(query.cursor) if query.cursor else None
        index, value = await self._index(query)
        since = None if query.since is None else int(query.since.timestamp() * 1000)
        until = None if query.until is None else int(query.until.timestamp() * 1000)
        filters = [f for f in (query.workflow, query.status, query.parent) if f]
        exact = len(filters) <= 1  # the index applies every filter
        batch = query.limit + 1 if exact else max(2 * query.limit, 100)
        items: list[Execution] = []
        examined = 0
        last = after
        while True:
            positions = await self.listing.page(index, value, after=last, since_ms=since, until_ms=until, count=batch)
            rows = await self.listing.rows([p.id for p in positions])
            gone: list[str] = []
            for position, row in zip(positions, rows, strict=True):
                if len(items) == query.limit:  # and at least this one more: the next page starts here
                    await self.listing.forget(index, value, gone)
                    return ExecutionPage(items=items, next_cursor=encode_cursor(last) if last else None)
                last = position
                examined += 1
                if row is None:
                    gone.append(position.id)
                    continue
                execution = execution_of(position.id, row)
                if _matches(execution, query):
                    items.append(execution)
            await self.listing.forget(index, value, gone)
            if len(positions) < batch:
                return ExecutionPage(items=items, next_cursor=None)
            if examined >= SCAN_BUDGET:
                return ExecutionPage(items=items, next_cursor=encode_cursor(last) if last else None)

    async def counts(self, *, since: datetime | None = None, until: datetime | None = None) -> dict[str, int]:
        """How many executions started in ``[since, until]`` are in each status now (API spelling), from the
        status indexes (an index may count an expired execution until a listing meets it)."""
        low = None if since is None else int(since.timestamp() * 1000)
        high = None if until is None else int(until.timestamp() * 1000)
        indexes: list[tuple[IndexName, str]] = [("status", stored_status(s)) for s in STATUSES]
        found = await self.listing.counts(indexes, since_ms=low, until_ms=high)
        return dict(zip(STATUSES, found, strict=True))

    async def record(self, execution_id: str) -> dict[str, str]:
        """The stored record of an execution.

        Raises:
            NotFound: no such execution (or it expired).
        """
        record = await self.store.record(execution_id)
        if record is None:
            raise NotFound("execution", execution_id)
        return record

    async def get(self, execution_id: str) -> ExecutionDetail:
        """Everything known about one execution.

        Raises:
            NotFound: no such execution (or it expired).
        """
        record = await self.record(execution_id)
        trail = await self.store.events(execution_id)
        children = await self.listing.children(execution_id)
        base = execution_of(execution_id, record)
        ends = base.finished_at or datetime.now(UTC)
        review = _json(record.get("review")) if base.status == "paused" else None
        return ExecutionDetail(
            **base.model_dump(),
            duration_ms=int((ends - base.started_at).total_seconds() * 1000) if base.started_at else None,
            context_id=record.get("context_id") or None,
            reused_from=record.get("reused_from") or None,
            schedule=record.get("schedule") or None,
            cancel_requested=record.get("cancel") == "1",
            review=review if isinstance(review, dict) else None,
            children=children,
            trail=[shown_event(e) for e in trail],
            trace_id=_trace_id(record.get("reply")),
        )

    async def nodes(self, execution_id: str) -> NodePage:
        """The node instances of an execution, in the order they started.

        Raises:
            NotFound: no such execution (or it expired).
        """
        await self.record(execution_id)
        records = await self.store.nodes(execution_id)
        trail = await self.store.events(execution_id)
        children = set(await self.listing.children(execution_id))
        ordered = sorted(records.values(), key=lambda n: (n.get("started_at") or float("inf"), str(n.get("path", ""))))
        return NodePage(items=[node_run(n, trail, children) for n in ordered])

    async def resolve(self, prefix: str) -> str:
        """The one execution id ``prefix`` starts (the CLI's short ids).

        Raises:
            NotFound: none matches.
            InvalidRequest: more than one matches.
        """
        matches = await self.store.resolve_id(prefix)
        if not matches:
            raise NotFound("execution", prefix)
        if len(matches) > 1:
            raise InvalidRequest(f"{prefix!r} matches {len(matches)} executions; give more of the id")
        return str(matches[0])


def _trace_id(reply: str | None) -> str | None:
    """The trace id of the ``traceparent`` an execution's request carried (its stored reply's headers)."""
    try:
        headers = json.loads(reply or "{}").get("headers") or {}
    except (ValueError, AttributeError):
        return None
    return trace_id_of(headers.get("traceparent")) if isinstance(headers, dict) else None
