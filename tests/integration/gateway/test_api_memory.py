"""The memory API (seed 004): write entries through the ``builtin-memory`` agent, list them by agent, user and
key, read, replace and delete them, with ``memory.*`` events on the events stream; scopes and bad input."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.waiting import within

KEYS = "admin=adm1n#admin,reader=r3ad#read,other=0ther@elsewhere#admin"
ADMIN = {"Authorization": "Bearer adm1n"}
READER = {"Authorization": "Bearer r3ad"}


@pytest.fixture
async def api(builtins: Any, gateway: Any, client: Client, fake_llm: FakeOpenAIServer) -> str:
    await builtins(fake_llm.base_url)
    await client.registry.wait_for("builtin-memory", 5)
    url: str = await gateway(api_keys=parse_api_keys(KEYS))
    return url


async def events_of(http: httpx.AsyncClient, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` memory events of the stream, from its start."""
    import json

    found: list[tuple[str, dict[str, Any]]] = []
    async with http.stream("GET", "/api/events?type=memory&after=0", headers=READER) as response:
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                found.append((kind, json.loads(line[6:])))
                if len(found) == count:
                    return found
    return found


async def test_write_list_replace_delete_with_events(api: str) -> None:
    """A written entry is listed by agent and user; the same key replaces it (200); delete forgets it (404 after);
    each change is a memory.* event without the entry's content."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        first = {"agent": "assistant", "user": "ann", "key": "pet", "content": "Ann has a cat", "metadata": {"n": 1}}
        r = await http.post("/api/memory", json=first, headers=ADMIN)
        assert r.status_code == 201, r.text
        entry = r.json()
        assert (entry["agent"], entry["user"], entry["key"], entry["content"]) == (
            "assistant",
            "ann",
            "pet",
            "Ann has a cat",
        )
        r = await http.post("/api/memory", json={"agent": "assistant", "content": "shared fact"}, headers=ADMIN)
        assert r.status_code == 201
        shared = r.json()

        listed = (await http.get("/api/memory", params={"agent": "assistant"}, headers=READER)).json()["items"]
        assert {e["id"] for e in listed} == {entry["id"], shared["id"]}
        anns = (await http.get("/api/memory", params={"agent": "assistant", "user": "ann"}, headers=READER)).json()
        assert [e["content"] for e in anns["items"]] == ["Ann has a cat"]

        again = await http.post("/api/memory", json={**first, "content": "Ann has two cats"}, headers=ADMIN)
        assert again.status_code == 200, again.text
        assert again.json()["id"] == entry["id"]
        by_key = await http.get(
            "/api/memory", params={"agent": "assistant", "user": "ann", "key": "pet"}, headers=READER
        )
        assert [e["content"] for e in by_key.json()["items"]] == ["Ann has two cats"]
        one = await http.get(f"/api/memory/{entry['id']}", params={"agent": "assistant"}, headers=READER)
        assert one.json()["metadata"] == {"n": 1}

        gone = await http.delete(f"/api/memory/{entry['id']}", params={"agent": "assistant"}, headers=ADMIN)
        assert gone.status_code == 204
        missing = await http.get(f"/api/memory/{entry['id']}", params={"agent": "assistant"}, headers=READER)
        assert missing.status_code == 404
        assert (
            await http.delete(f"/api/memory/{entry['id']}", params={"agent": "assistant"}, headers=ADMIN)
        ).status_code == 404

        events = await within(events_of(http, 4), 15, "four memory events")
        assert [k for k, _ in events] == ["memory.created", "memory.created", "memory.updated", "memory.deleted"]
        assert all("content" not in data for _, data in events)
        assert events[-1][1]["id"] == entry["id"]


async def test_scopes_and_bad_input(api: str) -> None:
    """Writing needs admin (403 for a read key), a key limited to other agents is refused, bad bodies and queries
    are 422 with the field's path, and the API keeps serving."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        body = {"agent": "assistant", "content": "x"}
        assert (await http.post("/api/memory", json=body, headers=READER)).status_code == 403
        limited = await http.post("/api/memory", json=body, headers={"Authorization": "Bearer 0ther"})
        assert limited.status_code == 403
        assert "assistant" in limited.json()["detail"]
        assert (await http.post("/api/memory", json=body)).status_code == 401
        for bad, path in (
            ({"agent": "assistant"}, "body.content"),
            ({"agent": "bad name", "content": "x"}, "body.agent"),
            ({"agent": "assistant", "content": "x", "extra": 1}, "body.extra"),
        ):
            r = await http.post("/api/memory", json=bad, headers=ADMIN)
            assert r.status_code == 422, r.text
            assert path in [e["path"] for e in r.json()["errors"]]
        r = await http.get("/api/memory", headers=READER)
        assert r.status_code == 422
        assert "query.agent" in [e["path"] for e in r.json()["errors"]]
        assert (await http.get("/healthz")).status_code == 200


async def test_an_embedding_of_another_size_is_refused(api: str, fake_llm: FakeOpenAIServer) -> None:
    """A write whose embedding does not match the size of the scope's earlier entries is refused with the reason
    (422), and nothing is stored."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        ok = await http.post("/api/memory", json={"agent": "dims", "content": "first"}, headers=ADMIN)
        assert ok.status_code == 201, ok.text
        fake_llm.embedding_dimensions = 3
        r = await http.post("/api/memory", json={"agent": "dims", "content": "second"}, headers=ADMIN)
        assert r.status_code == 422, r.text
        assert "dimension" in r.json()["detail"] or "length" in r.json()["detail"]
        listed = (await http.get("/api/memory", params={"agent": "dims"}, headers=READER)).json()["items"]
        assert [e["content"] for e in listed] == ["first"]
