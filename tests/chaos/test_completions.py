"""The chaos suite's side-effect count: one entry per run of the handler, whatever redis-py re-sent."""

from __future__ import annotations

from a2amesh.store.redis import Redis
from tests.chaos.conftest import completions


async def test_a_resent_push_counts_once_and_a_second_run_counts_twice(redis: Redis, namespace: str) -> None:
    key = f"{namespace}:test:completed:task-1"
    # run a of pid 101 pushed twice (its reply lost in a restart), then run b of pid 202
    await redis.rpush(key, "101:a", "101:a", "202:b")
    assert await completions(redis, namespace, "task-1") == ["101", "202"]
    assert await completions(redis, namespace, "task-2") == []
