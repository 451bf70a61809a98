"""AutoPipeline on a real Valkey: concurrent callers share pipelines, each gets its own replies and errors.

Both ways it runs: through the pool's shared connection (``connect_redis`` pools, the default) and through
redis-py pipelines (``shared=False``, what a TLS pool or a foreign client gets).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from redis.exceptions import ResponseError

from a2amesh.config import Settings
from a2amesh.store.redis import AutoPipeline, Redis


def incr_twice(key: str) -> Any:
    def build(pipe: Any) -> None:
        pipe.incr(key)
        pipe.incr(key)

    return build


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "pipelines"])
async def test_concurrent_callers_get_their_own_replies(redis: Redis, settings: Settings, shared: bool) -> None:
    """500 callers at once (at most 2 pipelines out): every caller gets exactly its two replies, in order."""
    auto = AutoPipeline(redis, max_in_flight=2, shared=shared)
    keys = [f"{settings.namespace}:auto:{i}" for i in range(500)]
    results = await asyncio.gather(*(auto.run(incr_twice(k)) for k in keys))
    assert results == [[1, 2]] * 500
    values = cast(list[str], await redis.mget(keys))  # decode_responses; every key was written
    assert [int(v) for v in values] == [2] * 500


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "pipelines"])
async def test_an_error_goes_to_its_caller_only(redis: Redis, settings: Settings, shared: bool) -> None:
    """A command that fails (INCR of a non-integer) raises in the caller that sent it; the others succeed."""
    bad = f"{settings.namespace}:auto:text"
    await redis.set(bad, "not a number")
    auto = AutoPipeline(redis, max_in_flight=1, shared=shared)
    good = [auto.run(incr_twice(f"{settings.namespace}:auto:ok{i}")) for i in range(20)]
    outcomes = await asyncio.gather(*good[:10], auto.run(incr_twice(bad)), *good[10:], return_exceptions=True)
    assert isinstance(outcomes[10], ResponseError)
    assert [o for i, o in enumerate(outcomes) if i != 10] == [[1, 2]] * 20


async def test_a_cancelled_waiter_is_left_out(redis: Redis, settings: Settings) -> None:
    """A caller cancelled while its pipeline waits never runs its commands; the batch goes on without it."""
    auto = AutoPipeline(redis, max_in_flight=1, shared=False)
    first = asyncio.ensure_future(auto.run(incr_twice(f"{settings.namespace}:auto:first")))
    await asyncio.sleep(0)  # the first pipeline is out; the next callers wait
    skipped = asyncio.ensure_future(auto.run(incr_twice(f"{settings.namespace}:auto:skipped")))
    kept = asyncio.ensure_future(auto.run(incr_twice(f"{settings.namespace}:auto:kept")))
    await asyncio.sleep(0)
    skipped.cancel()
    assert await first == [1, 2]
    assert await kept == [1, 2]
    with pytest.raises(asyncio.CancelledError):
        await skipped
    assert await redis.get(f"{settings.namespace}:auto:skipped") is None
