"""The ``gateway`` fixture: real HTTP gateways (uvicorn on a free loopback port) over the test's mesh."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client as SdkClient

from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.gateway import Gateway, GatewaySettings

GatewayFactory = Callable[..., Any]


@pytest.fixture
async def gateway(bus: Bus, settings: Settings) -> AsyncIterator[GatewayFactory]:
    """Start a gateway (``own_bus=True``: a replica with its own NATS connection); returns its base URL."""
    started: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(*, own_bus: bool = False, **http: Any) -> str:
        gw = Gateway(settings, GatewaySettings(host="127.0.0.1", port=0, **http), bus=None if own_bus else bus)
        stop = asyncio.Event()
        task = asyncio.create_task(gw.run_until(stop))
        started.append((stop, task))
        waiter = asyncio.create_task(gw.ready.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert gw.ready.is_set(), "the gateway did not start listening within 10s"
        return gw.url

    yield start
    for stop, _ in started:
        stop.set()
    for _, task in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def sdk_client(
    url: str, binding: str, *, streaming: bool = True, polling: bool = False, headers: dict[str, str] | None = None
) -> AsyncIterator[SdkClient]:
    """An a2a-sdk client made from the card the gateway serves at ``url`` (an ``/agents/{name}`` URL)."""
    async with httpx.AsyncClient(timeout=30, headers=headers or {}) as http:
        config = ClientConfig(
            streaming=streaming, polling=polling, httpx_client=http, supported_protocol_bindings=[binding]
        )
        client = await ClientFactory(config).create_from_url(url)
        try:
            yield client
        finally:
            await client.close()
