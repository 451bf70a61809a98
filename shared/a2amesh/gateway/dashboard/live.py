"""The dashboard's live updates: the management API's event feed (:func:`a2amesh.manage.events.follow_events`,
what ``GET /api/events`` streams), batched per open page and sent as SSE.

A page does not render events itself: it is told *what changed* (execution ids, workflows) at most every
:data:`BATCH_SECONDS`, and re-fetches its live parts from the same data functions that rendered it. So a
burst of 50 runs a second costs a page two small refreshes a second. Each batch carries the stream sequence
of its last event as its SSE ``id``; a page that reconnects (the browser by itself with ``Last-Event-ID``, or
the page's script with ``?after=``) gets every event stored after it, so it misses nothing. A fresh connect
(no id) starts with a ``changed`` message, which brings the page up to date at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.dashboard import data
from a2amesh.lifecycle import side_task
from a2amesh.logs import get_logger
from a2amesh.manage.events import MeshEvent

__all__ = ["BATCH_SECONDS", "PING_SECONDS", "stream"]

BATCH_SECONDS = 0.5
PING_SECONDS = 15.0

log = get_logger("gateway.dashboard")


def _message(seq: int | None, batch: list[MeshEvent]) -> str:
    events = [e.data for e in batch]
    body = json.dumps(
        {
            "ids": sorted({str(e["execution_id"]) for e in events if e.get("execution_id")}),
            "workflows": sorted({str(e["workflow"]) for e in events if e.get("workflow")}),
            "statuses": sorted({str(e["status"]) for e in events if e.get("status")}),
        }
    )
    head = "" if seq is None else f"id: {seq}\n"
    return f"{head}event: changed\ndata: {body}\n\n"


class _Ended:
    """Put on the queue when the feed stops (the event stream failed): the page's stream ends, and the browser
    reconnects from its last id."""


Item = MeshEvent | None | _Ended


async def _pump(feed: AsyncIterator[MeshEvent | None], queue: asyncio.Queue[Item]) -> None:
    try:
        async for event in feed:
            await queue.put(event)
    except Exception as e:
        log.warning("dashboard.events_lost", error=str(e) or type(e).__name__)
    finally:
        with contextlib.suppress(asyncio.QueueFull):  # a full queue is being read: the reader meets the end later
            queue.put_nowait(_Ended())


async def stream(mesh: ApiMesh, *, execution: str | None = None, after: int | None = None) -> AsyncIterator[str]:
    """SSE text: ``changed`` at a fresh connect, then one ``changed`` per batch of events (only ``execution``'s
    when given) with the last event's sequence as its id, and a comment every :data:`PING_SECONDS`."""
    async with data.follow(mesh, execution=execution, after=after, idle=PING_SECONDS) as feed:
        try:
            await anext(feed)  # the consumer exists: nothing stored from here on is missed
        except Exception as e:  # NATS unreachable or no events stream: the browser tries again after `retry`
            log.warning("dashboard.events_unavailable", error=str(e) or type(e).__name__)
            yield "retry: 5000\n: the event stream is unavailable\n\n"
            return
        yield "retry: 2000\n" + (_message(None, []) if after is None else ": resumed\n\n")
        queue: asyncio.Queue[Item] = asyncio.Queue(1000)
        loop = asyncio.get_running_loop()
        async with side_task(_pump(feed, queue), name="dashboard-events-pump"):
            while True:
                first = await queue.get()
                if isinstance(first, _Ended):
                    return
                if first is None:
                    yield ": ping\n\n"
                    continue
                batch = [first]
                ended = False
                until = loop.time() + BATCH_SECONDS
                while (left := until - loop.time()) > 0:
                    try:
                        async with asyncio.timeout(left):
                            item = await queue.get()
                    except TimeoutError:
                        break
                    if isinstance(item, _Ended):
                        ended = True
                        break
                    if item is not None:
                        batch.append(item)
                yield _message(batch[-1].id, batch)
                if ended:
                    return
