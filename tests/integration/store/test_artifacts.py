"""The artifact store on a real Valkey: versions, URIs, user scoping, TTLs, limits, concurrency."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import ArtifactError, ArtifactNotFound
from a2amesh.protocol import TaskState
from a2amesh.store.artifacts import ArtifactScope, ArtifactStore, format_artifact_uri
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis

SCOPE = ArtifactScope("ctx-1", "task-1")


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ArtifactStore:
    return ArtifactStore(redis, Keys(settings.namespace), retention=3600, max_bytes=10_000)


async def test_versions_count_from_zero_and_latest_is_default(store: ArtifactStore) -> None:
    """Saving a name three times gives versions 0, 1, 2; load without a version is the latest, version 0 is real."""
    metas = [await store.save(SCOPE, "out.json", {"n": n}) for n in range(3)]
    assert [m.version for m in metas] == [0, 1, 2]
    assert (await store.load(SCOPE, "out.json")).value == {"n": 2}
    assert (await store.load(SCOPE, "out.json", 0)).value == {"n": 0}
    assert await store.versions(SCOPE, "out.json") == [0, 1, 2]


async def test_meta_has_uri_media_type_size_sha256(store: ArtifactStore, settings: Settings) -> None:
    """A saved version reports its URI (SPEC §3.5 shape), MIME type, byte size, sha256 and metadata."""
    meta = await store.save(SCOPE, "notes.md", "héllo", media_type="text/markdown", metadata={"by": "test"})
    assert meta.uri == f"artifact://{settings.namespace}/ctx-1/task-1/notes.md?version=0"
    assert meta.media_type == "text/markdown"
    assert meta.size == len("héllo".encode())
    assert meta.sha256 == hashlib.sha256("héllo".encode()).hexdigest()
    loaded = await store.load(SCOPE, "notes.md")
    assert loaded.meta == meta
    assert loaded.value == "héllo"


async def test_load_by_uri_from_anywhere(store: ArtifactStore) -> None:
    """A URI names a version in another scope; without ?version it means the latest."""
    await store.save(SCOPE, "a.json", [1])
    second = await store.save(SCOPE, "a.json", [2])
    assert (await store.load_uri(second.uri)).value == [2]
    latest_uri = format_artifact_uri(store.namespace, SCOPE, "a.json", None)
    assert (await store.load_uri(latest_uri)).value == [2]
    assert (await store.load_uri(latest_uri.replace("a.json", "a.json?version=0"))).value == [1]


async def test_uri_components_are_escaped(store: ArtifactStore) -> None:
    """Context ids with reserved characters survive the URI round trip."""
    scope = ArtifactScope("conv/42?x", "t 1")
    meta = await store.save(scope, "r.txt", "x")
    assert "conv%2F42%3Fx" in meta.uri
    assert (await store.load_uri(meta.uri)).meta.context_id == "conv/42?x"


async def test_bad_uris_and_names_are_rejected(store: ArtifactStore) -> None:
    """Malformed URIs, other namespaces and invalid names fail with an ArtifactError that says why."""
    for bad in ("http://x/y", "artifact://ns/only-two/parts", f"artifact://{store.namespace}/c/t/n?version=x"):
        with pytest.raises(ArtifactError):
            await store.load_uri(bad)
    with pytest.raises(ArtifactError, match="belongs to namespace"):
        await store.load_uri("artifact://other/c/t/n.json")
    with pytest.raises(ArtifactError, match="not valid"):
        await store.save(SCOPE, "../etc/passwd", "x")


async def test_missing_name_or_version_is_not_found(store: ArtifactStore) -> None:
    """Loading an unknown name or version raises ArtifactNotFound naming it."""
    await store.save(SCOPE, "x.json", {})
    with pytest.raises(ArtifactNotFound, match="'nope.json'"):
        await store.load(SCOPE, "nope.json")
    with pytest.raises(ArtifactNotFound, match="version 7"):
        await store.load(SCOPE, "x.json", 7)


async def test_list_returns_latest_of_each_name(store: ArtifactStore) -> None:
    """list() gives one entry per name with its latest version, sorted by name."""
    await store.save(SCOPE, "b.json", 1)
    await store.save(SCOPE, "a.json", 1)
    await store.save(SCOPE, "a.json", 2)
    listed = await store.list(SCOPE)
    assert [(m.name, m.version) for m in listed] == [("a.json", 1), ("b.json", 0)]
    assert await store.list(ArtifactScope("ctx-1", "other-task")) == []


async def test_delete_moves_latest_and_never_reuses_numbers(store: ArtifactStore) -> None:
    """Deleting the latest version makes the previous one latest; later saves get new numbers, not reused ones."""
    for n in range(3):
        await store.save(SCOPE, "d.json", n)
    assert await store.delete(SCOPE, "d.json", 2) == 1
    assert (await store.load(SCOPE, "d.json")).value == 1
    assert (await store.save(SCOPE, "d.json", 9)).version == 3
    assert await store.delete(SCOPE, "d.json") == 3
    with pytest.raises(ArtifactNotFound):
        await store.load(SCOPE, "d.json")
    assert await store.list(SCOPE) == []
    assert (await store.save(SCOPE, "d.json", 10)).version == 4
    with pytest.raises(ArtifactNotFound):
        await store.delete(SCOPE, "d.json", 0)


async def test_user_scoping(store: ArtifactStore) -> None:
    """A version written for a user is invisible to other users and to requests without a user."""
    meta = await store.save(SCOPE, "secret.json", {"k": 1}, user="alice")
    await store.save(SCOPE, "public.json", {"k": 2})
    assert (await store.load(SCOPE, "secret.json", user="alice")).value == {"k": 1}
    for other in (None, "bob"):
        with pytest.raises(ArtifactNotFound):
            await store.load(SCOPE, "secret.json", user=other)
        with pytest.raises(ArtifactNotFound):
            await store.load_uri(meta.uri, user=other)
        with pytest.raises(ArtifactNotFound):
            await store.delete(SCOPE, "secret.json", user=other)
    assert [m.name for m in await store.list(SCOPE, user="bob")] == ["public.json"]
    assert [m.name for m in await store.list(SCOPE, user="alice")] == ["public.json", "secret.json"]
    assert (await store.load(SCOPE, "public.json", user="bob")).value == {"k": 2}


async def test_binary_and_json_text_content(store: ArtifactStore) -> None:
    """Bytes round-trip exactly; a str given as application/json must be JSON and loads as a value."""
    raw = bytes(range(256))
    meta = await store.save(SCOPE, "blob.bin", raw)
    assert meta.media_type == "application/octet-stream"
    assert (await store.load(SCOPE, "blob.bin")).content == raw
    await store.save(SCOPE, "j.json", '{"a": [1, 2]}', media_type="application/json")
    assert (await store.load(SCOPE, "j.json")).value == {"a": [1, 2]}
    with pytest.raises(ArtifactError, match="not valid JSON"):
        await store.save(SCOPE, "k.json", "{nope", media_type="application/json")


async def test_size_limit(store: ArtifactStore) -> None:
    """Content above max_bytes is refused with the sizes in the message."""
    with pytest.raises(ArtifactError, match="above the limit of 10000 bytes"):
        await store.save(SCOPE, "big.txt", "x" * 10_001)


async def test_ttl_follows_retention_and_refresh(redis: Redis, settings: Settings) -> None:
    """Every key of an artifact carries the retention TTL; refresh() restarts it for a whole context."""
    keys = Keys(settings.namespace)
    store = ArtifactStore(redis, keys, retention=100, max_bytes=1000)
    await store.save(SCOPE, "t.json", 1)
    await store.save(ArtifactScope("ctx-1", "task-2"), "u.json", 1)
    for key in (keys.artifact(str(SCOPE), "t.json"), keys.artifact_names(str(SCOPE)), keys.artifact_scopes("ctx-1")):
        assert 0 < await redis.ttl(key) <= 100
    await redis.expire(keys.artifact(str(SCOPE), "t.json"), 5)
    assert await store.refresh("ctx-1") == 2
    assert await redis.ttl(keys.artifact(str(SCOPE), "t.json")) > 50


async def test_concurrent_saves_get_distinct_versions(store: ArtifactStore) -> None:
    """Twenty concurrent saves of one name in one scope get versions 0..19, each holding its own content."""
    metas = await asyncio.gather(*(store.save(SCOPE, "c.json", {"i": i}) for i in range(20)))
    assert sorted(m.version for m in metas) == list(range(20))
    values = [(await store.load(SCOPE, "c.json", v)).value["i"] for v in range(20)]
    assert sorted(values) == list(range(20))


async def test_ctx_artifact_api_in_an_agent(agent_host: Any, client: Client, store: ArtifactStore) -> None:
    """ctx.save_artifact/load_artifact/list_artifacts work inside a handler, under the task's own scope and user."""

    async def writer(input: Any, ctx: Any) -> Any:
        first = await ctx.save_artifact("draft.json", {"v": 0})
        await ctx.save_artifact("draft.json", {"v": 1})
        old = await ctx.load_artifact("draft.json", version=0)
        latest = await ctx.load_artifact("draft.json")
        blob = await ctx.save_artifact("blob.bin", b"\x00\xff")
        blob_back = await ctx.load_artifact("blob.bin")
        by_uri = await ctx.load_artifact(first.uri)
        names = [m.name for m in await ctx.list_artifacts()]
        return {
            "old": old.value,
            "latest": [latest.value, latest.meta.version],
            "blob": [blob_back.content == b"\x00\xff", blob_back.meta == blob],
            "by_uri": by_uri.value,
            "names": names,
            "uri": first.uri,
            "task": ctx.task_id,
        }

    await agent_host("writer", writer)
    task = await client.send("writer", {"go": True}, headers={"A2A-User": "carol"})
    assert task.status.state == TaskState.COMPLETED
    out = task.output()
    assert out["old"] == {"v": 0}
    assert out["latest"] == [{"v": 1}, 1]
    assert out["blob"] == [True, True]
    assert out["by_uri"] == {"v": 0}
    assert out["names"] == ["blob.bin", "draft.json"]
    assert f"/{task.context_id}/{task.id}/draft.json?version=0" in out["uri"]
    assert (await store.load_uri(out["uri"], user="carol")).value == {"v": 0}
    with pytest.raises(ArtifactNotFound):
        await store.load_uri(out["uri"])
