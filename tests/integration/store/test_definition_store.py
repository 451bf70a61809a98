"""The definitions store on a real Valkey: versions, ETags, atomic conditional writes, delete, purge."""

from __future__ import annotations

import asyncio

from a2amesh.config import Settings
from a2amesh.jsontext import content_digest
from a2amesh.store.definitions import DefinitionStore, NewVersion
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis


def doc(v: int) -> dict[str, object]:
    return {"name": "flow", "nodes": [{"id": "a", "type": "agent", "agent_name": "w", "input": {"v": v}}]}


def meta(v: int, author: str = "alice") -> NewVersion:
    return NewVersion(name="flow", description=None, format="dag", digest=content_digest(doc(v)), author=author)


async def test_versions_etags_and_modes(redis: Redis, settings: Settings) -> None:
    """create refuses a live id; update needs one; apply writes nothing for equal content; ETags change per version."""
    store = DefinitionStore(redis, Keys(settings.namespace))
    assert (await store.write("flow", doc(1), meta(1), mode="update")).outcome == "missing"
    first = await store.write("flow", doc(1), meta(1), mode="create")
    assert first.outcome == "written"
    assert first.head is not None
    assert (first.head.version, first.head.enabled, first.head.mcp_export) == (1, True, True)
    assert (await store.write("flow", doc(1), meta(1), mode="create")).outcome == "exists"
    assert (await store.write("flow", doc(1), meta(1), mode="apply")).outcome == "unchanged"
    second = await store.write("flow", doc(2), meta(2, "bob"), mode="apply")
    assert second.head is not None
    assert second.head.version == 2
    assert second.head.etag != first.head.etag
    assert second.head.created_at == first.head.created_at
    assert await store.document("flow", 1) == doc(1)
    assert await store.document("flow", 2) == doc(2)
    assert [(v.version, v.author) for v in await store.versions("flow")] == [(1, "alice"), (2, "bob")]
    stale = await store.write("flow", doc(3), meta(3), if_match=first.head.etag)
    assert stale.outcome == "stale"
    assert await store.document("flow", 3) is None


async def test_concurrent_conditional_writes_have_one_winner(redis: Redis, settings: Settings) -> None:
    """Twenty writers with the same If-Match: exactly one makes version 2, the others are told they are stale."""
    store = DefinitionStore(redis, Keys(settings.namespace))
    first = await store.write("flow", doc(1), meta(1))
    assert first.head is not None
    outcomes = await asyncio.gather(
        *(store.write("flow", doc(i), meta(i), if_match=first.head.etag) for i in range(2, 22))
    )
    assert sorted(o.outcome for o in outcomes) == ["stale"] * 19 + ["written"]
    head = await store.head("flow")
    assert head is not None
    assert head.version == 2
    assert [v.version for v in await store.versions("flow")] == [1, 2]


async def test_delete_keeps_history_flags_and_purge(redis: Redis, settings: Settings) -> None:
    """Delete hides the id but keeps its versions; a re-create continues the numbering; purge forgets all."""
    store = DefinitionStore(redis, Keys(settings.namespace))
    await store.write("flow", doc(1), meta(1), enabled=False, mcp_export=False)
    flags = await store.set_flags("flow", enabled=True)
    assert flags.head is not None
    assert (flags.head.enabled, flags.head.mcp_export, flags.head.version) == (True, False, 1)
    assert (await store.delete("flow", if_match='"nope"')).outcome == "stale"
    assert (await store.delete("flow")).outcome == "written"
    assert await store.head("flow") is None
    assert await store.heads() == []
    assert [h.id for h in await store.heads(include_deleted=True)] == ["flow"]
    assert (await store.delete("flow")).outcome == "missing"
    assert (await store.set_flags("flow", enabled=False)).outcome == "missing"
    assert await store.document("flow", 1) == doc(1)
    again = await store.write("flow", doc(5), meta(5), mode="create")
    assert again.head is not None
    assert (again.head.version, again.head.enabled) == (2, True)
    assert await store.purge("flow")
    assert await store.head("flow", include_deleted=True) is None
    assert await store.versions("flow") == []
    assert not await store.purge("flow")
