"""The Redis/Valkey connection of a process, with the startup checks of SPEC §7.

Nothing outside :mod:`a2amesh.store` sees redis-py's exceptions: the clients made here (:class:`ServerRedis`
for one server, :class:`~a2amesh.store.cluster.ClusterRedis` with ``A2AMESH_REDIS_CLUSTER=1``; :data:`Redis`
is either) turn their connection and timeout errors into :class:`~a2amesh.errors.StoreUnavailable`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeAlias, cast

import redis.asyncio as aioredis
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.commands.core import AsyncCoreCommands
from redis.exceptions import NoScriptError, RedisError, ResponseError

from a2amesh.config import Settings
from a2amesh.errors import StoreError, StoreUnavailable
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.outage import UNREACHABLE as _UNREACHABLE
from a2amesh.store.outage import unavailable
from a2amesh.store.wire import SharedConnection, endpoint_of

log = get_logger("store")

MAX_CONNECTIONS = 512
"""Connections of a process's pool; more concurrent commands wait for one instead of failing."""

_NOT_CALLBACK_OPTIONS = frozenset({"keys", EMPTY_RESPONSE, NEVER_DECODE})


def now_ms() -> int:
    """Wall-clock milliseconds: the unit of every score and timestamp the store writes."""
    return int(time.time() * 1000)


class Pipeline(aioredis.client.Pipeline):
    """redis-py's pipeline, raising :class:`StoreUnavailable` when Redis cannot be reached."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except _UNREACHABLE as e:
            raise unavailable(e) from e


class ServerRedis(aioredis.Redis):
    """redis-py's asyncio client, raising :class:`StoreUnavailable` when Redis cannot be reached.

    Its scripts (``register_script``) and pipelines go through the same translation; error replies
    (``ResponseError``, ``NoScriptError``) stay redis-py's, for the store modules to handle.

    Attributes:
        wait_replicas: replicas a durable write waits for (``WAIT``); 0: none.
        wait_timeout_ms: how long it waits for them.
    """

    wait_replicas: int = 0
    wait_timeout_ms: int = 5000

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        execute = cast(Callable[..., Awaitable[Any]], super().execute_command)  # untyped in redis-py
        try:
            return await execute(*args, **options)
        except _UNREACHABLE as e:
            raise unavailable(e) from e

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


Redis: TypeAlias = ServerRedis | ClusterRedis
"""A process's store client: one server's, or a cluster's."""


def _owning_client(pool: aioredis.ConnectionPool) -> ServerRedis:
    """A :class:`ServerRedis` client that owns ``pool`` (closing the client disconnects it), as ``from_pool``."""
    client = ServerRedis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


class MeshConnectionPool(aioredis.BlockingConnectionPool):
    """redis-py's blocking pool, plus one :class:`SharedConnection` to the same server for the hot path."""

    _shared: SharedConnection | None = None
    _shared_checked = False

    def shared_connection(self) -> SharedConnection | None:
        """The pool's shared pipelining connection (made on first use), or None where the pool's settings
        need redis-py's own connections (TLS)."""
        if not self._shared_checked:
            self._shared_checked = True
            endpoint = endpoint_of(self.connection_class, self.connection_kwargs)
            self._shared = SharedConnection(endpoint) if endpoint is not None else None
        return self._shared

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if self._shared is not None:
            await self._shared.aclose()


