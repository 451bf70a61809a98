"""The Redis/Valkey connection of a process, with the startup checks of SPEC §7."""

from __future__ import annotations

from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from a2amesh.config import Settings
from a2amesh.errors import StoreError
from a2amesh.logs import get_logger

log = get_logger("store")

Redis = aioredis.Redis

MAX_CONNECTIONS = 512
"""Connections of a process's pool; more concurrent commands wait for one instead of failing."""

UNAVAILABLE: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
"""Errors meaning Redis/Valkey cannot be reached for now (restart, pause, network, AOF loading):
the work is handed back and retried later, never failed."""


async def connect_redis(settings: Settings, *, url: str | None = None, check: bool = True) -> Redis:
    """Connect to Redis/Valkey and check it is usable for execution state.

    Raises:
        StoreError: unreachable, or ``maxmemory-policy`` is not ``noeviction``.
    """
    dsn = url or (settings.redis_url.get_secret_value() if settings.redis_url else "redis://127.0.0.1:6379/0")
    kwargs: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": 5,
        "socket_timeout": 10,
        "health_check_interval": 15,
        "retry_on_timeout": True,
    }
    if settings.redis_password:
        kwargs["password"] = settings.redis_password.get_secret_value()
    try:
        # A blocking pool: past MAX_CONNECTIONS commands wait for a free connection instead of failing
        # with redis-py's MaxConnectionsError (its default pool holds 100). The wait has no limit: a
        # busy pool is load, not an outage (a Redis that stops answering fails the commands holding
        # connections at the socket timeout, which frees them).
        pool = aioredis.BlockingConnectionPool.from_url(dsn, max_connections=MAX_CONNECTIONS, timeout=None, **kwargs)
        client: Redis = aioredis.Redis.from_pool(pool)
    except ValueError as e:
        raise StoreError(f"REDIS_URL is not a redis:// or rediss:// URL: {e}") from e
    if check:
        try:
            await client.ping()
            policy = await _maxmemory_policy(client)
        except RedisError as e:
            await client.aclose()
            raise StoreError(f"cannot reach Redis at {_redact(dsn)}: {e}") from e
        if policy is not None and policy != "noeviction":
            await client.aclose()
            raise StoreError(
                f"Redis at {_redact(dsn)} has maxmemory-policy {policy}; a2amesh needs noeviction "
                "(evicted keys would lose execution state): CONFIG SET maxmemory-policy noeviction"
            )
    return client


async def _maxmemory_policy(client: Redis) -> str | None:
    try:
        cfg = await client.config_get("maxmemory-policy")
    except ResponseError:
        return None  # CONFIG disabled (managed Redis): cannot check, trust the operator
    value = cfg.get("maxmemory-policy")
    return str(value) if value is not None else None


def dedicated_client(redis: Redis, connections: int = 2) -> Redis:
    """A client with its own small pool to the same server, for commands that must never wait behind bulk
    work in the main pool (lease and claim renewals under a burst of 10,000 commits). Close it with
    ``aclose()``; it connects on first use."""
    pool = redis.connection_pool
    own = aioredis.BlockingConnectionPool(
        connection_class=pool.connection_class, max_connections=connections, timeout=None, **pool.connection_kwargs
    )
    return aioredis.Redis.from_pool(own)


def _redact(dsn: str) -> str:
    if "@" in dsn:
        scheme, rest = dsn.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return dsn


def load_script(name: str) -> str:
    """The source of a Lua script shipped in ``a2amesh/store/lua``."""
    return resources.files("a2amesh.store").joinpath("lua", f"{name}.lua").read_text()


class Scripts:
    """Lua scripts called by SHA inside pipelines, loaded once and reloaded if Redis lost them.

    redis-py's registered scripts send ``SCRIPT EXISTS`` before every pipeline that holds one; this
    keeps each pipeline to a single round trip.
    """

    def __init__(self, redis: Redis, *names: str) -> None:
        import hashlib

        self._r = redis
        self._source = {n: load_script(n) for n in names}
        self.sha = {n: hashlib.sha1(src.encode()).hexdigest() for n, src in self._source.items()}
        self._loaded = False

    def queue(self, pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Add a call of script ``name`` to ``pipe``."""
        pipe.evalsha(self.sha[name], len(keys), *keys, *args)

    async def run(self, build: Any) -> list[Any]:
        """Build a fresh pipeline with ``build(pipe)`` and execute it, loading the scripts when needed."""
        from redis.exceptions import NoScriptError

        for attempt in range(2):
            if not self._loaded:
                for src in self._source.values():
                    await self._r.script_load(src)
                self._loaded = True
            pipe = self._r.pipeline(transaction=False)
            build(pipe)
            try:
                return list(await pipe.execute())
            except NoScriptError:
                if attempt:
                    raise
                self._loaded = False
        raise AssertionError("unreachable")
