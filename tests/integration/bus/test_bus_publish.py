"""``Bus.js_publish`` on a real JetStream: each publish gets its own ack, duplicates are reported, and a
subject no stream captures, a silent responder or a closed connection is a precise UNAVAILABLE."""

from __future__ import annotations

import asyncio

import pytest

from a2amesh.bus.nats import Bus, Received
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import codes


async def test_each_publish_gets_its_own_ack(bus: Bus) -> None:
    """500 publishes at once: 500 distinct stream sequence numbers, none marked duplicate."""
    subject = bus.subjects.request("ackcheck")
    acks = await asyncio.gather(*(bus.js_publish(subject, b"%d" % i, {"Nats-Msg-Id": f"m{i}"}) for i in range(500)))
    assert len({a.seq for a in acks}) == 500
    assert not any(a.duplicate for a in acks)
    assert {a.stream for a in acks} == {acks[0].stream}


async def test_a_repeated_message_id_is_reported_duplicate(bus: Bus) -> None:
    subject = bus.subjects.request("dupcheck")
    first = await bus.js_publish(subject, b"1", {"Nats-Msg-Id": "same"})
    again = await bus.js_publish(subject, b"1", {"Nats-Msg-Id": "same"})
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq


async def test_a_subject_no_stream_captures_is_unavailable(bus: Bus) -> None:
    with pytest.raises(TransportError, match="no stream captures nowhere.at.all") as err:
        await bus.js_publish("nowhere.at.all", b"x")
    assert err.value.reason == codes.UNAVAILABLE


async def test_a_responder_that_never_acks_times_out(bus: Bus, settings: Settings) -> None:
    """A core subscriber on the subject (no stream): the publish is not refused, never acknowledged, and
    fails after its timeout instead of hanging."""
    got: list[Received] = []

    async def silent(msg: Received) -> None:
        got.append(msg)

    sub = await bus.subscribe(f"{settings.namespace}.silent", silent)
    try:
        with pytest.raises(TransportError, match=r"did not acknowledge .*\.silent in 0.5s") as err:
            await asyncio.wait_for(bus.js_publish(f"{settings.namespace}.silent", b"x", timeout=0.5), 5)
        assert err.value.reason == codes.UNAVAILABLE
        assert len(got) == 1
    finally:
        await sub.unsubscribe()


async def test_publishing_on_a_closed_bus_is_unavailable(settings: Settings) -> None:
    own = await Bus.connect(settings, name="closing")
    await own.close()
    with pytest.raises(TransportError, match="cannot publish") as err:
        await own.js_publish(own.subjects.request("x"), b"x")
    assert err.value.reason == codes.UNAVAILABLE


async def test_a_message_id_still_in_process_is_sent_again_until_acknowledged(bus: Bus, settings: Settings) -> None:
    """A clustered stream leader answers 409/10158 while it still proposes an earlier attempt's copy (seen
    in the chaos suite after a paused leader came back): the publish tries again with the same
    ``Nats-Msg-Id`` and returns the ack that names the stored copy, instead of failing the caller."""
    subject = f"{settings.namespace}.inprocess"
    seen: list[Received] = []
    in_process = b'{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}'

    async def leader(msg: Received) -> None:
        seen.append(msg)
        answer = in_process if len(seen) < 3 else b'{"stream":"S","seq":7,"duplicate":true}'
        await bus.publish(msg.reply, answer)

    sub = await bus.subscribe(subject, leader)
    try:
        ack = await asyncio.wait_for(bus.js_publish(subject, b"x", {"Nats-Msg-Id": "once"}), 10)
    finally:
        await sub.unsubscribe()
    assert (ack.stream, ack.seq, ack.duplicate) == ("S", 7, True)
    assert [m.headers["Nats-Msg-Id"] for m in seen] == ["once"] * 3


async def test_another_refusal_is_not_sent_again(bus: Bus, settings: Settings) -> None:
    subject = f"{settings.namespace}.refusing"
    seen: list[Received] = []

    async def leader(msg: Received) -> None:
        seen.append(msg)
        await bus.publish(msg.reply, b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}')

    sub = await bus.subscribe(subject, leader)
    try:
        with pytest.raises(TransportError, match="refused .*refusing: wrong last sequence: 5"):
            await asyncio.wait_for(bus.js_publish(subject, b"x"), 10)
    finally:
        await sub.unsubscribe()
    assert len(seen) == 1
