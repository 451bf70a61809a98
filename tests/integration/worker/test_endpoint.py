"""The one endpoint lifecycle (``worker/endpoint.py``) on real NATS: serving a name publishes its card,
answers its control subject and hands pulled work over; leaving it naks what was delivered and not handed out
(redelivered to another consumer at once, not after ``ack_wait``), unsubscribes the control subject and
withdraws the card, each step on its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.bus.nats import Bus, Received, WorkMsg
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import codes
from a2amesh.registry import CardPublisher
from a2amesh.worker.endpoint import Endpoint
from tests.support.waiting import eventually, within


async def _echo(input: Any, ctx: Any) -> Any:
    return input


async def test_leaving_an_endpoint_naks_queued_work_unsubscribes_control_and_withdraws_the_card(
    bus: Bus, settings: Settings
) -> None:
    # a long ack_wait: a message redelivered within seconds was nak'ed, not left to time out
    settings = settings.model_copy(update={"ack_wait": 60.0})
    name = "ep"
    card = PythonAgent(AgentDefinition(name=name, handler="inline:handler"), _echo).card(settings.namespace)
    publisher = CardPublisher(bus, card, instance="replica-1", card_ttl=settings.card_ttl)
    handed: list[WorkMsg] = []
    controls: list[bytes] = []
    until = asyncio.Event()

    async def on_control(msg: Received) -> None:
        controls.append(msg.data)
        await bus.publish(msg.reply, b"pong")

    endpoint = Endpoint(
        bus,
        settings,
        publisher,
        on_control=on_control,
        start_work=handed.append,
        free=lambda: 4 - len(handed),
        until=until,
        max_ack_pending=16,
    )
    cards = await bus.kv(bus.subjects.cards_bucket)
    presence = await bus.kv(bus.subjects.presence_bucket)
    stream, durable = bus.subjects.tasks_stream, bus.subjects.consumer(name)
    async with endpoint:
        assert await cards.get(name) is not None
        assert await presence.get(publisher.presence_key) is not None
        answer = await bus.request(bus.subjects.control(name), b"ping", None, timeout=5)
        assert answer.data == b"pong"
        assert controls == [b"ping"]

        await bus.js_publish(bus.subjects.request(name), b"first")
        await eventually(lambda: len(handed) == 1, timeout=5, what="the first message handed to start_work")
        assert handed[0].data == b"first"

        # pulling ends; the pull request still open on the server delivers what comes now into the queue
        until.set()
        await within(endpoint.pulled(), 5, "the pull loop to end once until is set")
        for body in (b"queued-1", b"queued-2"):
            await bus.js_publish(bus.subjects.request(name), body)

        async def delivered() -> bool:
            info = await bus.jsm.consumer_info(stream, durable)
            return bool(info.num_ack_pending == 3)  # the handed one and the two queued, none settled

        await eventually(delivered, timeout=5, what="the two later messages delivered into the endpoint's queue")
        assert len(handed) == 1  # not handed out: queued

        await endpoint.stop_pulling()
        # another replica gets the queued two at once (nak'ed), while the handed one stays with its worker
        other = await bus.pull_consumer(stream, durable)
        try:
            await other.want(4)
            got = []
            for _ in range(2):
                msg = await other.next(timeout=5)
                assert msg is not None, "a queued message was not redelivered at once: not nak'ed on stop"
                got.append(msg)
            assert sorted(m.data for m in got) == [b"queued-1", b"queued-2"]
            assert all(m.num_delivered == 2 for m in got)
            for m in got:
                await m.ack()
        finally:
            await other.stop()

        # control is still answered between stop_pulling and close (a CancelTask of draining work)
        answer = await bus.request(bus.subjects.control(name), b"still", None, timeout=5)
        assert answer.data == b"pong"
        await endpoint.close()
        with pytest.raises(TransportError) as e:
            await bus.request(bus.subjects.control(name), b"gone", None, timeout=2)
        assert e.value.reason == codes.UNAVAILABLE  # no responders: unsubscribed
        assert await cards.get(name) is not None  # withdrawn only by the last step
        await handed[0].ack()
    # leaving the block withdraws the card and the presence key (and repeats nothing else)
    assert await cards.get(name) is None
    assert await presence.get(publisher.presence_key) is None
    assert controls == [b"ping", b"still"]


async def test_an_endpoint_that_fails_to_start_closes_what_it_opened(
    bus: Bus, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "broken"
    card = PythonAgent(AgentDefinition(name=name, handler="inline:handler"), _echo).card(settings.namespace)
    publisher = CardPublisher(bus, card, instance="replica-1", card_ttl=settings.card_ttl)

    async def on_control(msg: Received) -> None:
        raise AssertionError("never subscribed")

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise TransportError(codes.UNAVAILABLE, "control subscription refused")

    endpoint = Endpoint(
        bus,
        settings,
        publisher,
        on_control=on_control,
        start_work=lambda msg: None,
        free=lambda: 1,
        until=asyncio.Event(),
        max_ack_pending=16,
    )
    monkeypatch.setattr(bus, "subscribe", refused)
    with pytest.raises(TransportError, match="control subscription refused"):
        await endpoint.start()
    cards = await bus.kv(bus.subjects.cards_bucket)
    assert await cards.get(name) is None  # published first, withdrawn on the failure
    assert await (await bus.kv(bus.subjects.presence_bucket)).get(publisher.presence_key) is None
    assert endpoint.consumer is not None
    assert endpoint.consumer.drain_queued() == []
