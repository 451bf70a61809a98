"""PullConsumer on a real JetStream: a pull request the server expires is renewed, so an idle replica
never sits without a request (a message would wait for the owner's next poll)."""

from __future__ import annotations

import pytest

from a2amesh.bus.nats import Bus, PullConsumer
from a2amesh.bus.setup import ensure_consumer
from a2amesh.config import Settings
from tests.support.waiting import eventually


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
