"""Semantic memory entries per agent and optionally per user (seed 004's ``agent_memory``), in Redis.

An entry is a hash (content, key, metadata, timestamps); its embedding sits in the scope's vector hash
(entry id → base64 of little-endian float32), so a search reads one hash per scope. Similarity is
computed by the caller (the built-in memory agent, exact cosine with numpy).
"""

from __future__ import annotations

import base64
import json
import struct
import time
from dataclasses import dataclass
from typing import Any, cast

from a2amesh.ids import nuid
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

__all__ = ["MemoryEntry", "MemoryStore", "pack_vector", "unpack_vector"]


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


class MemoryStore:
    """Memory entries and their embeddings, scoped by agent and user."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

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
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.memory_vectors(agent, user)))
        return {str(k): str(v) for k, v in raw.items()}

    async def get(self, agent: str, entry_id: str) -> MemoryEntry | None:
        """One entry, or None."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.memory_entry(agent, entry_id)))
        return MemoryEntry.from_fields({str(k): str(v) for k, v in raw.items()}) if raw else None

    async def many(self, agent: str, entry_ids: list[str]) -> list[MemoryEntry | None]:
        """Entries in the order of ``entry_ids`` (None where one is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for entry_id in entry_ids:
            pipe.hgetall(self.keys.memory_entry(agent, entry_id))
        rows = await pipe.execute()
        return [MemoryEntry.from_fields({str(k): str(v) for k, v in row.items()}) if row else None for row in rows]

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
