"""A mesh-wide limit on the tasks forwarded to one remote at once: a counting semaphore in Redis with leases.

Each forwarded task holds a slot (a member of a sorted set scored by its lease's end, in Redis's own clock) while
it runs; a replica that dies stops renewing its slots, which lapse after ``LEASE`` seconds. The holder is the
task id, so the replica that takes a task over after a crash takes its slot too (never two for one task). A task
that finds no free slot waits (its claim on the agent's queue held, like a task waiting for the remote), trying
again with backoff up to ``WAIT_STEP_MAX`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from a2amesh.lifecycle import side_task
from a2amesh.store.redis import Redis

__all__ = ["LEASE", "MeshSemaphore"]

LEASE = 30.0
"""Seconds a slot outlives its holder's last renewal (a crashed replica's slots free up after that)."""
WAIT_STEP_MAX = 1.0

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], lease * 2)
  return 1
end
return 0
"""
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return held
"""


class MeshSemaphore:
    """At most ``limit`` holders of ``key`` at once across every replica (see the module doc).

    Attributes:
        waiting: tasks of this process waiting for a slot now.
    """

    def __init__(self, redis: Redis, key: str, limit: int, *, lease: float = LEASE) -> None:
        self.redis = redis
        self.key = key
        self.limit = limit
        self.lease_ms = int(lease * 1000)
        self.waiting = 0

    async def _eval(self, script: str, *args: Any) -> int:
        result = await self.redis.eval(script, 1, self.key, *args)
        return int(result)

    async def acquire(self, holder: str) -> None:
        """Wait for a slot (or take back the one ``holder`` already has)."""
        delay = 0.02
        self.waiting += 1
        try:
            while not await self._eval(_ACQUIRE, self.lease_ms, self.limit, holder):
                await asyncio.sleep(delay)
                delay = min(delay * 2, WAIT_STEP_MAX)
        finally:
            self.waiting -= 1

    async def release(self, holder: str) -> None:
        await self.redis.zrem(self.key, holder)

    async def holders(self) -> list[str]:
        """The holders of slots (a crashed replica's until their lease ends; for operators and tests)."""
        return [str(m) for m in await self.redis.zrange(self.key, 0, -1)]

    @contextlib.asynccontextmanager
    async def held(self, holder: str) -> AsyncIterator[None]:
        """Hold a slot for the block, renewing its lease; released at the end, also on cancellation."""
        await self.acquire(holder)
        try:
            async with side_task(self._renew(holder), name=f"slot-{holder}"):
                yield
        finally:
            await asyncio.shield(self.release(holder))

    async def _renew(self, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            with contextlib.suppress(Exception):  # a Redis hiccup: the next renewal may succeed within the lease
                await self._eval(_RENEW, self.lease_ms, holder)
