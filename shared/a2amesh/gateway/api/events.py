"""``GET /api/events``: the mesh's lifecycle events as server-sent events, resumable with ``Last-Event-ID``.

Each event is ``id: {stream sequence}``, ``event: {type}`` (``workflow.started``, ``node.completed`` …) and
``data: {JSON object}``. A comment line (``: ready``) says the feed is set up; ``: ping`` follows every
``events_keepalive`` seconds without an event, so proxies keep the connection open.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from a2amesh.gateway.api.deps import mesh_of
from a2amesh.gateway.api.executions import UNAVAILABLE, Reader, translated
from a2amesh.gateway.api.problems import Problem
from a2amesh.lifecycle import until_set
from a2amesh.manage.events import EventQuery, MeshEvent, follow_events, parse_types

__all__ = ["router", "sse"]

router = APIRouter(prefix="/api", tags=["events"])

NAME = r"^[A-Za-z0-9_-]+$"


def sse(event: MeshEvent | None, *, first: bool = False) -> bytes:
    """One server-sent event (or, for None, the set-up or keep-alive comment)."""
    if event is None:
        return b": ready\n\n" if first else b": ping\n\n"
    data = json.dumps(event.data, separators=(",", ":"), default=str)
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


def _last_id(header: str | None, query: int | None) -> int | None:
    if query is not None:
        return query
    if header is None or not header.strip():
        return None
    text = header.strip()
    if not text.isdigit():
        message = "must be the id of an event this stream sent (a stream sequence number)"
        raise Problem(
            422,
            "invalid-request",
            f"header.last-event-id: {message}",
            errors=[{"path": "header.last-event-id", "message": message}],
        )
    return int(text)


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "The event stream."}, **UNAVAILABLE},
    summary="Lifecycle events as server-sent events",
)
async def events(
    request: Request,
    who: Reader,
    workflow: Annotated[str | None, Query(max_length=200, pattern=NAME, description="Only this workflow's.")] = None,
    execution: Annotated[str | None, Query(min_length=1, max_length=200, description="Only this execution's.")] = None,
    type: Annotated[
        list[str],
        Query(description="Only these types: workflow, node, or one event such as workflow.completed (repeatable)."),
    ] = [],  # noqa: B006 (FastAPI copies query defaults)
    after: Annotated[
        int | None,
        Query(ge=0, description="Resume after this event id (as Last-Event-ID, for clients without headers)."),
    ] = None,
    last_event_id: Annotated[
        str | None, Header(max_length=40, description="The id of the last event received.")
    ] = None,
) -> StreamingResponse:
    """Every lifecycle event the filters let through, from the one after ``Last-Event-ID`` (or from now)."""
    mesh = mesh_of(request)
    async with translated():
        query = EventQuery(
            workflow=workflow, execution=execution, types=parse_types(type), after=_last_id(last_event_id, after)
        )
        feed = follow_events(mesh.client.bus, query, idle=mesh.http.events_keepalive)
        try:
            await anext(feed)  # the consumer exists (or the error is answered as a problem)
        except BaseException:
            await feed.aclose()
            raise

    async def body() -> AsyncIterator[bytes]:
        async with contextlib.aclosing(feed):
            yield sse(None, first=True)
            async for event in until_set(mesh.closing, feed):
                yield sse(event)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
