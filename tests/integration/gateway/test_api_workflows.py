"""The definitions half of the management API over real HTTP: create, version, restore, delete, live activation."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from a2amesh.client import Client, make_message
from a2amesh.errors import TransportError
from a2amesh.executor.service import WorkflowExecutor
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import TaskState, codes
from tests.support.waiting import eventually, within

ADMIN = {"Authorization": "Bearer adm1n-secret"}
READER = {"Authorization": "Bearer r3ader-secret"}
YAML = {"Content-Type": "application/yaml"}
V = {"A2A-Version": "1.0"}
REPO = Path(__file__).resolve().parents[3]


def flow(v: int, *, hold: bool = False, name: str = "flow") -> str:
    wait = "true" if hold else "false"
    return (
        f"name: {name}\ndescription: version {v}\nnodes:\n"
        f"  - {{id: a, type: agent, agent_name: gate, input: {{v: {v}, wait: {wait}}}}}\n"
        'output_mapping: {v: "{{a.output.v}}"}\n'
    )


class Gate:
    """An agent that echoes ``v``; with ``wait`` it holds until the test opens the gate."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if input.get("wait"):
            self.started.set()
            await self.release.wait()
        return {"v": input.get("v")}


class Api(NamedTuple):
    url: str
    gate: Gate
    executors: list[WorkflowExecutor]


@pytest.fixture
async def api(agent_host: Any, executor: Any, gateway: Any) -> Api:
    """A gate agent, two executor replicas with empty folders, a gateway with an admin and a read-only key."""
    gate = Gate()
    await agent_host("gate", gate)
    replicas = [await executor({}), await executor({})]
    keys = parse_api_keys("admin=adm1n-secret#admin|read,reader=r3ader-secret#read")
    return Api(await gateway(api_keys=keys, max_body_bytes=16384), gate, replicas)