async def connect_redis(settings: Settings, *, url: str | None = None, check: bool = True) -> Redis:
    """Connect to Redis/Valkey (a cluster with ``settings.redis_cluster``, ``dsn`` naming any of its nodes)
    and check it is usable for execution state.

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
    if settings.redis_user:
        kwargs["username"] = settings.redis_user
    if settings.redis_password:
        kwargs["password"] = settings.redis_password.get_secret_value()
    client: Redis
    try:
        if settings.redis_cluster:
            # one pool per node, grown on demand; slot map, redirects and failover are redis-py's
            kwargs.pop("retry_on_timeout")
            client = ClusterRedis.connect(dsn, **kwargs)
        else:
            # A blocking pool: past MAX_CONNECTIONS commands wait for a free connection instead of failing
            # with redis-py's MaxConnectionsError (its default pool holds 100). The wait has no limit: a
            # busy pool is load, not an outage (a Redis that stops answering fails the commands holding
            # connections at the socket timeout, which frees them).
            pool = MeshConnectionPool.from_url(dsn, max_connections=MAX_CONNECTIONS, timeout=None, **kwargs)
            client = _owning_client(pool)
    except (ValueError, RedisError) as e:
        raise StoreError(f"REDIS_URL is not a redis:// or rediss:// URL: {e}") from e
    client.wait_replicas = settings.redis_wait_replicas
    client.wait_timeout_ms = settings.redis_wait_timeout_ms
    if check:
        try:
            await client.ping()
            policy = await _maxmemory_policy(client)
        except StoreUnavailable as e:
            await client.aclose()
            raise StoreUnavailable(f"cannot reach Redis at {_redact(dsn)}: {e}") from e
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
    if isinstance(value, dict):  # a cluster's nodes each answer: the first one that does not say noeviction
        return next((str(v) for v in value.values() if v != "noeviction"), "noeviction")
    return str(value) if value is not None else None


def dedicated_client(redis: Redis, connections: int = 2) -> Redis:
    """A client with its own small pool to the same server, for commands that must never wait behind bulk
    work in the main pool (lease and claim renewals under a burst of 10,000 commits). Close it with
    ``aclose()``; it connects on first use (a cluster client: a client of its own, its own pool per node)."""
    if isinstance(redis, ClusterRedis):
        return redis.twin()
    pool = redis.connection_pool
    own = MeshConnectionPool(
        connection_class=pool.connection_class, max_connections=connections, timeout=None, **pool.connection_kwargs
    )
    client = _owning_client(own)
    client.wait_replicas, client.wait_timeout_ms = redis.wait_replicas, redis.wait_timeout_ms
    return client


def _redact(dsn: str) -> str:
    if "@" in dsn:
        scheme, rest = dsn.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return dsn


_INCLUDE = "--#include "


def load_script(name: str) -> str:
    """The source of a Lua script shipped in ``a2amesh/store/lua``, each ``--#include NAME`` line replaced by
    the source of ``NAME.lua`` (code that two scripts share, such as a task record's write)."""
    source = resources.files("a2amesh.store").joinpath("lua", f"{name}.lua").read_text()
    lines = [
        load_script(line[len(_INCLUDE) :].strip()) if line.startswith(_INCLUDE) else line
        for line in source.splitlines()
    ]
    return "\n".join(lines)


class _Recorder(AsyncCoreCommands):
    """Takes the commands a build function queues, as a redis-py pipeline would, without running them."""

    _event_dispatcher: Any = None

    def __init__(self) -> None:
        self.commands: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def execute_command(self, *args: Any, **options: Any) -> _Recorder:
        self.commands.append((args, options))
        return self


class AutoPipeline:
    """Sends the pipelines of concurrent callers together: one write and one read for many of them.

    On a pool of :func:`connect_redis` the commands go through the pool's :class:`SharedConnection`: each
    caller's commands are appended to the one connection's output, everything queued in an event-loop
    turn leaves in one write, and replies come back in order, parsed once by hiredis. On another pool
    (TLS, or a client made elsewhere) redis-py pipelines are used: a caller runs its pipeline at once
    while fewer than ``max_in_flight`` are out; past that it waits, and everything that waited goes as
    one pipeline when one comes back. Either way each caller's commands stay together and in order, and
    it gets only its own replies (the first error among them is raised to it alone). On a cluster client,
    each caller's commands go as one pipeline per node (:meth:`ClusterRedis.run_commands`).

    ``durable`` runs (the task and execution scripts whose writes an ack depends on) end with
    ``WAIT wait_replicas wait_timeout_ms`` on the same connection when the client asks for replicas, and
    raise :class:`StoreUnavailable` when fewer acknowledged the write (docs/scaling.md).
    """

    def __init__(self, redis: Redis, max_in_flight: int = 4, *, shared: bool = True) -> None:
        self._r = redis
        self._max = max_in_flight
        self._in_flight = 0
        self._waiting: list[tuple[Callable[[Any], None], asyncio.Future[list[Any]]]] = []
        self._batches = Background()
        self._shared: SharedConnection | None = None
        self._cluster = redis if isinstance(redis, ClusterRedis) else None  # decided once: the check is slow
        if not isinstance(redis, ClusterRedis):
            pool = redis.connection_pool
            self._shared = pool.shared_connection() if shared and isinstance(pool, MeshConnectionPool) else None

    async def run(self, build: Callable[[Any], None], *, durable: bool = False) -> list[Any]:
        """Execute the commands ``build(pipe)`` queues; their replies, in order."""
        wait = self._r.wait_replicas if durable else 0
        if self._cluster is not None:
            recorder = _Recorder()
            build(recorder)
            return _first_error_raised(await self._cluster.run_commands(recorder.commands, durable=durable))
        if wait:
            build = _waiting(build, wait, self._r.wait_timeout_ms)
        replies = await self._run(build)
        if wait:
            _check_wait(replies.pop(), wait, self._r.wait_timeout_ms)
        return replies

    @property
    def _server(self) -> ServerRedis:
        return cast(ServerRedis, self._r)  # a cluster client never reaches redis-py's pipelines here

    async def _run(self, build: Callable[[Any], None]) -> list[Any]:
        if self._shared is not None:
            recorder = _Recorder()
            build(recorder)
            commands = recorder.commands
            if not any(NEVER_DECODE in options for _, options in commands):
                try:
                    raw = await self._shared.execute([args for args, _ in commands])
                except _UNREACHABLE as e:
                    raise unavailable(e) from e
                return self._replies(commands, raw)
            build = _replay(commands)  # a command whose reply must stay bytes: redis-py's own pipeline
        if self._in_flight < self._max and not self._waiting:
            self._in_flight += 1
            try:
                pipe = self._server.pipeline(transaction=False)
                build(pipe)
                return list(await pipe.execute())
            finally:
                self._in_flight -= 1
                self._next_batch()
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append((build, future))
        return await future

    def _replies(self, commands: list[tuple[tuple[Any, ...], dict[str, Any]]], raw: list[Any]) -> list[Any]:
        """``raw`` replies as redis-py's pipeline would return them (its response callbacks applied)."""
        callbacks = self._r.response_callbacks
        out: list[Any] = []
        for (args, options), reply in zip(commands, raw, strict=True):
            if isinstance(reply, Exception):
                if EMPTY_RESPONSE not in options:
                    raise reply
                reply = options[EMPTY_RESPONSE]
            else:
                callback = callbacks.get(args[0])
                if callback is not None:
                    reply = callback(reply, **{k: v for k, v in options.items() if k not in _NOT_CALLBACK_OPTIONS})
            out.append(reply)
        return out

    def _next_batch(self) -> None:
        if not self._waiting or self._in_flight >= self._max:
            return
        batch, self._waiting = self._waiting, []
        self._in_flight += 1
        self._batches.spawn(self._send(batch)).add_done_callback(self._batch_done)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight -= 1
        self._next_batch()

    async def _send(self, batch: list[tuple[Callable[[Any], None], asyncio.Future[list[Any]]]]) -> None:
        pipe = self._server.pipeline(transaction=False)
        spans: list[tuple[asyncio.Future[list[Any]], int, int]] = []
        for build, future in batch:
            if future.done():  # its caller was cancelled while waiting
                continue
            start = len(pipe.command_stack)
            try:
                build(pipe)
            except Exception as e:
                del pipe.command_stack[start:]
                future.set_exception(e)
                continue
            spans.append((future, start, len(pipe.command_stack)))
        if not spans:
            return
        try:
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as e:
            for future, _, _ in spans:
                if not future.done():
                    future.set_exception(e if isinstance(e, Exception) else ConnectionError("cancelled"))
            if not isinstance(e, Exception):
                raise
            return
        for future, start, end in spans:
            if future.done():
                continue
            own = list(replies[start:end])
            error = next((r for r in own if isinstance(r, Exception)), None)
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(own)


_AUTO_PIPELINES: weakref.WeakKeyDictionary[Redis, AutoPipeline] = weakref.WeakKeyDictionary()


def _replay(commands: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Callable[[Any], None]:
    def build(pipe: Any) -> None:
        for args, options in commands:
            pipe.execute_command(*args, **options)

    return build


def _waiting(build: Callable[[Any], None], replicas: int, timeout_ms: int) -> Callable[[Any], None]:
    def with_wait(pipe: Any) -> None:
        build(pipe)
        pipe.execute_command("WAIT", replicas, timeout_ms)

    return with_wait


def _check_wait(reply: Any, wanted: int, timeout_ms: int) -> None:
    if int(reply) < wanted:
        raise StoreUnavailable(
            f"a write reached {int(reply)} of the {wanted} replica(s) it waits for in {timeout_ms} ms"
        )


def _first_error_raised(replies: list[Any]) -> list[Any]:
    error = next((r for r in replies if isinstance(r, Exception)), None)
    if error is not None:
        raise error
    return replies


def auto_pipeline(redis: Redis) -> AutoPipeline:
    """The :class:`AutoPipeline` shared by everything of this process that uses ``redis``."""
    found = _AUTO_PIPELINES.get(redis)
    if found is None:
        found = _AUTO_PIPELINES[redis] = AutoPipeline(redis)
    return found


class Scripts:
    """Lua scripts called by SHA inside pipelines, loaded once and reloaded if Redis lost them.

    redis-py's registered scripts send ``SCRIPT EXISTS`` before every pipeline that holds one; this
    keeps each pipeline to a single round trip. ``durable``: their writes are ones an ack depends on
    (:class:`AutoPipeline`, ``WAIT``).
    """

    def __init__(self, redis: Redis, *names: str, durable: bool = False) -> None:
        import hashlib

        self._r = redis
        self._durable = durable
        self._source = {n: load_script(n) for n in names}
        self.sha = {n: hashlib.sha1(src.encode()).hexdigest() for n, src in self._source.items()}
        self._loaded = False

    def queue(self, pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Add a call of script ``name`` to ``pipe``."""
        pipe.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)  # what evalsha() sends

    async def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name`` alone; its reply."""
        return (await self.run(lambda pipe: self.queue(pipe, name, keys, args)))[0]

    async def run(self, build: Any) -> list[Any]:
        """Build a fresh pipeline with ``build(pipe)`` and execute it, loading the scripts when needed."""
        for attempt in range(2):
            if not self._loaded:
                for src in self._source.values():
                    await self._r.script_load(src)
                self._loaded = True
            try:
                return await auto_pipeline(self._r).run(build, durable=self._durable)
            except NoScriptError:
                if attempt:
                    raise
                self._loaded = False
        raise AssertionError("unreachable")
