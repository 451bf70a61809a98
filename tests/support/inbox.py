"""A reply subject of a test's own, to see exactly what an agent publishes (bodies and headers)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, Received
from a2amesh.ids import nuid
from a2amesh.protocol import codes
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


async def publish_request(bus: Bus, agent: str, body: bytes, msg_id: str, reply_to: str) -> None:
    """Publish a request body to ``agent``'s work queue as a raw client does, with the ``Nats-Msg-Id`` given
    (a resend gets one of its own, so JetStream keeps it)."""
    hdrs = {
        h.VERSION: codes.A2A_VERSION,
        h.REPLY_TO: reply_to,
        h.DEADLINE: str(int((time.time() + 60) * 1000)),
        h.MSG_ID: msg_id,
    }
    await bus.js_publish(bus.subjects.request(agent), body, hdrs)
