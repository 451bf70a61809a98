"""redis-py's errors that mean "Redis/Valkey cannot be reached for now", and their translation.

Both clients (:mod:`a2amesh.store.redis`, :mod:`a2amesh.store.cluster`) raise
:class:`~a2amesh.errors.StoreUnavailable` in their place, so the work is handed back and retried later,
never failed.
"""

from __future__ import annotations

from redis.exceptions import ClusterDownError, MaxConnectionsError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from a2amesh import metrics
from a2amesh.errors import StoreUnavailable

UNREACHABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
"""A server that cannot be reached (restart, pause, network, AOF loading)."""

CLUSTER_UNREACHABLE: tuple[type[Exception], ...] = (
    *UNREACHABLE,
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
    MaxConnectionsError,
)
"""On a cluster, also: a slot without a reachable primary for now (a failover under way)."""


def unavailable(e: Exception) -> StoreUnavailable:
    """``e`` (one of redis-py's connection or timeout errors) as our :class:`StoreUnavailable`."""
    if metrics.enabled:
        metrics.store_error()
    return StoreUnavailable(str(e) or type(e).__name__)
