"""PullConsumer on a real JetStream: a pull request the server expires is renewed, so an idle replica
never sits without a request (a message would wait for the owner's next poll); ``serve`` hands each
message to its owner as it arrives and never asks for more than the owner's free slots."""

from __future__ import annotations

import asyncio

import pytest

from a2amesh.bus.nats import Bus, PullConsumer, WorkMsg
from a2amesh.bus.setup import ensure_consumer
from a2amesh.config import Settings
from tests.support.waiting import eventually, within


async def test_an_expired_pull_request_is_renewed(
    bus: Bus, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PullConsumer, "EXPIRES", 0.3)
    await ensure_consumer(bus, settings, "renew", max_ack_pending=10)
    consumer = await bus.pull_consumer(bus.subjects.tasks_stream, bus.subjects.consumer("renew"))
    try:
        await consumer.want(4)
        await eventually(lambda: consumer.renewals >= 2, timeout=10, what="two expiries of the request renewed")
        assert consumer.outstanding == 4  # the books still hold exactly the credit granted
        # the owner never asked again: a message published now is delivered on the renewed request
        await bus.js_publish(bus.subjects.request("renew"), b"hello")
        msg = await consumer.next(timeout=5)
        assert msg is not None
        assert msg.data == b"hello"
        await msg.ack()
        assert consumer.outstanding == 3
    finally:
        await consumer.stop()


async def test_serve_hands_messages_over_within_the_free_slots(bus: Bus, settings: Settings) -> None:
    await ensure_consumer(bus, settings, "served", max_ack_pending=10)
    consumer = await bus.pull_consumer(bus.subjects.tasks_stream, bus.subjects.consumer("served"))
    handed: list[bytes] = []
    slots = {"free": 2}
    stop = asyncio.Event()

    def handle(msg: WorkMsg) -> None:
        handed.append(msg.data)
        slots["free"] -= 1  # the owner's worker now holds a slot

    serving = asyncio.create_task(consumer.serve(handle, lambda: slots["free"], stop))
    try:
        for i in range(5):
            await bus.js_publish(bus.subjects.request("served"), f"m{i}".encode())
        await eventually(lambda: len(handed) == 2, timeout=5, what="the first two messages handed over")
        # no credit beyond the free slots: the other three wait on the server, not in this process
        assert consumer.outstanding == 0
        assert handed == [b"m0", b"m1"]
        slots["free"] += 1  # a worker finished
        consumer.wake()
        await eventually(lambda: len(handed) == 3, timeout=5, what="a message for the freed slot")
        assert handed[2] == b"m2"
        assert consumer.outstanding == 0
    finally:
        stop.set()
        await within(serving, 5, "serve to return once told to stop (within its poll)")
        await consumer.stop()
    assert consumer.drain_queued() == []  # nothing was queued: every message went to the handler
