"""Handlers of the agents that executor process tests run as separate OS processes.

They record in the test's Redis (keys under the test namespace) what ran, so tests can count
invocations per node and see cancellations.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis.asyncio as aioredis

_redis: aioredis.Redis | None = None


def _r() -> aioredis.Redis:
    global _redis
    if _redis is None:
        _redis = aioredis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    return _redis


def key(*parts: str) -> str:
    """A test key under the namespace (the test computes the same)."""
    return ":".join([os.environ["A2AMESH_NAMESPACE"], "test", *parts])


async def tag(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Echo the input, counting invocations per node."""
    await _r().hincrby(key("runs"), str(ctx.node_id), 1)
    return dict(input)


async def hold(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Announce the start, then wait until the test sets the release key (or we are cancelled)."""
    r = _r()
    await r.rpush(key("started"), ctx.task_id)
    try:
        for _ in range(1200):
            if await r.get(key("release")):
                return {"released": True, **input}
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        await asyncio.shield(r.rpush(key("cancelled"), ctx.task_id))
        raise
    raise RuntimeError("never released")
