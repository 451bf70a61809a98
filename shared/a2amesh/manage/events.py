"""The mesh's lifecycle events as a resumable feed (what ``GET /api/events`` streams as server-sent events).

Events are read from the ``{NS}_EVENTS`` JetStream stream (SPEC §9) through an ordered ephemeral consumer;
an event's id is its stream sequence, so a client that reconnects with the last id it saw continues with
the next event stored after it and misses nothing the stream still holds.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from a2amesh.bus.nats import Bus, StoredMsg
from a2amesh.bus.subjects import Subjects
from a2amesh.manage.failures import InvalidRequest
from a2amesh.protocol.states import state_word

__all__ = ["EventQuery", "MeshEvent", "follow_events", "last_event_id", "parse_types"]

_TYPE = re.compile(r"^(workflow|node|memory)(\.[a-z][a-z_]*)?$")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class MeshEvent:
    """One lifecycle event: its stream sequence (the SSE id), its type (``workflow.completed``,
    ``node.started`` …) and its JSON object (``execution_id``, ``workflow``, ``node_id``, ``status``,
    ``timestamp`` …)."""

    id: int
    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class EventQuery:
    """Which events a feed carries.

    Attributes:
        workflow: only this workflow's.
        execution: only this execution's.
        types: only these types (``workflow``, ``node``, or one event such as ``workflow.completed``).
        after: the sequence of the last event the client saw (None: from now on).
    """

    workflow: str | None = None
    execution: str | None = None
    types: tuple[str, ...] = ()
    after: int | None = None


def parse_types(values: list[str]) -> tuple[str, ...]:
    """Event types from query values (each may hold several, comma-separated).

    Raises:
        InvalidRequest: a type that is not ``workflow``, ``node``, ``memory`` or ``GROUP.EVENT``.
    """
    types = tuple(t.strip() for value in values for t in value.split(",") if t.strip())
    bad = [t for t in types if not _TYPE.match(t)]
    if bad:
        message = f"{bad[0]!r} is not an event type: use workflow, node, memory, or one event such as node.completed"
        raise InvalidRequest(f"type: {message}", [{"path": "query.type", "message": message}])
    return types


def _wanted(kind: str, types: tuple[str, ...]) -> bool:
    group = kind.partition(".")[0]
    return not types or kind in types or group in types


async def follow_events(bus: Bus, query: EventQuery, *, idle: float) -> AsyncGenerator[MeshEvent | None]:
    """The events ``query`` asks for, oldest first: ``None`` first once the feed is set up, then after each
    ``idle`` seconds without an event (time for a keep-alive). Runs until the caller closes it.

    Raises:
        InvalidRequest: a workflow name that cannot be one.
        TransportError: the events stream does not exist.
    """
    if query.workflow is not None and not _NAME.match(query.workflow):
        message = "a workflow name is made of letters, digits, '_' and '-'"
        raise InvalidRequest(f"workflow: {message}", [{"path": "query.workflow", "message": message}])
    subjects = bus.subjects
    group = event = None
    if len(query.types) == 1:
        group, _, rest = query.types[0].partition(".")
        event = rest or None
    subject = subjects.events_filter(group, query.workflow, event)
    feed = bus.follow(subjects.events_stream, subject, after=query.after, idle=idle)
    quiet_since = time.monotonic()
    first = True
    async with contextlib.aclosing(feed):
        async for msg in feed:
            found = None if msg is None else _event(msg, subjects, query)
            if found is not None or first or time.monotonic() - quiet_since >= idle:
                first = False
                quiet_since = time.monotonic()
                yield found


async def last_event_id(bus: Bus) -> int:
    """The id of the newest event stored (0 when none): a client that renders a view now and then follows the
    events after this id misses nothing that happens in between.

    Raises:
        TransportError: the events stream does not exist.
    """
    return await bus.last_seq(bus.subjects.events_stream)


def _event(msg: StoredMsg, subjects: Subjects, query: EventQuery) -> MeshEvent | None:
    """The event a stream message holds, if the query wants it."""
    parts = subjects.event_parts(msg.subject)
    if parts is None:
        return None
    kind = f"{parts[0]}.{parts[2]}"
    if not _wanted(kind, query.types):
        return None
    try:
        data = json.loads(msg.data)
    except ValueError:
        return None
    if not isinstance(data, dict) or (query.execution and data.get("execution_id") != query.execution):
        return None
    if isinstance(data.get("status"), str):
        data["status"] = state_word(data["status"])
    return MeshEvent(msg.seq, kind, data)
