"""Token deltas of a streaming answer on the call's delta subject (SPEC §3.2; best effort, not persisted).

Each message is a JSON object ``{"taskId", "contextId", "index", "text"}`` with the header ``A2A-Agent``;
``index`` counts the deltas of one task attempt from 0, and the final Task always holds the whole text.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from itertools import count

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus

__all__ = ["DeltaSink", "delta_sink"]

DeltaSink = Callable[[str], Awaitable[None]]
"""Publishes one (coalesced) text delta of a streaming answer on the call's delta subject."""


def delta_sink(bus: Bus, *, reply_subject: str, agent: str, task_id: str, context_id: str) -> DeltaSink | None:
    """A sink publishing text deltas for the call answered on ``reply_subject`` (None if it has no delta subject)."""
    subject = bus.subjects.delta_for_reply(reply_subject)
    if subject is None:
        return None
    index = count()
    headers = {h.AGENT: agent}

    async def publish(text: str) -> None:
        body = {"taskId": task_id, "contextId": context_id, "index": next(index), "text": text}
        await bus.publish(subject, json.dumps(body, ensure_ascii=False).encode(), headers)

    return publish
