"""Executor presence in Redis: which replicas are alive, so a crashed one's executions are taken over
before their leases expire (docs/workflows.md, "Takeover").

Each executor replica keeps ``executor:{instance}:alive`` (``SET … PX ttl``) and its entry in the
``executors`` sorted set (score = the key's expiry, ms), renewed every ``ttl/3``. A replica whose entry
is past its score and whose key is gone has stopped renewing: its leases are released (each compared with
the value read, so a lease taken since stays), and the executions go to the front of the ``leases`` index,
where the normal takeover (``lease_acquire``, epoch + 1) picks them up. The epoch fence stays the
guarantee; presence only finds the crash sooner. A replica that cannot renew in time stops driving first
(:class:`~a2amesh.executor.presence.PresenceKeeper`), so a live one is not taken over while it still acts.
"""

from __future__ import annotations

from typing import Any

from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, dedicated_client, load_script, now_ms
from a2amesh.store.shards import by_shard, everything

__all__ = ["PRESENCE_TTL", "ExecutorPresence", "presence_ttl"]

PRESENCE_TTL = 4.0
"""Seconds an executor's presence key lives without renewal (at most the lease TTL)."""

SCAN_CHUNK = 500
"""Lease values read per round trip while looking for a dead replica's executions."""


def presence_ttl(lease_ttl: float) -> float:
    """The presence TTL that goes with a lease TTL: :data:`PRESENCE_TTL`, or the lease TTL when shorter."""
    return min(lease_ttl, PRESENCE_TTL)


def _strs(values: Any) -> list[str]:
    return [str(v) for v in values or []]


class ExecutorPresence:
    """Presence keys of executor replicas and the release of a dead replica's leases.

    Args:
        redis: the process's Redis client (``decode_responses=True``).
        renewals: the client renewals go through (one that bulk commits never hold up).
        keys: the namespace's key builder.
        ttl: seconds a presence key lives without renewal.
    """

    def __init__(self, redis: Redis, renewals: Redis, keys: Keys, *, ttl: float) -> None:
        self.redis = redis
        self.renewals = renewals
        self.keys = keys
        self.ttl_ms = int(ttl * 1000)
        self._release = redis.register_script(load_script("lease_release"))

    def on_own_connection(self) -> ExecutorPresence:
        """A copy with a connection of its own, opened on first use by the event loop that uses it (the
        renewal thread's); close it with :meth:`aclose` in that loop."""
        own = dedicated_client(self.redis, connections=1)
        return ExecutorPresence(own, own, self.keys, ttl=self.ttl_ms / 1000)

    async def aclose(self) -> None:
        """Close the connection of a copy made by :meth:`on_own_connection`."""
        await self.redis.aclose()

    async def announce(self, instance: str) -> None:
        """Put (or renew) this replica's presence key and index entry."""
        pipe = self.renewals.pipeline(transaction=False)
        pipe.set(self.keys.executor_alive(instance), "1", px=self.ttl_ms)
        pipe.zadd(self.keys.executors_index(), {instance: now_ms() + self.ttl_ms})
        await pipe.execute()

    async def withdraw(self, instance: str) -> None:
        """Remove this replica's presence (a clean stop, after its executions were handed over)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self.keys.executor_alive(instance))
        pipe.zrem(self.keys.executors_index(), instance)
        await pipe.execute()

    async def dead(self, limit: int = 20) -> list[str]:
        """Replicas whose presence expired (index entry past its score and key gone)."""
        late = _strs(await self.redis.zrangebyscore(self.keys.executors_index(), "-inf", now_ms(), start=0, num=limit))
        if not late:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for instance in late:
            pipe.exists(self.keys.executor_alive(instance))
        alive = await pipe.execute()
        return [instance for instance, present in zip(late, alive, strict=True) if not present]

    async def release_dead(self, instance: str) -> list[str]:
        """Release every lease ``instance`` holds and put its executions first in the takeover index; then
        forget the replica. Returns the executions released."""
        prefix = instance + ":"
        ids = await everything(self.redis, [self.keys.leases_index(s) for s in self.keys.shards])
        released: list[str] = []
        for start in range(0, len(ids), SCAN_CHUNK):
            chunk = ids[start : start + SCAN_CHUNK]
            pipe = self.redis.pipeline(transaction=False)
            for execution_id in chunk:
                pipe.get(self.keys.lease(execution_id))
            values = await pipe.execute()
            for execution_id, value in zip(chunk, values, strict=True):
                if value and str(value).startswith(prefix):
                    # compare-and-delete: a lease taken over since (a new owner, a new epoch) stays
                    if await self._release(keys=[self.keys.lease(execution_id)], args=[str(value)]):
                        released.append(execution_id)
        if released:
            pipe = self.redis.pipeline(transaction=False)
            for shard, members in by_shard(released).items():
                pipe.zadd(self.keys.leases_index(shard), dict.fromkeys(members, 0))
            await pipe.execute()
        await self.redis.zrem(self.keys.executors_index(), instance)
        return released
