"""The shared pipelining Redis connection (store/wire.py) on a real Valkey: replies as redis-py gives them,
callers that go away, bad arguments, database and password, and a server that dies or stops answering."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import AuthenticationError, DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from a2amesh.config import Settings
from a2amesh.errors import StoreUnavailable
from a2amesh.store.redis import AutoPipeline, MeshConnectionPool, Redis, ServerRedis, connect_redis
from a2amesh.store.wire import Endpoint, SharedConnection
from tests.support.servers import MeshServers
from tests.support.waiting import eventually, within


def endpoint_of_url(url: str, **overrides: Any) -> Endpoint:
    host_port = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, port = host_port.rsplit(":", 1)
    return Endpoint(host=host, port=int(port), **overrides)


async def test_replies_are_those_of_a_redis_py_pipeline(redis: Redis, settings: Settings) -> None:
    """The same commands through the shared connection and through redis-py: the same Python values
    (response callbacks applied: ZADD → int, EXPIRE → bool, HGETALL → dict, a Lua table → list)."""
    ns = settings.namespace
    sha = await redis.script_load("return {KEYS[1], tonumber(ARGV[1]) + 1, {'nested'}}")

    def build(suffix: str) -> Any:
        def queue(pipe: Any) -> None:
            pipe.zadd(f"{ns}:z{suffix}", {"a": 1, "b": 2})
            pipe.expire(f"{ns}:z{suffix}", 60)
            pipe.hset(f"{ns}:h{suffix}", mapping={"x": "1", "ü": "ß"})
            pipe.hgetall(f"{ns}:h{suffix}")
            pipe.hget(f"{ns}:h{suffix}", "missing")
            pipe.evalsha(sha, 1, f"k{suffix}", 41)
            pipe.zrange(f"{ns}:z{suffix}", 0, -1, withscores=True)

        return queue

    shared = await AutoPipeline(redis, shared=True).run(build("1"))
    plain = await AutoPipeline(redis, shared=False).run(build("2"))
    assert shared == [2, True, 2, {"x": "1", "ü": "ß"}, None, ["k1", 42, ["nested"]], [("a", 1.0), ("b", 2.0)]]
    assert plain == [2, True, 2, {"x": "1", "ü": "ß"}, None, ["k2", 42, ["nested"]], [("a", 1.0), ("b", 2.0)]]


async def test_a_caller_cancelled_in_flight_leaves_the_others_their_replies(redis: Redis, settings: Settings) -> None:
    """Replies are matched to callers by order: a caller that goes away after queueing its commands must
    not shift the replies of the callers after it (its commands still run: they had left)."""
    auto = AutoPipeline(redis)
    ns = settings.namespace
    await auto.run(lambda pipe: pipe.ping())  # connected

    def incr(key: str, times: int) -> Any:
        def build(pipe: Any) -> None:
            for _ in range(times):
                pipe.incr(key)

        return build

    first = asyncio.ensure_future(auto.run(incr(f"{ns}:c1", 1)))
    gone = asyncio.ensure_future(auto.run(incr(f"{ns}:c2", 3)))
    last = asyncio.ensure_future(auto.run(incr(f"{ns}:c3", 2)))
    await asyncio.sleep(0)  # all three have queued their commands
    gone.cancel()
    assert await within(first, 5, "the first caller's reply") == [1]
    assert await within(last, 5, "the last caller's reply") == [1, 2]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert await redis.get(f"{ns}:c2") == "3"


async def test_a_bad_argument_is_refused_before_anything_is_sent(redis: Redis, settings: Settings) -> None:
    """An argument Redis cannot take (None, a bool, a dict) is a DataError naming its type; none of the
    caller's commands run and the connection goes on serving."""
    auto = AutoPipeline(redis)
    key = f"{settings.namespace}:bad"

    def build(pipe: Any) -> None:
        pipe.set(key, "fine")
        pipe.execute_command("SET", key + ":2", {"a": 1})

    with pytest.raises(DataError, match="dict"):
        await auto.run(build)
    with pytest.raises(DataError, match="bool"):
        await auto.run(lambda pipe: pipe.execute_command("SET", key, True))
    assert await redis.get(key) is None
    assert await auto.run(lambda pipe: pipe.incr(key + ":n")) == [1]
    assert await within(auto.run(lambda pipe: None), 5, "a build that queues nothing") == []


