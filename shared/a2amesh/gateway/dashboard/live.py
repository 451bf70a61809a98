"""The dashboard's live updates: one event subscription per gateway, fanned out to each open page as SSE.

A page does not render events itself: it is told *what changed* (execution ids, workflows) at most every
:data:`BATCH_SECONDS`, and re-fetches its live parts from the same data functions that rendered it. So a
burst of 50 runs a second costs a page two small refreshes a second, and a page that reconnects (the browser
reconnects an ``EventSource`` by itself) is brought up to date by the ``changed`` event sent on every connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from a2amesh.bus.nats import Subscription
from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.dashboard import data
from a2amesh.logs import get_logger

__all__ = ["BATCH_SECONDS", "Hub", "hub_of", "stream"]

BATCH_SECONDS = 0.5
PING_SECONDS = 15.0
_QUEUE = 1000

log = get_logger("gateway.dashboard")


class Hub:
    """Fans the mesh's lifecycle events out to the open pages (subscribed while any page listens)."""

    def __init__(self, mesh: ApiMesh) -> None:
        self._mesh = mesh
        self._queues: set[asyncio.Queue[dict[str, Any]]] = set()
        self._subs: list[Subscription] = []
        self._lock = asyncio.Lock()

    async def _deliver(self, event: dict[str, Any]) -> None:
        for queue in self._queues:
            with contextlib.suppress(asyncio.QueueFull):  # a slow page misses details, not the next batch
                queue.put_nowait(event)

    async def join(self) -> asyncio.Queue[dict[str, Any]]:
        """A queue receiving every event from now on (subscribes on the first page)."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_QUEUE)
        async with self._lock:
            if not self._subs:
                self._subs = await data.subscribe_events(self._mesh, self._deliver)
            self._queues.add(queue)
        return queue

    async def leave(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """Stop delivering to ``queue`` (unsubscribes after the last page)."""
        async with self._lock:
            self._queues.discard(queue)
            if not self._queues:
                subs, self._subs = self._subs, []
                for sub in subs:
                    with contextlib.suppress(Exception):  # the connection may be closing
                        await sub.unsubscribe()


def hub_of(mesh: ApiMesh) -> Hub:
    """The gateway's hub (made on first use)."""
    hub = mesh.extras.get("dashboard.hub")
    if hub is None:
        hub = mesh.extras["dashboard.hub"] = Hub(mesh)
    assert isinstance(hub, Hub)
    return hub


def _message(seq: int, ids: set[str], workflows: set[str], statuses: set[str]) -> str:
    body = json.dumps({"ids": sorted(ids), "workflows": sorted(workflows), "statuses": sorted(statuses)})
    return f"id: {seq}\nevent: changed\ndata: {body}\n\n"


async def stream(mesh: ApiMesh, *, execution: str | None = None) -> AsyncIterator[str]:
    """SSE text: ``changed`` at connect, then one ``changed`` per batch of events (only ``execution``'s when
    given), and a comment line every :data:`PING_SECONDS` to keep proxies from closing the stream."""
    hub = hub_of(mesh)
    try:
        queue = await hub.join()
    except Exception as e:  # NATS unreachable: the browser tries again after `retry`
        log.warning("dashboard.events_unavailable", error=str(e) or type(e).__name__)
        yield "retry: 5000\n: the event stream is unavailable\n\n"
        return
    seq = 0
    try:
        yield "retry: 2000\n" + _message(seq, set(), set(), set())
        while True:
            try:
                async with asyncio.timeout(PING_SECONDS):
                    first = await queue.get()
            except TimeoutError:
                yield ": ping\n\n"
                continue
            batch = [first]
            loop = asyncio.get_running_loop()
            until = loop.time() + BATCH_SECONDS
            while (left := until - loop.time()) > 0:
                try:
                    async with asyncio.timeout(left):
                        batch.append(await queue.get())
                except TimeoutError:
                    break
            if execution is not None:
                batch = [e for e in batch if e.get("execution_id") == execution]
                if not batch:
                    continue
            seq += 1
            ids = {str(e.get("execution_id")) for e in batch if e.get("execution_id")}
            workflows = {str(e.get("workflow")) for e in batch if e.get("workflow")}
            statuses = {str(e.get("status")) for e in batch if e.get("status")}
            yield _message(seq, ids, workflows, statuses)
    finally:
        await hub.leave(queue)
