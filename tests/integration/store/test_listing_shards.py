"""Listing pages over the sharded indexes (store/listing.py, store/shards.py): a page merges each shard's
first page, so paging by keyset cursor reads every entry once, in the order one sorted set would give,
including runs of entries that share a start millisecond across shards."""

from __future__ import annotations

import random

from a2amesh.config import Settings
from a2amesh.store.keys import INDEX_SHARDS, Keys
from a2amesh.store.listing import ExecutionListing, Position
from a2amesh.store.redis import Redis


async def test_pages_read_every_entry_once_in_order_across_shards(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    rng = random.Random(7)
    # 400 executions over 40 start times: ten share each millisecond, spread over the shards by their ids
    entries = {f"e{i:04d}-{rng.randrange(10**6)}": 1_000_000 + i // 10 for i in range(400)}
    assert len({keys.shard(e) for e in entries}) == INDEX_SHARDS
    pipe = redis.pipeline(transaction=False)
    for execution_id, start in entries.items():
        shard = keys.shard(execution_id)
        pipe.zadd(keys.executions_index(shard), {execution_id: start})
        pipe.zadd(keys.executions_by_status("completed", shard), {execution_id: start})
    await pipe.execute()
    listing = ExecutionListing(redis, keys)
    expected = [e for e, _ in sorted(entries.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
    for index, value in (("all", ""), ("status", "completed")):
        read: list[str] = []
        after: Position | None = None
        while True:
            page = await listing.page(index, value, after=after, count=7)  # type: ignore[arg-type]
            if not page:
                break
            read += [p.id for p in page]
            after = page[-1]
        assert read == expected, index
    in_range = await listing.page("all", since_ms=1_000_010, until_ms=1_000_011, count=100)
    assert [p.id for p in in_range] == [e for e in expected if 1_000_010 <= entries[e] <= 1_000_011]
    assert await listing.sizes([("all", ""), ("status", "completed"), ("status", "failed")]) == [400, 400, 0]
    assert await listing.counts([("all", "")], since_ms=1_000_000, until_ms=1_000_004) == [50]
    await listing.forget("status", "completed", expected[:5])
    assert await listing.sizes([("all", ""), ("status", "completed")]) == [395, 395]
