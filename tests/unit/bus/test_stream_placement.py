"""Stream and bucket creation on a cluster: a peer that is offline for a moment is waited for (bounded); a cluster
too small for the replicas is a precise configuration error at once."""

from __future__ import annotations

from typing import Any

import nats.errors
import nats.js.errors
import pytest

from a2amesh.bus import setup
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, TransportError
from a2amesh.protocol import codes


def refusal(description: str) -> nats.js.errors.APIError:
    return nats.js.errors.BadRequestError(code=400, err_code=10005, description=description)


def settings(replicas: int) -> Settings:
    return Settings.load(environ={}, profile="test", replicas=replicas)


async def test_a_peer_offline_for_a_moment_is_waited_for() -> None:
    calls: list[int] = []

    async def create() -> Any:
        calls.append(1)
        if len(calls) < 3:
            raise refusal("no suitable peers for placement, peer offline")
        return "created"

    await setup._admin("S", create, settings(3))
    assert len(calls) == 3


async def test_too_few_nodes_is_a_config_error_naming_the_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup, "PLACEMENT_WAIT", 0.5)

    async def create() -> Any:
        raise refusal("replicas > 1 not supported in non-clustered mode")

    with pytest.raises(ConfigError) as e:
        await setup._admin("S", create, settings(3))
    assert "3 replicas need a JetStream cluster of at least 3 nodes" in str(e.value)


async def test_a_peer_that_stays_offline_is_reported_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup, "PLACEMENT_WAIT", 0.5)
    calls: list[int] = []

    async def create() -> Any:
        calls.append(1)
        raise refusal("no suitable peers for placement, peer offline")

    with pytest.raises(ConfigError) as e:
        await setup._admin("S", create, settings(3))
    assert "peer offline" in str(e.value)
    assert len(calls) >= 2


async def test_a_request_jetstream_does_not_answer_in_time_is_asked_again() -> None:
    """A cluster still electing its leaders (or a server under load) lets an admin request time out: asked again."""
    calls: list[int] = []

    async def info() -> Any:
        calls.append(1)
        if len(calls) < 3:
            raise nats.errors.TimeoutError
        return "info"

    assert await setup._admin("S", info, settings(3)) == "info"
    assert len(calls) == 3


async def test_jetstream_silent_past_the_wait_is_unavailable_naming_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup, "PLACEMENT_WAIT", 0.5)

    async def create() -> Any:
        raise nats.errors.TimeoutError

    with pytest.raises(TransportError) as e:
        await setup._admin("S", create, settings(1))
    assert e.value.reason == codes.UNAVAILABLE
    assert "JetStream did not answer for stream S within 0.5s" in str(e.value)


async def test_a_missing_stream_is_reported_at_once() -> None:
    calls: list[int] = []

    async def info() -> Any:
        calls.append(1)
        raise nats.js.errors.NotFoundError(code=404, err_code=10059, description="stream not found")

    with pytest.raises(nats.js.errors.NotFoundError):
        await setup._admin("S", info, settings(3))
    assert calls == [1]