async def test_the_database_of_the_url_is_used(settings: Settings) -> None:
    """A REDIS_URL naming database 3: the shared connection writes there, where redis-py reads."""
    url = settings.redis_url.get_secret_value() if settings.redis_url else ""
    base = url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    redis = await connect_redis(settings, url=f"{base}/3")
    try:
        key = f"{settings.namespace}:db3"
        assert await AutoPipeline(redis).run(lambda pipe: pipe.set(key, "here")) == [True]
        assert await redis.get(key) == "here"
        other = await connect_redis(settings, url=f"{base}/0")
        try:
            assert await other.get(key) is None
        finally:
            await other.aclose()
    finally:
        await redis.aclose()


async def test_a_password_is_sent_and_a_wrong_one_refused(fault_servers: MeshServers) -> None:
    """A server with ``requirepass``: the right password connects; a wrong one is an AuthenticationError."""
    admin = SharedConnection(endpoint_of_url(fault_servers.redis_url))
    try:
        assert await admin.execute([("CONFIG", "SET", "requirepass", "s3cret")]) == ["OK"]
    finally:
        await admin.aclose()
    wrong = SharedConnection(endpoint_of_url(fault_servers.redis_url, password="nope"))
    with pytest.raises((AuthenticationError, ResponseError), match="(?i)pass"):
        await wrong.execute([("PING",)])
    await wrong.aclose()
    right = SharedConnection(endpoint_of_url(fault_servers.redis_url, password="s3cret"))
    try:
        assert await right.execute([("PING",)]) == ["PONG"]
    finally:
        await right.aclose()


async def test_a_dead_server_fails_the_calls_and_a_restarted_one_is_reconnected(
    fault_servers: MeshServers, settings: Settings
) -> None:
    """SIGKILL of Valkey: calls fail with StoreUnavailable (redis-py's ConnectionError, mapped in the store;
    handed back and retried); once it is back the same pool's shared connection serves again."""
    assert fault_servers.valkey is not None
    redis = await connect_redis(settings, url=fault_servers.redis_url)
    try:
        auto = AutoPipeline(redis)
        assert await auto.run(lambda pipe: pipe.incr("n")) == [1]
        await fault_servers.valkey.kill()
        with pytest.raises(StoreUnavailable):
            await within(auto.run(lambda pipe: pipe.incr("n")), 10, "the call on a dead server to fail")
        await fault_servers.valkey.start()

        async def serves() -> bool:
            try:
                return await auto.run(lambda pipe: pipe.ping()) == [True]
            except StoreUnavailable:
                return False

        await eventually(serves, timeout=15, what="the shared connection to serve again")
    finally:
        await redis.aclose()


async def test_a_server_that_stops_answering_times_out(fault_servers: MeshServers) -> None:
    """SIGSTOP of Valkey: a call in flight fails with TimeoutError after the socket timeout instead of
    hanging; after SIGCONT the next call reconnects and works."""
    assert fault_servers.valkey is not None
    conn = SharedConnection(endpoint_of_url(fault_servers.redis_url, timeout=0.5))
    try:
        assert await conn.execute([("PING",)]) == ["PONG"]
        fault_servers.valkey.pause()
        try:
            with pytest.raises(RedisTimeoutError, match="did not answer in 0.5s"):
                await within(conn.execute([("PING",)]), 10, "the call to a stopped server to time out")
        finally:
            fault_servers.valkey.resume()
        assert await within(conn.execute([("PING",)]), 10, "a call after SIGCONT") == ["PONG"]
    finally:
        await conn.aclose()


async def test_closing_the_client_closes_the_shared_connection(settings: Settings) -> None:
    """``Redis.aclose()`` also closes the pool's shared connection: nothing stays open behind it."""
    redis = await connect_redis(settings)
    assert isinstance(redis, ServerRedis)
    pool = redis.connection_pool
    assert isinstance(pool, MeshConnectionPool)
    shared = pool.shared_connection()
    assert shared is not None
    assert await AutoPipeline(redis).run(lambda pipe: pipe.ping()) == [True]
    protocol = shared._protocol
    assert protocol is not None
    assert not protocol.closed
    await redis.aclose()
    assert protocol.closed
