"""Semantic memory entries per agent and optionally per user (seed 004's ``agent_memory``), in Redis.

An entry is a hash (content, key, metadata, timestamps); its embedding sits in the scope's vector hash
(entry id → base64 of little-endian float32), so an exact search reads one hash per scope and scores it
in the caller (the built-in memory agent, numpy). The entry hash also holds its embedding as raw float32
(field ``v{dimensions}``) and a tag of its scope, so that a server with a vector index (RediSearch, the
query engine of Redis 8, valkey-search) finds the nearest entries itself: :class:`VectorIndex`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from a2amesh.errors import StoreError
from a2amesh.ids import nuid
from a2amesh.logs import get_logger
from a2amesh.store.cluster import ClusterRedis
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["MemoryEntry", "MemoryStore", "VectorIndex", "pack_vector", "unpack_vector"]

log = get_logger("store.memory")

_ENTRY_FIELDS = ("id", "agent", "user", "key", "content", "metadata", "created_at", "updated_at", "dimensions")
"""The text fields of an entry hash (read by name: the raw vector field is binary)."""


def pack_vector(vector: list[float]) -> str:
    """A vector as stored: base64 of little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def unpack_vector(text: str) -> bytes:
    """The float32 bytes of a stored vector (``numpy.frombuffer(…, "<f4")`` reads them)."""
    return base64.b64decode(text)


