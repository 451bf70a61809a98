"""The executor's second source of workflows: every enabled workflow of the definitions store.

A replica listens to the definitions' lifecycle events (``{ns}.events.workflow.*.created|updated|deleted``,
SPEC §9) and reconciles with the store on each, and every ``interval`` seconds as a safety net (an event
is core NATS: one sent while a replica was reconnecting is lost). A reconcile reads the heads (one
``HGETALL``) and loads only the versions whose ETag it has not seen; a stored version that does not load
(written by an older release, say) is reported once and leaves the last good one served.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from a2amesh.bus.nats import Bus, Received, Subscription
from a2amesh.errors import ConfigError
from a2amesh.lifecycle import reconcile_forever
from a2amesh.store.definitions import DefinitionHead, DefinitionStore, definition_body
from a2amesh.workflow.formats import Loaded as _Loaded
from a2amesh.workflow.loader import load_data

__all__ = ["DEFINITION_EVENTS", "StoredWorkflows"]

DEFINITION_EVENTS = ("created", "updated", "deleted")

Loaded = _Loaded[Any]


class StoredWorkflows:
    """Keeps a replica's stored workflows in step with the definitions store.

    Args:
        bus: the replica's bus (events).
        store: the definitions store.
        apply: called with every enabled stored workflow, by id, whenever that set changed.
        log: the replica's logger.
        interval: seconds between reconciles without an event.
    """

    def __init__(
        self,
        bus: Bus,
        store: DefinitionStore,
        apply: Callable[[dict[str, Loaded]], Awaitable[None]],
        *,
        log: Any,
        interval: float = 5.0,
    ) -> None:
        self.bus = bus
        self.store = store
        self.apply = apply
        self.log = log
        self.interval = interval
        self._known: dict[str, tuple[str, Loaded]] = {}
        self._failed: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        """Listen to the lifecycle events, then load what the store holds now."""

        async def on_event(msg: Received) -> None:
            self._wake.set()

        for event in DEFINITION_EVENTS:
            self._subs.append(await self.bus.subscribe(self.bus.subjects.workflow_events_of(event), on_event))
        await self.sync()

    async def stop(self) -> None:
        """Stop listening."""
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()

    async def loop(self) -> None:
        """Reconcile on every event and every ``interval`` seconds, until cancelled."""
        await reconcile_forever(self._wake, self.interval, self.sync, log=self.log, failed="workflow.store_sync_failed")

    async def sync(self) -> None:
        """Read the store and hand the enabled workflows to ``apply`` if anything changed."""
        heads = {h.id: h for h in await self.store.heads() if h.enabled}
        loaded: dict[str, tuple[str, Loaded]] = {}
        for workflow_id, head in heads.items():
            known = self._known.get(workflow_id)
            if known is not None and known[0] == head.etag:
                loaded[workflow_id] = known
                continue
            workflow = await self._load(head)
            if workflow is not None:
                loaded[workflow_id] = (head.etag, workflow)
            elif known is not None:
                loaded[workflow_id] = known
        if {k: v[0] for k, v in loaded.items()} == {k: v[0] for k, v in self._known.items()}:
            return
        self._known = loaded
        await self.apply({k: v[1] for k, v in loaded.items()})

    async def _load(self, head: DefinitionHead) -> Loaded | None:
        if self._failed.get(head.id) == head.etag:
            return None
        document = await self.store.document(head.id, head.version)
        try:
            found = await asyncio.to_thread(load_data, definition_body(document), name=head.id, source=head.id)
            workflow = dataclasses.replace(
                next(w for w in found if w.name == head.id), version=head.version, mcp_export=head.mcp_export
            )
        except (ConfigError, ValueError, StopIteration) as e:
            self._failed[head.id] = head.etag
            self.log.error("workflow.stored_invalid", workflow=head.id, version=head.version, error=str(e))
            return None
        self._failed.pop(head.id, None)
        return workflow