def jsonrpc_send(data: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": data}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_create_then_call_over_nats_and_http(api: Api, client: Client) -> None:
    """A workflow created over HTTP has a live card within 1 s and answers over NATS and over the gateway."""
    url = api.url
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/workflows", content=flow(1), headers={**ADMIN, **YAML})
        assert r.status_code == 201, r.text
        body = r.json()
        assert body == {"id": "flow", "version": 1, "etag": r.headers["etag"], "warnings": []}
        await within(client.registry.wait_for("flow", 5), 1.0, "the created workflow's card")
        await eventually(
            lambda: all("flow" in ex.served for ex in api.executors), timeout=1, what="both replicas to serve it"
        )
        task = await within(client.send("flow", make_message(data={})), 10, "the call over NATS")
        assert task.status.state == TaskState.COMPLETED
        assert task.output() == {"v": 1}
        r = await http.post("/agents/flow/", json=jsonrpc_send({}), headers={**ADMIN, **V})
        result = r.json()["result"]["task"]
        assert result["status"]["state"] == "TASK_STATE_COMPLETED"
        assert result["artifacts"][0]["parts"][0]["data"] == {"v": 1}
        listed = (await http.get("/api/workflows", headers=READER)).json()
        assert [(w["id"], w["format"], w["version"], w["enabled"]) for w in listed] == [("flow", "dag", 1, True)]
        assert {"id", "name", "format", "version", "enabled", "updated_at"} <= set(listed[0])


async def test_update_while_running_restore_and_stale_etag(api: Api, client: Client) -> None:
    """v1's execution finishes on v1 while a new run uses v2; a stale If-Match is 412; restore v1 makes v3 = v1."""
    url, gate = api.url, api.gate
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/workflows?message=first", content=flow(1, hold=True), headers={**ADMIN, **YAML})
        v1_etag = r.json()["etag"]
        await client.registry.wait_for("flow", 5)
        first = await client.dispatch("flow", make_message(data={}), timeout=30)
        await within(gate.started.wait(), 10, "the v1 execution to reach the gate")

        r = await http.put("/api/workflows/flow", content=flow(2), headers={**ADMIN, **YAML, "If-Match": v1_etag})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 2
        v2_etag = r.json()["etag"]
        r = await http.put("/api/workflows/flow", content=flow(3), headers={**ADMIN, **YAML, "If-Match": v1_etag})
        assert r.status_code == 412
        assert r.headers["content-type"].startswith("application/problem+json")
        assert v2_etag in r.json()["detail"]
        r = await http.delete("/api/workflows/flow", headers={**ADMIN, "If-Match": v1_etag})
        assert r.status_code == 412

        def serves(v: int) -> bool:
            card = client.registry.get("flow")
            return bool(card and card.workflow_definition and card.workflow_definition["nodes"][0]["input"]["v"] == v)

        await eventually(lambda: serves(2), timeout=1, what="the executor to serve v2")
        second = await within(client.send("flow", make_message(data={})), 10, "a run of v2")
        assert second.output() == {"v": 2}
        gate.release.set()
        assert (await within(first.result(), 10, "the v1 run")).output() == {"v": 1}
        for run, version in ((first.task_id, 1), (second.id, 2)):
            r = await http.get(f"/api/executions/{run}", headers=READER)
            assert r.json()["version"] == version, "an execution records the stored version it ran"

        r = await http.post("/api/workflows/flow/versions/1/restore", headers={**ADMIN, "If-Match": v2_etag})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 3
        v1 = (await http.get("/api/workflows/flow?version=1", headers=READER)).json()
        v3 = (await http.get("/api/workflows/flow", headers=READER)).json()
        assert v3["version"] == 3
        assert v3["definition"] == v1["definition"]
        assert v3["message"] == "restore of version 1"
        versions = (await http.get("/api/workflows/flow/versions", headers=READER)).json()
        assert [(v["version"], v["author"], v["message"]) for v in versions] == [
            (1, "admin", "first"),
            (2, "admin", None),
            (3, "admin", "restore of version 1"),
        ]
        assert versions[0]["digest"] == versions[2]["digest"] != versions[1]["digest"]
        await eventually(lambda: serves(1), timeout=1, what="the executor to serve the restored v1")
        third = await within(client.send("flow", make_message(data={})), 10, "a run of v3")
        assert third.output() == {"v": 1}


async def test_delete_and_disable_stop_new_calls(api: Api, client: Client) -> None:
    """Disable and delete take the card away (AGENT_NOT_FOUND); enable brings it back; the history stays."""
    url = api.url
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        await http.post("/api/workflows", content=flow(1), headers={**ADMIN, **YAML})
        await client.registry.wait_for("flow", 5)
        r = await http.post("/api/workflows/flow/disable", headers=ADMIN)
        assert r.status_code == 200
        assert r.json()["enabled"] is False
        await eventually(lambda: client.registry.get("flow") is None, timeout=2, what="the card of a disabled one")
        r = await http.post("/api/workflows/flow/enable", headers=ADMIN)
        assert r.json()["enabled"] is True
        await within(client.registry.wait_for("flow", 5), 1.0, "the card of the enabled workflow")

        r = await http.delete("/api/workflows/flow", headers=ADMIN)
        assert r.status_code == 204
        await eventually(lambda: client.registry.get("flow") is None, timeout=2, what="the deleted card to go")
        assert not any("flow" in ex.served for ex in api.executors)
        with pytest.raises(TransportError) as failure:
            await client.send("flow", make_message(data={}), timeout=5)
        assert failure.value.reason == codes.AGENT_NOT_FOUND
        assert (await http.get("/api/workflows/flow", headers=READER)).status_code == 404
        assert (await http.get("/api/workflows", headers=READER)).json() == []

        r = await http.post("/api/workflows", content=flow(7), headers={**ADMIN, **YAML})
        assert r.json()["version"] == 2  # the history was kept: numbering continues
        task = await within(client.send("flow", make_message(data={})), 10, "a run of the re-created workflow")
        assert task.output() == {"v": 7}

        assert (await http.delete("/api/workflows/flow?purge=true", headers=ADMIN)).status_code == 204
        assert (await http.delete("/api/workflows/flow?purge=true", headers=ADMIN)).status_code == 404
        r = await http.post("/api/workflows", content=flow(8), headers={**ADMIN, **YAML})
        assert r.json()["version"] == 1  # purged: a new history


SIMPLE = {
    "id": "two-agents",
    "name": "Two agents",
    "nodes": [
        {"id": "a1", "type": "agent", "config": {"agentId": "gate"}},
        {"id": "a2", "type": "agent", "config": {"agentId": "gate"}},
    ],
    "edges": [{"id": "e1", "from": "a1", "to": "a2"}],
    "maxRounds": 1,
}


async def test_seed_formats_round_trip_unchanged(api: Api, client: Client) -> None:
    """Seed 000's 2nChat graph JSON (its developer-chosen id kept) and a seed-003 simple workflow come back as sent."""
    url = api.url
    chat = json.loads((REPO / "workflows" / "2nchat.json").read_text())
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        for document, workflow_id, fmt in ((chat, "2nChat", "graph"), (SIMPLE, "two-agents", "simple")):
            r = await http.post("/api/workflows", json=document, headers=ADMIN)
            assert r.status_code == 201, r.text
            assert r.json()["id"] == workflow_id
            got = (await http.get(f"/api/workflows/{workflow_id}", headers=READER)).json()
            assert got["definition"] == document
            assert json.dumps(got["definition"]) == json.dumps(document)  # key order too
            assert got["format"] == fmt
        warnings = r.json()["warnings"]
        assert warnings == []
        await client.registry.wait_for("two-agents", 5)
        task = await within(client.send("two-agents", make_message(data={"v": 5})), 10, "the simple workflow")
        assert task.status.state == TaskState.COMPLETED
        assert task.output() == {"v": 5}


BAD = {
    "cycle": (
        "name: bad\nnodes:\n  - {id: a, type: agent, agent_name: gate, depends_on: [b]}\n"
        "  - {id: b, type: agent, agent_name: gate, depends_on: [a]}\n",
        "nodes[",
    ),
    "unknown field": ("name: bad\nnodes:\n  - {id: a, type: agent, agent_name: gate, retires: 3}\n", "nodes[a]"),
    "bad template": (
        'name: bad\nnodes:\n  - {id: a, type: agent, agent_name: gate, input: {x: "{{nope.output"}}\n',
        "nodes[a].input",
    ),
    "bad condition": (
        "name: bad\nnodes:\n  - {id: a, type: agent, agent_name: gate}\n"
        '  - {id: b, type: agent, agent_name: gate, depends_on: [a], when: "{{a.output}} ==="}\n',
        "nodes[b].when",
    ),
    "wrong format": ("- just\n- a list\n", ""),
    "no workflow": ("name: bad\nsteps: []\n", ""),
    "yaml error": ("name: [unclosed\n", ""),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_invalid_definitions_are_422_with_paths(api: Api, case: str) -> None:
    """Every invalid definition is refused with 422 and errors that say where; nothing is stored."""
    url = api.url
    text, path = BAD[case]
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/workflows", content=text, headers={**ADMIN, **YAML})
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        errors = r.json()["errors"]
        assert errors
        assert all({"path", "node", "field", "message", "suggestion"} <= set(e) for e in errors)
        assert any(e["path"].startswith(path) for e in errors), errors
        assert (await http.get("/api/workflows", headers=READER)).json() == []


async def test_errors_name_node_field_and_suggestion(api: Api) -> None:
    """An unknown field names its node and field and suggests the closest one; every error comes at once."""
    url = api.url
    text = (
        "name: bad\nnodes:\n  - {id: a, type: agent, agent_name: gate, timout: 3}\n"
        "  - {id: b, type: agent, agent_name: gate, inptu: {}}\n"
    )
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/workflows", content=text, headers={**ADMIN, **YAML})
    errors = r.json()["errors"]
    unknown = next(e for e in errors if e["node"] == "a")
    assert unknown == {
        "path": "nodes[a].timout",
        "node": "a",
        "field": "timout",
        "message": "unknown field",
        "suggestion": "timeout",
    }
    assert any(e["path"] == "nodes[b].inptu" and e["suggestion"] == "input" for e in errors)


async def test_auth_scope_not_found_size_and_id_mismatch(api: Api) -> None:
    """401 without a key, 403 for a read-only key writing, 404 for unknown ids, 413, 415, 409 and a path/id mismatch."""
    url = api.url
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        assert (await http.get("/api/workflows")).status_code == 401
        r = await http.post("/api/workflows", content=flow(1), headers={**READER, **YAML})
        assert r.status_code == 403
        assert r.json()["title"] == "forbidden"
        for method, path in (
            ("GET", "/api/workflows/ghost"),
            ("GET", "/api/workflows/ghost/versions"),
            ("DELETE", "/api/workflows/ghost"),
            ("POST", "/api/workflows/ghost/versions/1/restore"),
            ("POST", "/api/workflows/ghost/enable"),
        ):
            r = await http.request(method, path, headers=ADMIN)
            assert r.status_code == 404, (method, path, r.text)
        big = flow(1) + "# " + "x" * 20000 + "\n"
        assert (await http.post("/api/workflows", content=big, headers={**ADMIN, **YAML})).status_code == 413
        r = await http.post("/api/workflows", content=b"name: x", headers={**ADMIN, "Content-Type": "text/plain"})
        assert r.status_code == 415
        assert (await http.post("/api/workflows", content=flow(1), headers={**ADMIN, **YAML})).status_code == 201
        assert (await http.get("/api/workflows/flow?version=9", headers=READER)).status_code == 404
        assert (await http.post("/api/workflows", content=flow(1), headers={**ADMIN, **YAML})).status_code == 409
        r = await http.put("/api/workflows/other", content=flow(1), headers={**ADMIN, **YAML})
        assert r.status_code == 422
        assert r.json()["errors"][0]["path"] == "name"
        r = await http.put("/api/workflows/made", content=flow(1, name="made"), headers={**ADMIN, **YAML})
        assert r.status_code == 201


async def test_openapi_lists_the_definition_routes(api: Api) -> None:
    """The schema at /openapi.json documents every definitions route with its response model."""
    url = api.url
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        schema = (await http.get("/openapi.json")).json()
    paths = schema["paths"]
    assert set(paths["/api/workflows"]) == {"get", "post"}
    assert set(paths["/api/workflows/{workflow_id}"]) == {"get", "put", "delete"}
    assert "post" in paths["/api/workflows/{workflow_id}/versions/{version}/restore"]
    assert "get" in paths["/api/workflows/{workflow_id}/versions"]
    assert "post" in paths["/api/workflows/{workflow_id}/enable"]
    assert "application/yaml" in paths["/api/workflows"]["post"]["requestBody"]["content"]
    assert {"WriteResult", "WorkflowSummary", "WorkflowDetail", "VersionInfo"} <= set(schema["components"]["schemas"])
    assert set(paths["/api/llm-agents/{workflow_id}"]) == {"get", "put", "delete"}
    created = paths["/api/workflows"]["post"]["responses"]
    assert created["201"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/WriteResult"}
    assert {"401", "403", "409", "413", "415", "422"} <= set(created)


async def test_a_stored_workflow_wins_over_a_folder_file(
    agent_host: Any, executor: Any, gateway: Any, client: Client
) -> None:
    """An executor serving its folder (the library default) serves the stored version of the same name instead;
    deleting the stored one puts the file's back."""
    await agent_host("gate", Gate())
    await executor({"flow": flow(1)})
    url = await gateway()
    assert (await client.send("flow", make_message(data={}), timeout=10)).output() == {"v": 1}
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/workflows", content=flow(2), headers=YAML)  # no keys: loopback, no auth
        assert r.status_code == 201, r.text

        def serves(v: int) -> bool:
            card = client.registry.get("flow")
            return bool(card and card.workflow_definition and card.workflow_definition["nodes"][0]["input"]["v"] == v)

        await eventually(lambda: serves(2), timeout=1, what="the stored version to be served")
        assert (await client.send("flow", make_message(data={}), timeout=10)).output() == {"v": 2}
        assert (await http.delete("/api/workflows/flow")).status_code == 204
        await eventually(lambda: serves(1), timeout=1, what="the folder's version to be served again")
        assert (await client.send("flow", make_message(data={}), timeout=10)).output() == {"v": 1}
