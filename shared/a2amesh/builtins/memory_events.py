"""The events a memory entry's change publishes (``{ns}.events.memory.{agent}.created|updated|deleted``), apart
from the memory agent itself so the management API announces a deletion without loading the embedders."""

from __future__ import annotations

import contextlib

from a2amesh.bus.nats import Bus
from a2amesh.errors import TransportError
from a2amesh.jsontext import dumps_bytes
from a2amesh.store.memory import MemoryEntry

__all__ = ["publish_memory_event"]


async def publish_memory_event(bus: Bus, event: str, entry: MemoryEntry) -> None:
    """``memory.created|updated|deleted`` of an entry on the events stream (its content left out: entries may be
    private to a user, and the event says only what changed). Best effort: a store write is not undone when
    NATS is away."""
    data = {
        "id": entry.id,
        "agent": entry.agent,
        "user": entry.user,
        "key": entry.key,
        "event": event,
        "timestamp": entry.updated_at,
    }
    with contextlib.suppress(TransportError):
        await bus.js_publish(bus.subjects.memory_event(entry.agent, event), dumps_bytes(data))