@dataclass(frozen=True)
class MemoryEntry:
    """One remembered thing."""

    id: str
    agent: str
    user: str | None
    key: str | None
    content: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    dimensions: int

    def to_json(self) -> dict[str, Any]:
        """The entry as node outputs and the API show it."""
        return {
            "id": self.id,
            "agent": self.agent,
            "user": self.user,
            "key": self.key,
            "content": self.content,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_values(cls, values: list[Any]) -> MemoryEntry | None:
        """An entry from the values of ``HMGET`` of :data:`_ENTRY_FIELDS` (None: no such entry)."""
        if values[0] is None:
            return None
        return cls.from_fields({f: str(v) for f, v in zip(_ENTRY_FIELDS, values, strict=True) if v is not None})

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> MemoryEntry:
        return cls(
            id=raw["id"],
            agent=raw["agent"],
            user=raw.get("user") or None,
            key=raw.get("key") or None,
            content=raw["content"],
            metadata=json.loads(raw.get("metadata") or "{}"),
            created_at=float(raw["created_at"]),
            updated_at=float(raw["updated_at"]),
            dimensions=int(raw["dimensions"]),
        )


def scope_tag(agent: str, user: str | None) -> str:
    """The tag of a scope in the vector index: a digest, so no agent or user name needs escaping in a query."""
    return hashlib.blake2b(f"{agent}\x00{user or ''}".encode(), digest_size=12).hexdigest()


def vector_field(dimensions: int) -> str:
    """The entry hash field of the raw embedding: one index per vector length, each on its own field."""
    return f"v{dimensions}"


class VectorIndex:
    """Nearest entries found by the server, where it offers a vector index (``FT.CREATE`` / ``FT.SEARCH``).

    One FLAT (exact) cosine index per vector length over every entry hash of the namespace, with the scope
    as a tag, created when first needed (it indexes the entries already there). FLAT keeps the results
    those of the exact search in the agent: the server scans the scope's vectors instead of sending them.
    """

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        entry = keys.memory_entry("agent", "id")
        self._prefix = entry[: entry.index("{")]  # every entry hash of the namespace, no other key
        self._ready: set[int] = set()

    @staticmethod
    async def offered(redis: Redis) -> bool:
        """Whether the server has a vector index and a search there sees every entry: ``FT._LIST`` answers
        (a search module, or Redis 8's query engine) and the server is not a cluster node (where a search
        would see one shard only)."""
        if isinstance(redis, ClusterRedis):
            return False
        try:
            await redis.execute_command("FT._LIST")
        except ResponseError:
            return False
        info = await redis.info("cluster")
        return not int(info.get("cluster_enabled", 0))

    def name(self, dimensions: int) -> str:
        return f"{self.keys.ns}:memory:{vector_field(dimensions)}"

    async def ensure(self, dimensions: int) -> None:
        """Create the index of a vector length unless it exists."""
        if dimensions in self._ready:
            return
        try:
            await self.redis.execute_command(
                "FT.CREATE", self.name(dimensions), "ON", "HASH", "PREFIX", "1", self._prefix,
                "SCHEMA", "scope", "TAG",
                vector_field(dimensions), "VECTOR", "FLAT", "6",
                "TYPE", "FLOAT32", "DIM", str(dimensions), "DISTANCE_METRIC", "COSINE",
            )  # fmt: skip
            log.info("store.memory_index_created", index=self.name(dimensions), dimensions=dimensions)
        except ResponseError as e:
            if "already exists" not in str(e).lower():
                raise
        await self._backfilled(dimensions)
        self._ready.add(dimensions)

    async def _backfilled(self, dimensions: int) -> None:
        """Wait until a new index has taken in the entries that were already there (a bounded wait)."""
        for _ in range(600):
            raw = await self.redis.execute_command("FT.INFO", self.name(dimensions))
            info = _pairs(raw)
            if str(info.get("indexing", info.get("backfill_in_progress", "0"))) == "0":
                return
            await asyncio.sleep(0.05)
        raise StoreError(f"the vector index {self.name(dimensions)} is still taking in entries after 30 s")

    async def nearest(self, agent: str, user: str | None, vector: list[float], k: int) -> list[tuple[str, float]]:
        """The ``k`` entries of a scope closest to ``vector``: ``(entry id, cosine similarity)``, best first."""
        dimensions = len(vector)
        await self.ensure(dimensions)
        query = f"@scope:{{{scope_tag(agent, user)}}}=>[KNN {k} @{vector_field(dimensions)} $q AS dist]"
        blob = struct.pack(f"<{dimensions}f", *vector)
        reply = await self.redis.execute_command(
            "FT.SEARCH", self.name(dimensions), query, "PARAMS", "2", "q", blob,
            "RETURN", "1", "dist", "LIMIT", "0", str(k), "DIALECT", "2",
        )  # fmt: skip
        if isinstance(reply, dict):  # RESP3
            rows = [(row["id"], _pairs(row.get("extra_attributes") or row.get("values"))) for row in reply["results"]]
        else:  # RESP2: total, key, fields, key, fields, …
            rows = [(key, _pairs(fields)) for key, fields in zip(reply[1::2], reply[2::2], strict=True)]
        hits = [(str(key).rsplit(":", 1)[1], 1.0 - float(fields["dist"])) for key, fields in rows]
        hits.sort(key=lambda hit: -hit[1])
        return hits


def _pairs(raw: Any) -> dict[str, Any]:
    """A reply of field/value pairs as a dict (redis-py parses some module replies into one already)."""
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    return {str(k): v for k, v in zip(raw[::2], raw[1::2], strict=True)}


class MemoryStore:
    """Memory entries and their embeddings, scoped by agent and user.

    Args:
        vector_index: search with the server's vector index: None finds out whether it has one (at the first
            :meth:`index` call), False never.
    """

    def __init__(self, redis: Redis, keys: Keys, *, vector_index: bool | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self._use_index = vector_index
        self._index = VectorIndex(redis, keys)

    async def index(self) -> VectorIndex | None:
        """The server's vector index, or None where searches are exact in the caller."""
        if self._use_index is None:
            self._use_index = await VectorIndex.offered(self.redis)
            log.info("store.memory_search", where="server vector index" if self._use_index else "exact, in the agent")
        return self._index if self._use_index else None

    async def write(
        self,
        *,
        agent: str,
        user: str | None,
        content: str,
        vector: list[float],
        key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[MemoryEntry, bool]:
        """Store an entry; with a key already in the scope, replace that entry (same id, created_at kept).

        Returns:
            The entry, and whether it replaced one.
        """
        index = await self.index()
        if index is not None:
            await index.ensure(len(vector))  # before the write: the server indexes it as it lands
        now = time.time()
        existing: MemoryEntry | None = None
        if key is not None:
            entry_id = await self.redis.hget(self.keys.memory_keys(agent, user), key)
            if entry_id:
                existing = await self.get(agent, str(entry_id))
        entry = MemoryEntry(
            id=existing.id if existing else nuid(),
            agent=agent,
            user=user,
            key=key,
            content=content,
            metadata=metadata or {},
            created_at=existing.created_at if existing else now,
            updated_at=now,
            dimensions=len(vector),
        )
        fields: dict[Any, Any] = {
            "id": entry.id,
            "agent": agent,
            "user": user or "",
            "key": key or "",
            "content": content,
            "metadata": json.dumps(entry.metadata),
            "created_at": repr(entry.created_at),
            "updated_at": repr(entry.updated_at),
            "dimensions": str(entry.dimensions),
            "scope": scope_tag(agent, user),
            vector_field(len(vector)): struct.pack(f"<{len(vector)}f", *vector),
        }
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.memory_entry(agent, entry.id), mapping=fields)
        pipe.hset(self.keys.memory_vectors(agent, user), entry.id, pack_vector(vector))
        if key is not None:
            pipe.hset(self.keys.memory_keys(agent, user), key, entry.id)
        pipe.incr(self.keys.memory_version(agent, user))
        pipe.zadd(self.keys.memory_index(agent), {entry.id: int(now * 1000)})
        await pipe.execute()
        return entry, existing is not None

    async def version(self, agent: str, user: str | None) -> int:
        """The scope's change counter (0 for a scope never written)."""
        return int(await self.redis.get(self.keys.memory_version(agent, user)) or 0)

    async def versioned_vectors(self, agent: str, user: str | None) -> tuple[int, dict[str, str]]:
        """The scope's change counter and its vectors, read together."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.memory_version(agent, user))
        pipe.hgetall(self.keys.memory_vectors(agent, user))
        version, raw = await pipe.execute()
        return int(version or 0), {str(k): str(v) for k, v in raw.items()}

    async def dimensions(self, agent: str, user: str | None) -> int | None:
        """The length of the scope's vectors (of one of them), or None for an empty scope."""
        sample = await self.redis.hrandfield(self.keys.memory_vectors(agent, user), 1, withvalues=True)
        return len(unpack_vector(str(sample[1]))) // 4 if sample else None

    async def vectors(self, agent: str, user: str | None) -> dict[str, str]:
        """Every embedding of a scope: entry id → stored vector text."""
        raw = await self.redis.hgetall(self.keys.memory_vectors(agent, user))
        return {str(k): str(v) for k, v in raw.items()}

    async def get(self, agent: str, entry_id: str) -> MemoryEntry | None:
        """One entry, or None."""
        return MemoryEntry.from_values(await self.redis.hmget(self.keys.memory_entry(agent, entry_id), _ENTRY_FIELDS))

    async def many(self, agent: str, entry_ids: list[str]) -> list[MemoryEntry | None]:
        """Entries in the order of ``entry_ids`` (None where one is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for entry_id in entry_ids:
            pipe.hmget(self.keys.memory_entry(agent, entry_id), _ENTRY_FIELDS)
        return [MemoryEntry.from_values(row) for row in await pipe.execute()]

    async def delete(self, agent: str, entry_id: str) -> bool:
        """Remove an entry, its embedding and its key; False when there was none."""
        entry = await self.get(agent, entry_id)
        if entry is None:
            return False
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.keys.memory_entry(agent, entry_id))
        pipe.hdel(self.keys.memory_vectors(agent, entry.user), entry_id)
        if entry.key is not None:
            pipe.hdel(self.keys.memory_keys(agent, entry.user), entry.key)
        pipe.incr(self.keys.memory_version(agent, entry.user))
        pipe.zrem(self.keys.memory_index(agent), entry_id)
        await pipe.execute()
        return True

    async def list(
        self, agent: str, *, user: str | None = None, key: str | None = None, limit: int = 100
    ) -> list[MemoryEntry]:
        """An agent's entries, most recently updated first; ``user`` and ``key`` narrow them down."""
        if key is not None:
            entry_id = await self.redis.hget(self.keys.memory_keys(agent, user), key)
            entry = await self.get(agent, str(entry_id)) if entry_id else None
            return [entry] if entry is not None else []
        found: list[MemoryEntry] = []
        start = 0
        while len(found) < limit:
            ids = await self.redis.zrevrange(self.keys.memory_index(agent), start, start + 4 * limit - 1)
            if not ids:
                break
            start += len(ids)
            for entry in await self.many(agent, [str(i) for i in ids]):
                if entry is not None and (user is None or entry.user == user):
                    found.append(entry)
        return found[:limit]
