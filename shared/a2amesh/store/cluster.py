"""The Redis/Valkey Cluster client (``A2AMESH_REDIS_CLUSTER=1``) and the forming of a loopback cluster.

:class:`ClusterRedis` is redis-py's ``redis.asyncio.RedisCluster``: it keeps the slot map, one connection
pool per node, follows ``MOVED`` / ``ASK`` and re-reads the map after a failover. Two things are added:

- redis-py's connection and cluster-down errors become :class:`~a2amesh.errors.StoreUnavailable`, as on
  the single-server client (the work is handed back and retried later);
- :meth:`ClusterRedis.run_commands`, the hot path's pipelines (claims, task writes, step commits): the
  commands of one caller are grouped by the node owning their slot (redis-py's slot map) and each group
  is appended to that node's :class:`~a2amesh.store.wire.SharedConnection`, as on one server: the groups
  of every concurrent caller leave in one write per node and event-loop turn. A ``WAIT`` appended to a
  durable pipeline's group that writes covers exactly the writes before it on that connection (redis-py's
  cluster pipeline may re-send a redirected command on another connection, after which a ``WAIT`` proves
  nothing). Redirected commands and a node that cannot be reached are retried after the slot map is read
  again, until :data:`RETRY_FOR` has passed.

Every key a multi-key command or script touches shares one hash tag (:mod:`a2amesh.store.keys`), so each
runs in one slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, PipelineCommand, RedisCluster
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import AskError, ClusterDownError, MovedError, RedisClusterException, RedisError, TryAgainError
from redis.utils import DEFAULT_RESP_VERSION

from a2amesh.errors import ServerError, StoreUnavailable
from a2amesh.store.outage import CLUSTER_UNREACHABLE, unavailable
from a2amesh.store.wire import Endpoint, SharedConnection

__all__ = ["ClusterPipe", "ClusterRedis", "await_cluster", "form_cluster"]

RETRY_FOR = 3.0
"""Seconds a pipeline keeps retrying redirected commands and unreachable nodes (a failover takes about the
cluster's node timeout plus an election) before it raises :class:`StoreUnavailable`."""

_RETRY_PAUSE = 0.1
_REDIRECTED: tuple[type[Exception], ...] = (MovedError, AskError, TryAgainError, ClusterDownError)
_RETRIED: tuple[type[Exception], ...] = (*_REDIRECTED, *CLUSTER_UNREACHABLE)
_NOT_CALLBACK_OPTIONS = frozenset({"keys", EMPTY_RESPONSE, NEVER_DECODE})
_SCRIPT_COMMANDS = frozenset({"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL"})
_READ_COMMANDS = frozenset(
    {"GET", "MGET", "HGET", "HMGET", "HGETALL", "HEXISTS", "EXISTS", "PTTL", "TTL", "SMEMBERS", "SISMEMBER", "SCARD"}
    | {"ZSCORE", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "LRANGE", "LLEN", "XRANGE", "XREVRANGE"}
    | {"EVALSHA_RO", "EVAL_RO"}
)
"""Commands that write nothing: a durable pipeline's group of only these needs no ``WAIT``."""

Recorded = tuple[tuple[Any, ...], dict[str, Any]]
"""One queued command: its arguments and redis-py's options (response callback options, ``EMPTY_RESPONSE``)."""


class ClusterPipe(ClusterPipeline):
    """redis-py's cluster pipeline, raising :class:`StoreUnavailable` when the cluster cannot be reached."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except CLUSTER_UNREACHABLE as e:
            raise unavailable(e) from e


class ClusterRedis(RedisCluster):
    """redis-py's asyncio cluster client, raising :class:`StoreUnavailable` when the cluster cannot be reached.

    Attributes:
        wait_replicas: replicas a durable write waits for (``WAIT``); 0: none.
        wait_timeout_ms: how long it waits for them.
    """

    wait_replicas: int = 0
    wait_timeout_ms: int = 5000
    _dsn: str = ""
    _options: dict[str, Any]
    _shared: dict[str, SharedConnection]

    @classmethod
    def connect(cls, dsn: str, **options: Any) -> ClusterRedis:
        """A client for the cluster that ``dsn`` names a node of (it connects on first use)."""
        client = cast(ClusterRedis, cls.from_url(dsn, **options))
        client._dsn = dsn
        client._options = dict(options)
        client._shared = {}
        return client

    def twin(self) -> ClusterRedis:
        """A client of its own to the same cluster (its own connections), with the same settings."""
        twin = ClusterRedis.connect(self._dsn, **self._options)
        twin.wait_replicas = self.wait_replicas
        twin.wait_timeout_ms = self.wait_timeout_ms
        return twin

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        execute = cast(Callable[..., Awaitable[Any]], super().execute_command)  # untyped in redis-py
        try:
            return await execute(*args, **kwargs)
        except CLUSTER_UNREACHABLE as e:
            raise unavailable(e) from e
        except (RuntimeError, RedisClusterException) as e:
            if not _closed_transport(e) and not _no_node(e):
                raise
            raise unavailable(e) from e

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipe:
        if shard_hint:
            raise ValueError("a cluster pipeline takes no shard hint")
        return ClusterPipe(self, transaction)  # type: ignore[abstract]  # as redis-py's own pipeline()

    async def run_commands(self, commands: Sequence[Recorded], *, durable: bool = False) -> list[Any]:
        """Run ``commands`` as one pipeline per node; their replies in order (error replies as exceptions).

        ``durable``: each node's group that writes ends with ``WAIT wait_replicas wait_timeout_ms``;
        fewer replicas than asked for raises :class:`StoreUnavailable` (the write happened on the primary
        but may not survive its loss: the caller hands its work back, and the scripts are safe to repeat).

        Raises:
            StoreUnavailable: a node stayed unreachable, or a slot stayed redirected, for :data:`RETRY_FOR`
                seconds; or the replicas did not acknowledge a durable write in time.
        """
        replies: list[Any] = [None] * len(commands)
        pending = list(range(len(commands)))
        wait = self.wait_replicas if durable else 0
        deadline = time.monotonic() + RETRY_FOR
        attempt = 0
        while True:
            retry, last = await self._attempt(commands, pending, replies, wait)
            if not retry:
                return replies
            attempt += 1
            if time.monotonic() >= deadline:
                raise unavailable(last or StoreUnavailable("the cluster did not answer"))
            await asyncio.sleep(_RETRY_PAUSE * min(attempt, 5))
            pending = sorted(retry)
            try:
                await self.nodes_manager.initialize()  # the slot map after a failover or a MOVED
            except (RedisError, RedisClusterException, OSError):  # none reachable: the next attempt reads again
                pass

    async def _attempt(
        self, commands: Sequence[Recorded], pending: list[int], replies: list[Any], wait: int
    ) -> tuple[list[int], Exception | None]:
        """Send the ``pending`` commands, one batch per node; fill ``replies`` with those answered. Returns the
        commands to send again (after the slot map is read again) and the error that made them so."""
        try:
            if self._initialize:
                await self.initialize()
            groups = self._by_node(commands, pending)
        except CLUSTER_UNREACHABLE as e:
            return pending, e
        except RedisClusterException as e:
            if not _no_node(e):
                raise
            return pending, e
        batches: list[tuple[ClusterNode, list[PipelineCommand]]] = []
        for node, positions in groups.values():
            batch = [PipelineCommand(i, *commands[i][0], **commands[i][1]) for i in positions]
            # every group that writes, not only the scripts': an index entry a takeover depends on (an
            # execution's lease entry, written beside its create) acknowledged by a primary that then loses
            # its slot (paused past a failover, its queued writes run before it learns it was replaced) is lost
            if wait and any(str(commands[i][0][0]).upper() not in _READ_COMMANDS for i in positions):
                batch.append(PipelineCommand(-1, "WAIT", wait, self.wait_timeout_ms))
            batches.append((node, batch))
        outcomes = await asyncio.gather(*(self._send(node, b) for node, b in batches), return_exceptions=True)
        retry: list[int] = []
        last: Exception | None = None
        for (node, batch), outcome in zip(batches, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, CLUSTER_UNREACHABLE) and not _closed_transport(outcome):
                    raise outcome
                last = cast(Exception, outcome)
            else:
                again = [c for c in batch if c.position >= 0 and isinstance(c.result, _RETRIED)]
                if not again:
                    for c in batch:
                        if c.position < 0:
                            _check_wait(c.result, wait, self.wait_timeout_ms, node)
                        else:
                            replies[c.position] = c.result
                    continue
                last = again[0].result  # redirected, or the connection died mid-batch
            retry += [c.position for c in batch if c.position >= 0]  # the batch goes again (safe to repeat)
            _reconnect(node)
        return retry, last

    async def _send(self, node: ClusterNode, batch: list[PipelineCommand]) -> None:
        """Send ``batch`` on the node's shared pipelining connection (each reply into its command's
        ``result``, redis-py's response callbacks applied), as the single-server client's hot path does."""
        shared = self._shared.get(node.name)
        if shared is None:
            kw = node.connection_kwargs
            shared = self._shared[node.name] = SharedConnection(
                Endpoint(
                    host=node.host,
                    port=int(node.port),
                    username=kw.get("username"),
                    password=kw.get("password"),
                    connect_timeout=kw.get("socket_connect_timeout"),
                    timeout=kw.get("socket_timeout"),
                    encoding=kw.get("encoding", "utf-8") if kw.get("decode_responses") else None,
                    protocol=int(kw.get("protocol") or DEFAULT_RESP_VERSION),
                )
            )
        raw = await shared.execute([c.args for c in batch])
        callbacks = self.response_callbacks
        for c, reply in zip(batch, raw, strict=True):
            if isinstance(reply, Exception):
                c.result = c.kwargs[EMPTY_RESPONSE] if EMPTY_RESPONSE in c.kwargs else reply
                continue
            callback = callbacks.get(c.args[0])
            options = {k: v for k, v in c.kwargs.items() if k not in _NOT_CALLBACK_OPTIONS}
            c.result = reply if callback is None else callback(reply, **options)

    async def aclose(self) -> None:
        shared, self._shared = self._shared, {}
        for connection in shared.values():
            await connection.aclose()
        await super().aclose()

    def _by_node(self, commands: Sequence[Recorded], positions: list[int]) -> dict[str, tuple[ClusterNode, list[int]]]:
        groups: dict[str, tuple[ClusterNode, list[int]]] = {}
        for i in positions:
            node = self.nodes_manager.get_node_from_slot(self.keyslot(_key_of(commands[i][0])))
            groups.setdefault(node.name, (node, []))[1].append(i)
        return groups


def _reconnect(node: ClusterNode) -> None:
    """Have every connection to ``node`` reconnect on its next use (those of a node that was killed and
    restarted on the same port are dead; disconnecting them here would pull one from under a user)."""
    node.update_active_connections_for_reconnect()
    for connection in tuple(node._free):  # redis-py marks only the ones in use
        connection.mark_for_reconnect()  # type: ignore[no-untyped-call]


def _no_node(e: BaseException) -> bool:
    """redis-py could reach no node of the cluster to read the slot map from."""
    return isinstance(e, RedisClusterException) and "cannot be connected" in str(e)


def _closed_transport(e: BaseException) -> bool:
    """uvloop refuses a write on a connection the server closed (a killed node's) with a RuntimeError."""
    return (isinstance(e, RuntimeError) and "closed" in str(e)) or (
        isinstance(e, AttributeError) and "writelines" in str(e)  # redis-py's connection closed meanwhile
    )


def _key_of(args: tuple[Any, ...]) -> Any:
    """The key that routes a command (a script's first key)."""
    if str(args[0]).upper() in _SCRIPT_COMMANDS:
        if int(args[2]) < 1:
            raise ValueError(f"{args[0]} without keys cannot be routed on a cluster")
        return args[3]
    return args[1]


def _check_wait(reply: Any, wanted: int, timeout_ms: int, node: ClusterNode) -> None:
    if isinstance(reply, Exception):
        raise unavailable(reply)
    if int(reply) < wanted:
        raise StoreUnavailable(
            f"a write on {node.name} reached {int(reply)} of the {wanted} replica(s) it waits for in {timeout_ms} ms"
        )


# --- forming a cluster (a2amesh up --cluster, tests) ---------------------------------------------------

SLOTS = 16384


def form_cluster(
    ports: Sequence[int],
    bus_port: int,
    *,
    replicas: int = 1,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
) -> None:
    """Make a cluster of the fresh cluster-enabled servers on ``127.0.0.1:ports`` (the first one's cluster
    bus on ``bus_port``; the others meet it there): the first
    ``len(ports) // (replicas + 1)`` are primaries sharing the slots evenly, each of the others replicates
    one of them; returns once every node reports ``cluster_state:ok`` and every replica is in sync.
    ``auth``: the (user, password) of an administrator of servers started with an ACL file.

    Raises:
        ServerError: the cluster did not come together within ``timeout`` seconds.
    """
    count = len(ports) // (replicas + 1)
    if count < 1 or count * (replicas + 1) != len(ports):
        raise ServerError(f"{len(ports)} servers do not make primaries with {replicas} replica(s) each")
    clients = _clients(ports, auth)
    try:
        ids = [str(c.call("CLUSTER", "MYID")) for c in clients]
        for i in range(count):
            low, high = SLOTS * i // count, SLOTS * (i + 1) // count - 1
            clients[i].call("CLUSTER", "ADDSLOTSRANGE", low, high)
        for c in clients[1:]:
            c.call("CLUSTER", "MEET", "127.0.0.1", ports[0], bus_port)
        deadline = time.monotonic() + timeout
        _until(lambda: all(_known(c) >= len(ports) for c in clients), deadline, "every node to know the others")
        for j, c in enumerate(clients[count:]):
            c.call("CLUSTER", "REPLICATE", ids[j % count])
        _until(lambda: all(_state_ok(c) for c in clients), deadline, "cluster_state:ok on every node")
        _until(lambda: all(_in_sync(c) for c in clients[count:]), deadline, "every replica to sync")
        replicas_total = len(ports) - count
        _until(
            lambda: all(_roles(c) == (count, replicas_total) for c in clients),
            deadline,
            "every node to know every replica",
        )
    finally:
        for c in clients:
            c.close()


def await_cluster(ports: Sequence[int], *, timeout: float = 30.0, auth: tuple[str, str] | None = None) -> None:
    """Wait until every restarted node of a formed cluster on ``127.0.0.1:ports`` reports ``cluster_state:ok``.

    Raises:
        ServerError: not within ``timeout`` seconds.
    """
    clients = _clients(ports, auth)
    try:
        _until(lambda: all(_state_ok(c) for c in clients), time.monotonic() + timeout, "cluster_state:ok again")
    finally:
        for c in clients:
            c.close()


def _clients(ports: Sequence[int], auth: tuple[str, str] | None) -> list[_Sync]:
    user, password = auth if auth is not None else (None, None)
    return [
        _Sync(host="127.0.0.1", port=p, username=user, password=password, decode_responses=True, socket_timeout=5)
        for p in ports
    ]


class _Sync(redis.Redis):
    def call(self, *args: Any) -> Any:
        return self.execute_command(*args)  # type: ignore[no-untyped-call]


def _known(client: _Sync) -> int:
    return len(str(client.call("CLUSTER", "NODES")).strip().splitlines())


def _roles(client: _Sync) -> tuple[int, int]:
    """(primaries, replicas) as ``client``'s node sees the cluster."""
    flags = [line.split()[2].split(",") for line in str(client.call("CLUSTER", "NODES")).strip().splitlines()]
    return sum("master" in f for f in flags), sum("slave" in f for f in flags)


def _state_ok(client: _Sync) -> bool:
    return "cluster_state:ok" in str(client.call("CLUSTER", "INFO"))


def _in_sync(client: _Sync) -> bool:
    info = client.info("replication")
    return info.get("master_link_status") == "up"


def _until(check: Callable[[], bool], deadline: float, what: str) -> None:
    while not check():
        if time.monotonic() > deadline:
            raise ServerError(f"Valkey cluster: timed out waiting for {what}")
        time.sleep(0.05)
