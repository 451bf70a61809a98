"""A reply subject of a test's own, to see exactly what an agent publishes (bodies and headers)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from a2amesh.bus.nats import Bus, Received
from a2amesh.ids import nuid
from tests.support.waiting import within


class Inbox:
    """Collects every message published to one reply subject (of a call to ``callee``: agents do not check
    that token, only NATS permissions do)."""

    def __init__(self, bus: Bus, callee: str = "callee") -> None:
        self.bus = bus
        self.subject = bus.subjects.reply("rawtest", callee, nuid())
        self.queue: asyncio.Queue[Received] = asyncio.Queue()

    async def start(self) -> Inbox:
        async def put(msg: Received) -> None:
            self.queue.put_nowait(msg)

        await self.bus.subscribe(self.subject, put)
        return self

    async def next(self, what: str, timeout: float = 5) -> tuple[dict[str, Any], dict[str, str]]:
        msg = await within(self.queue.get(), timeout, what)
        return json.loads(msg.data), msg.headers

    async def until_final(self, what: str, timeout: float = 10) -> list[tuple[dict[str, Any], dict[str, str]]]:
        out = []
        while True:
            body, headers = await self.next(what, timeout)
            out.append((body, headers))
            if headers.get("A2A-Final") == "true":
                return out
