"""Pages of executions read from the listing indexes (never a SCAN).

Every listing index is a sorted set scored by the execution's start (ms): ``execs`` (all),
``execs:wf:{workflow}``, ``execs:status:{status}`` — each partitioned in shards — and
``exec:{parent}:children`` (:mod:`a2amesh.store.keys`). A page is read newest first and continues strictly
*after* a position ``(score, id)`` in the order (score descending, then id descending, as Redis orders equal
scores in a reversed range), so executions that arrive while a client pages — all newer than where it
stands — never shift what the next page holds: nothing is read twice and nothing that existed is skipped.
Each shard gives its first ``count`` entries after the position and the page is the first ``count`` of
their merge: the order is total, so the merge is the page one sorted set would have given.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.shards import by_shard

__all__ = ["SUMMARY_FIELDS", "ExecutionListing", "IndexName", "Position"]

IndexName = Literal["all", "workflow", "status", "parent"]
"""Which listing index a page is read from."""

SUMMARY_FIELDS: tuple[str, ...] = (
    "workflow",
    "digest",
    "status",
    "input",
    "output",
    "error",
    "usage",
    "created",
    "finished",
    "reply",
    "version",
    "reused_from",
    "schedule",
)
"""The record fields a listing row is made of (read with one HMGET per execution)."""

TIES_READ = 10_000
"""At most this many executions sharing one start millisecond are read to continue after one of them."""


@dataclass(frozen=True)
class Position:
    """Where a page stopped: the last execution read and its score (start, ms) in the index."""

    score: int
    id: str


class ExecutionListing:
    """Reads pages of execution ids from the listing indexes, and the rows of those executions.

    Args:
        redis: a Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
    """

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def index_keys(self, index: IndexName, value: str = "") -> list[str]:
        """The keys of a listing index: its shards (``value``: the workflow, status or parent it is for; a
        parent's children are one sorted set)."""
        k = self.keys
        if index == "parent":
            return [k.execution_children(value)]
        if index == "workflow":
            return [k.executions_by_workflow(value, s) for s in k.shards]
        if index == "status":
            return [k.executions_by_status(value, s) for s in k.shards]
        return [k.executions_index(s) for s in k.shards]

    async def page(
        self,
        index: IndexName,
        value: str = "",
        *,
        after: Position | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        count: int = 50,
    ) -> list[Position]:
        """Up to ``count`` entries of an index, newest first, strictly after ``after``, started in
        ``[since_ms, until_ms]`` (one round trip: each shard's first ``count`` after the position, merged)."""
        keys = self.index_keys(index, value)
        low: Any = "-inf" if since_ms is None else since_ms
        high: Any = "+inf" if until_ms is None else until_ms
        ties_at: int | None = None
        if after is not None:
            if until_ms is None or after.score <= until_ms:
                high = f"({after.score}"
                ties_at = after.score if since_ms is None or after.score >= since_ms else None
            # else: the position lies above the range; the range is read from its top
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            if ties_at is not None:
                pipe.zrevrangebyscore(key, ties_at, ties_at, start=0, num=TIES_READ)
            pipe.zrevrangebyscore(key, high, low, start=0, num=count, withscores=True)
        replies = await pipe.execute()
        per_key = 2 if ties_at is not None else 1
        found: list[Position] = []
        for i in range(len(keys)):
            shard = replies[i * per_key : (i + 1) * per_key]
            if ties_at is not None and after is not None:
                # equal scores come in descending id order: those after the position have smaller ids
                found += [Position(ties_at, str(m)) for m in shard[0] if str(m) < after.id][:count]
            found += [Position(int(score), str(member)) for member, score in shard[-1]]
        return heapq.nlargest(count, found, key=lambda p: (p.score, p.id))

    async def counts(
        self, indexes: Sequence[tuple[IndexName, str]], *, since_ms: int | None = None, until_ms: int | None = None
    ) -> list[int]:
        """How many entries of each index started in ``[since_ms, until_ms]`` (ZCOUNT per shard, one round trip)."""
        low: Any = "-inf" if since_ms is None else since_ms
        high: Any = "+inf" if until_ms is None else until_ms
        return await self._summed(indexes, lambda pipe, key: pipe.zcount(key, low, high))

    async def sizes(self, indexes: Sequence[tuple[IndexName, str]]) -> list[int]:
        """How many entries each index holds (ZCARD per shard, one round trip)."""
        return await self._summed(indexes, lambda pipe, key: pipe.zcard(key))

    async def _summed(self, indexes: Sequence[tuple[IndexName, str]], queue: Any) -> list[int]:
        pipe = self.redis.pipeline(transaction=False)
        spans = []
        for index, value in indexes:
            keys = self.index_keys(index, value)
            for key in keys:
                queue(pipe, key)
            spans.append(len(keys))
        replies = [int(n) for n in await pipe.execute()]
        out, at = [], 0
        for n in spans:
            out.append(sum(replies[at : at + n]))
            at += n
        return out

    async def rows(self, ids: Sequence[str]) -> list[dict[str, str] | None]:
        """The listing fields of each execution (None where its record is gone), in one round trip."""
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for execution_id in ids:
            pipe.hmget(self.keys.execution(execution_id), SUMMARY_FIELDS)
        out: list[dict[str, str] | None] = []
        for values in await pipe.execute():
            if values is None or all(v is None for v in values):
                out.append(None)
            else:
                out.append({f: str(v) for f, v in zip(SUMMARY_FIELDS, values, strict=True) if v is not None})
        return out

    async def forget(self, index: IndexName, value: str, ids: Sequence[str]) -> None:
        """Drop entries whose records expired from the index read and from the all-executions index."""
        if not ids:
            return
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        if index == "parent":
            pipe.zrem(k.execution_children(value), *ids)
        for shard, members in by_shard(ids).items():
            if index == "workflow":
                pipe.zrem(k.executions_by_workflow(value, shard), *members)
            elif index == "status":
                pipe.zrem(k.executions_by_status(value, shard), *members)
            pipe.zrem(k.executions_index(shard), *members)
        await pipe.execute()

    async def children(self, execution_id: str, limit: int = 1000) -> list[str]:
        """The sub-workflow executions a workflow's nodes started, oldest first."""
        members = await self.redis.zrange(self.keys.execution_children(execution_id), 0, limit - 1)
        return [str(m) for m in members]
