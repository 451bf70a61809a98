"""Handlers of the agents that process tests run as separate OS processes.

They record what happened in the test's Redis (REDIS_URL, or A2AMESH_TEST_RECORDS_URL when set; keys under
the test namespace) so the test can count side effects started and completed per messageId or task.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

_redis: aioredis.Redis | None = None


def _r() -> aioredis.Redis:
    global _redis
    if _redis is None:
        # no socket timeout, retried reconnects: bookkeeping waits out a paused or restarting Valkey (chaos)
        # instead of failing the task. redis-py re-sends a command whose reply was lost, even when the server
        # ran it (a restart that closes the connection after the command, before the reply), so a record
        # that must count runs carries a value unique to the run (see side_effect)
        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_timeout": None,
            "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), 40),
        }
        # a chaos test that kills store nodes keeps these records on a server of their own (an observer the
        # fault does not touch)
        records = os.environ.get("A2AMESH_TEST_RECORDS_URL")
        if not records and os.environ.get("A2AMESH_REDIS_CLUSTER") == "1":  # its client follows failovers
            _redis = cast(aioredis.Redis, RedisCluster.from_url(os.environ["REDIS_URL"], **options))
        else:
            url = records or os.environ["REDIS_URL"]
            _redis = aioredis.from_url(url, retry_on_error=[RedisConnectionError], **options)
    return _redis


def _key(*parts: str) -> str:
    return ":".join([os.environ["A2AMESH_NAMESPACE"], "test", *parts])


async def count(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Count one completion per messageId and remember which process did it."""
    await asyncio.sleep(float(input.get("sleep", 0.02)))
    r = _r()
    n = await r.hincrby(_key("done"), ctx.message.message_id, 1)
    await r.hincrby(_key("by_pid"), str(os.getpid()), 1)
    return {"n": n, "pid": os.getpid()}


async def slow_first(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Announce the start (with our pid), then take long on the first attempt only."""
    r = _r()
    await r.rpush(_key("started"), f"{os.getpid()}:{ctx.attempt}")
    if ctx.attempt == 1:
        await asyncio.sleep(60)
    await r.hincrby(_key("done"), ctx.task_id, 1)
    return {"attempt": ctx.attempt, "pid": os.getpid()}


async def crash(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Kill the whole process every time (a poison message)."""
    await _r().rpush(_key("started"), f"{os.getpid()}:{ctx.attempt}")
    os._exit(3)


async def sleepy(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Sleep for input.seconds, then answer (for graceful-shutdown tests)."""
    await _r().rpush(_key("started"), str(os.getpid()))
    await asyncio.sleep(float(input.get("seconds", 1)))
    await _r().hincrby(_key("done"), ctx.task_id, 1)
    return {"slept": input.get("seconds", 1)}


async def side_effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Count a side effect started and, after some work, completed — both keyed by task id.

    Each completion is pushed as ``pid:run`` with ``run`` unique to this call of the handler, so a push
    redis-py re-sent across a Valkey restart shows as a repeated value, not as a second completion.
    The completion is an effect outside the mesh: the handler makes sure it still holds the task right
    before it (``ctx.fence()``), so a replica paused past its claim and taken over does not complete it too.
    """
    r = _r()
    await r.hincrby(_key("started"), ctx.task_id, 1)
    await asyncio.sleep(float(input.get("seconds", 0.5)))
    await ctx.fence()
    await r.rpush(_key("completed", ctx.task_id), f"{os.getpid()}:{uuid.uuid4().hex}")
    return {"task": ctx.task_id, "pid": os.getpid()}


async def paid_effect(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Charge a payment on the test's HTTP service (A2AMESH_TEST_EFFECTS_URL) with this invocation's
    idempotency key, then take ``seconds_after`` more: a replica paused then is past its outside effect."""
    import httpx

    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            os.environ["A2AMESH_TEST_EFFECTS_URL"],
            json={"amount": input.get("amount", 1), "pid": os.getpid()},
            headers={"Idempotency-Key": ctx.idempotency_key},
        )
        answer.raise_for_status()
    await asyncio.sleep(float(input.get("seconds_after", 1.0)))
    return {"payment": answer.json()["payment"], "pid": os.getpid()}
