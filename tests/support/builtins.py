"""The ``builtins`` fixture: the built-in agents served in-process, pointed at a model endpoint."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from a2amesh.builtins.agents import BuiltinAgents, ModelSettings
from a2amesh.builtins.service import BuiltinsWorker
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.store.redis import Redis

BuiltinsFactory = Callable[..., Any]


@pytest.fixture
async def builtins(bus: Bus, redis: Redis, settings: Settings) -> AsyncIterator[BuiltinsFactory]:
    """Start the built-in agents for ``base_url`` (model ``fake-model``), or with no endpoint (None: embeddings
    from the offline model); stopped at teardown."""
    started: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def start(base_url: str | None, *, max_retries: int = 0, timeout: float = 10.0) -> BuiltinsWorker:
        models = ModelSettings(
            base_url=base_url,
            api_key=None,
            model="fake-model",
            embedding_model="fake-embedding" if base_url else None,
            timeout=timeout,
            max_retries=max_retries,
        )
        worker = BuiltinsWorker(BuiltinAgents(models), bus=bus, redis=redis, settings=settings)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run_until(stop))
        started.append((stop, task))
        waiter = asyncio.create_task(worker.ready.wait())
        done, _ = await asyncio.wait({waiter, task}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert worker.ready.is_set(), "the built-in agents did not become ready within 10s"
        return worker

    yield start
    for stop, _ in started:
        stop.set()
    for _, task in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 20)
