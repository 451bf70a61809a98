"""The built-in ``embed`` and ``memory`` agents: embeddings, and semantic memory with exact cosine search.

Search is exact: the scope's vectors are read from Redis and scored with numpy (one matrix-vector product),
which keeps every entry findable and needs no search module in the server; the cost grows with the
entries of the scope (``docs/nodes.md`` gives the limits).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from a2amesh.agent.context import TaskContext
from a2amesh.agent.llm_client import Embeddings
from a2amesh.builtins.conversation import parse_input
from a2amesh.builtins.embedders import DEFAULT_EMBEDDING_MODEL, Embedder
from a2amesh.builtins.memory_events import publish_memory_event
from a2amesh.bus.nats import Bus
from a2amesh.store.memory import MemoryStore, unpack_vector

__all__ = ["DEFAULT_EMBEDDING_MODEL", "EmbeddingMismatch", "MemoryAgents", "ScopeRef"]

CACHED_SCOPES = 64
"""Scopes whose vectors a process keeps in memory between searches (least recently used dropped first)."""


class EmbeddingMismatch(ValueError):
    """Vectors of different lengths met: the scope was written with another embedding model."""


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Input):
    op: Literal["embed"] = "embed"
    input: str | list[str] = Field(description="A text or a list of texts.")
    model: str | None = None
    stream: bool = False


class ScopeRef(_Input):
    """Whose memory: an agent's shared entries, or one user's, and the embedding model to query it with."""

    agent: str = Field(min_length=1)
    user: str | None = None
    model: str | None = None
    stream: bool = False


class WriteRequest(ScopeRef):
    op: Literal["write"]
    content: str = Field(min_length=1)
    key: str | None = None
    metadata: dict[str, Any] | None = None


class ReadRequest(ScopeRef):
    op: Literal["read"]
    query: str = Field(min_length=1)
    top_k: int = Field(5, ge=1, le=100)
    min_score: float | None = None


class _MemoryRequest(_Input):
    request: WriteRequest | ReadRequest = Field(discriminator="op")


class MemoryAgents:
    """The work of ``builtin-embed`` and ``builtin-memory`` (no task state kept here)."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Callable[[], Embedder],
        *,
        embedding_model: str | None,
        bus: Bus | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self._embedder = embedder
        self.embedding_model = embedding_model or DEFAULT_EMBEDDING_MODEL
        self._cache: OrderedDict[tuple[str, str | None], tuple[int, list[str], np.ndarray[Any, Any]]] = OrderedDict()

    async def _embed(self, texts: list[str], model: str | None, ctx: TaskContext) -> Embeddings:
        result = await self._embedder().embed(texts, model=model or self.embedding_model)
        ctx.usage.add(model=result.model, purpose="embed", prompt_tokens=result.prompt_tokens, completion_tokens=0)
        return result

    async def embed(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """Embed a text or a list. Output: ``{embeddings, model, dimensions}``."""
        request = parse_input(EmbedRequest, data)
        texts = [request.input] if isinstance(request.input, str) else request.input
        if not texts:
            return {"embeddings": [], "model": request.model or self.embedding_model, "dimensions": 0}
        result = await self._embed(texts, request.model, ctx)
        dims = {len(v) for v in result.vectors}
        if len(dims) != 1:
            raise EmbeddingMismatch(f"the endpoint gave vectors of different lengths: {sorted(dims)}")
        return {"embeddings": result.vectors, "model": result.model, "dimensions": dims.pop()}

    async def memory(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """``op: write`` stores an entry; ``op: read`` finds the closest entries."""
        request = parse_input(_MemoryRequest, {"request": data}).request
        if isinstance(request, WriteRequest):
            return await self._write(request, ctx)
        return await self._read(request, ctx)

    async def _write(self, request: WriteRequest, ctx: TaskContext) -> dict[str, Any]:
        (vector,) = (await self._embed([request.content], request.model, ctx)).vectors
        await self._check_dimensions(request, len(vector))
        entry, replaced = await self.store.write(
            agent=request.agent,
            user=request.user,
            content=request.content,
            vector=vector,
            key=request.key,
            metadata=request.metadata,
        )
        if self.bus is not None:
            await publish_memory_event(self.bus, "updated" if replaced else "created", entry)
        return {"id": entry.id, "key": entry.key, "agent": entry.agent, "user": entry.user, "replaced": replaced}

    async def _check_dimensions(self, request: ScopeRef, dimensions: int) -> None:
        other = await self.store.dimensions(request.agent, request.user)
        if other is not None and other != dimensions:
            raise EmbeddingMismatch(_mismatch(request, other, dimensions))

    async def _read(self, request: ReadRequest, ctx: TaskContext) -> dict[str, Any]:
        found = await self.search(request, request.query, ctx, top_k=request.top_k, min_score=request.min_score)
        return {"entries": found, "text": "\n".join(f"- {e['content']}" for e in found)}

    async def search(
        self,
        scope: ScopeRef,
        query_text: str,
        ctx: TaskContext,
        *,
        top_k: int,
        min_score: float | None,
        where: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The ``top_k`` entries of a scope closest to ``query_text`` (cosine), best first, each with its
        ``score``; ``where`` keeps only entries whose metadata holds those values. The server's vector index
        ranks them where it has one, else this agent does (exact, numpy)."""
        index = await self.store.index()
        loaded = None
        if index is None:
            loaded = await self._scope_matrix(scope)
            stored = None if loaded is None else int(loaded[1].shape[1])
        else:
            stored = await self.store.dimensions(scope.agent, scope.user)
        if stored is None:
            return []
        (query,) = (await self._embed([query_text], scope.model, ctx)).vectors
        if stored != len(query):
            raise EmbeddingMismatch(_mismatch(scope, stored, len(query)))
        k = top_k
        while True:
            if loaded is not None:
                ranked = _rank(*loaded, query, k)
            else:
                assert index is not None
                ranked = await index.nearest(scope.agent, scope.user, query, k)
            found = await self._entries(scope, ranked, top_k=top_k, min_score=min_score, where=where)
            below = min_score is not None and bool(ranked) and ranked[-1][1] < min_score
            if len(found) == top_k or len(ranked) < k or below:
                return found
            k *= 4  # the k nearest held too few that pass the filter: look further

    async def _entries(
        self,
        scope: ScopeRef,
        ranked: list[tuple[str, float]],
        *,
        top_k: int,
        min_score: float | None,
        where: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        """The entries of ranked ids, best first, until ``top_k`` pass ``min_score`` and ``where``."""
        if min_score is not None:
            ranked = [hit for hit in ranked if hit[1] >= min_score]
        found: list[dict[str, Any]] = []
        step = max(top_k, 32)
        for start in range(0, len(ranked), step):
            batch = ranked[start : start + step]
            entries = await self.store.many(scope.agent, [entry_id for entry_id, _ in batch])
            for (_, score), entry in zip(batch, entries, strict=True):
                if entry is None or (where and any(entry.metadata.get(k) != v for k, v in where.items())):
                    continue
                found.append({**entry.to_json(), "score": round(score, 6)})
                if len(found) == top_k:
                    return found
        return found

    async def _scope_matrix(self, scope: ScopeRef) -> tuple[list[str], np.ndarray[Any, Any]] | None:
        """The scope's ids and unit-length vectors (one row each), cached until the scope's counter moves."""
        key = (scope.agent, scope.user)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == await self.store.version(*key):
            self._cache.move_to_end(key)
            return cached[1], cached[2]
        version, stored = await self.store.versioned_vectors(*key)
        if not stored:
            self._cache.pop(key, None)
            return None
        ids = list(stored)
        raw = [unpack_vector(stored[i]) for i in ids]
        lengths = {len(r) // 4 for r in raw}
        if len(lengths) != 1:
            raise EmbeddingMismatch(
                f"the memory of agent {scope.agent!r} holds vectors of {len(lengths)} lengths "
                f"({', '.join(map(str, sorted(lengths)))}): it was written with several embedding models"
            )
        matrix = np.frombuffer(b"".join(raw), dtype="<f4").reshape(len(ids), lengths.pop()).copy()
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix /= np.where(norms == 0, 1.0, norms)
        self._cache[key] = (version, ids, matrix)
        while len(self._cache) > CACHED_SCOPES:
            self._cache.popitem(last=False)
        return ids, matrix


def _rank(ids: list[str], matrix: np.ndarray[Any, Any], query: list[float], k: int) -> list[tuple[str, float]]:
    """Exact cosine ranking of a scope's unit-length rows: the ``k`` best, best first."""
    q = np.asarray(query, dtype=np.float32)
    scores = (matrix @ q) / (float(np.linalg.norm(q)) or 1.0)
    if k >= len(ids):
        order = np.argsort(-scores, kind="stable")
    else:
        best = np.argpartition(-scores, k - 1)[:k]
        order = best[np.argsort(-scores[best], kind="stable")]
    return [(ids[i], float(scores[i])) for i in order]


def _mismatch(request: ScopeRef, stored: int, given: int) -> str:
    scope = f"agent {request.agent!r}" + (f", user {request.user!r}" if request.user else "")
    return (
        f"embedding dimension mismatch: the memory of {scope} holds {stored}-dimensional vectors, the embedding "
        f"model {request.model or 'by default'} gives {given}; use the model the memory was written with"
    )
