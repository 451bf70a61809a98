"""memory_read's search: top-5 by exact cosine over N entries of one scope (the built-in memory agent's numpy path).

Fills one scope of a real Valkey with N random unit vectors, then times ``MemoryAgents.search`` (what a
``memory_read`` node runs, minus the embedding call, which is the endpoint's: a stub returns the query
vector). Two figures: the first search of a scope (reads and decodes every vector) and the searches that
follow (the cached matrix, checked against the scope's counter: one GET, one matrix-vector product, one
read of the k entries). Writes ``bench/results/memory_search.json``.

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

from a2amesh.agent.llm_client import Embeddings
from a2amesh.agent.usage import Usage
from a2amesh.builtins.memory import MemoryAgents, ScopeRef
from a2amesh.config import Settings
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore, pack_vector
from a2amesh.store.redis import connect_redis
from bench.common import percentile, servers

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
        async with servers(Path(tmp)) as srv:
            settings = Settings.load(environ={"REDIS_URL": srv.redis_url, "NATS_URL": srv.nats_url})
            redis = await connect_redis(settings)
            store = MemoryStore(redis, Keys("bench"))
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
            for n in range(searches):
                agents_query = vectors[n * 11 % entries].tolist()
                agents._chat = lambda q=agents_query: _Stub(q)  # type: ignore[misc,assignment]
                t = time.perf_counter()
                await agents.search(scope, "q", _Ctx(), top_k=5, min_score=None)  # type: ignore[arg-type]
                cached.append((time.perf_counter() - t) * 1000)
            await redis.aclose()
    result = {
        "entries": entries,
        "dimensions": dimensions,
        "fill_seconds": round(fill_s, 1),
        "first_search_ms_p50": round(percentile(first, 50), 1),
        "search_ms_p50": round(percentile(cached, 50), 2),
        "search_ms_p99": round(percentile(cached, 99), 2),
        "searches": len(cached),
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
