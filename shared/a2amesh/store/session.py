"""The stores of one namespace on a connection of their own, for a short-lived process such as the CLI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from a2amesh.config import Settings
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import connect_redis
from a2amesh.store.schedules import ScheduleStore

__all__ = ["StoreSession", "open_store"]


@dataclass(frozen=True)
class StoreSession:
    """The stores a reader of execution and schedule state uses."""

    executions: ExecutionStore
    schedules: ScheduleStore
    memory: MemoryStore


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[StoreSession]:
    """``async with open_store(settings) as stores``: the namespace's stores on a fresh Redis connection.

    The connection is not checked up front (the first command reports an unreachable Redis) and is closed
    on exit.
    """
    redis = await connect_redis(settings, check=False)
    keys = Keys(settings.namespace)
    executions = ExecutionStore.for_settings(redis, settings)
    try:
        yield StoreSession(executions=executions, schedules=ScheduleStore(redis, keys), memory=MemoryStore(redis, keys))
    finally:
        await executions.aclose()
        await redis.aclose()
