"""Reads that merge the shards of a partitioned index (:data:`a2amesh.store.keys.INDEX_SHARDS`) into one
order, as if the index were one sorted set: one pipelined read per shard, each bounded by what the merged
result can hold, then a merge."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["by_shard", "earliest", "everything", "newest"]


def by_shard(ids: Iterable[str]) -> dict[int, list[str]]:
    """``ids`` grouped by their index shard."""
    out: dict[int, list[str]] = {}
    for member in ids:
        out.setdefault(Keys.shard(member), []).append(member)
    return out


async def earliest(redis: Redis, keys: Sequence[str], low: Any, high: Any, limit: int) -> list[str]:
    """Up to ``limit`` members scored in ``[low, high]`` across ``keys``, lowest score first (ties by id)."""
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.zrangebyscore(key, low, high, start=0, num=limit, withscores=True)
    rows = [(float(score), str(m)) for reply in await pipe.execute() for m, score in reply]
    return [m for _, m in heapq.nsmallest(limit, rows)]


async def newest(redis: Redis, keys: Sequence[str], count: int) -> list[tuple[str, float]]:
    """The ``count`` highest-scored members across ``keys`` with their scores, highest first (equal scores in
    descending id order, as one reversed range orders them)."""
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.zrevrange(key, 0, count - 1, withscores=True)
    rows = [(float(score), str(m)) for reply in await pipe.execute() for m, score in reply]
    return [(m, score) for score, m in heapq.nlargest(count, rows)]


async def everything(redis: Redis, keys: Sequence[str]) -> list[str]:
    """Every member of ``keys``."""
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.zrange(key, 0, -1)
    return [str(m) for reply in await pipe.execute() for m in reply]
