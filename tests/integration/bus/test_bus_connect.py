"""Connecting to NATS: with no server answering, a process fails within ``connect_timeout`` with UNAVAILABLE
naming the URLs, instead of waiting for ever."""

from __future__ import annotations

import socket

import pytest

from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.protocol import codes
from tests.support.waiting import within


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_server_is_unavailable_within_the_connect_timeout() -> None:
    url = f"nats://127.0.0.1:{closed_port()}"
    settings = Settings.load(environ={}, profile="test", nats_url=url, connect_timeout=1.0)
    with pytest.raises(TransportError) as e:
        await within(Bus.connect(settings, name="nobody-home"), 10, "Bus.connect to give up")
    assert e.value.reason == codes.UNAVAILABLE
    assert url in str(e.value)
    assert "within 1s" in str(e.value)


async def test_a_running_server_connects(settings: Settings) -> None:
    bus = await Bus.connect(settings.model_copy(update={"connect_timeout": 1.0}), name="somebody-home")
    try:
        assert bus.connected
    finally:
        await bus.close()
