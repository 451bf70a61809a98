"""One vocabulary over the management API: every route's JSON says the state words and RFC 3339 UTC times the
CLI says, never A2A's ``TASK_STATE_*``; the trail is flat; ids are taken by unique prefix and statuses in any
spelling, as the CLI takes them (issue 37)."""

from __future__ import annotations

from typing import Any

import httpx

from a2amesh.gateway.api.app import create_api
from tests.e2e.test_cli_vocabulary import check_vocabulary
from tests.integration.gateway.test_api_executions import Mesh, mesh  # noqa: F401  (the fixture)
from tests.support.waiting import eventually


def _api_paths() -> set[tuple[str, str]]:
    """Every (method, path template) of the management API, from its OpenAPI document."""
    app = create_api(type("Mesh", (), {"http": type("Http", (), {"max_body_bytes": 1000})()})())
    return {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}


async def _json(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    r = await http.request(method, path, **kw)
    assert r.status_code < 300, (method, path, r.status_code, r.text)
    body = r.json() if r.content else None
    check_vocabulary(body, f"{method} {path}")
    return body


async def test_every_route_speaks_one_vocabulary(mesh: Mesh) -> None:  # noqa: F811
    """Walk the routes: executions in each state, their nodes and trails, the listing by every spelling of a
    status, definitions, schedules, memory, MCP servers, remotes and the event stream."""
    http = mesh.http
    seen: set[tuple[str, str]] = set()

    async def visit(method: str, template: str, path: str, **kw: Any) -> Any:
        seen.add((method, template))
        return await _json(http, method, path, **kw)

    done = await visit(
        "POST",
        "/api/workflows/{workflow_id}/execute",
        "/api/workflows/flow/execute?wait=true",
        json={"input": {"n": 2}},
    )
    assert done["status"] == "completed"
    assert all("data" not in (e.get("data") or {}) for e in done["trail"]), "a nested data.data in the trail"
    assert done["trail"][0]["data"]["workflow"] == "flow"  # lifted from data.data
    paused = await visit(
        "POST",
        "/api/workflows/{workflow_id}/execute",
        "/api/workflows/refund/execute?wait=true",
        json={"input": {"n": 3}},
    )
    assert paused["status"] == "paused"
    nodes = await visit("GET", "/api/executions/{execution_id}/nodes", f"/api/executions/{paused['id'][:12]}/nodes")
    assert {n["node_id"]: n["status"] for n in nodes["items"]}["review"] == "paused"
    assert any(e["status"] == "paused" for e in paused["trail"])
    resumed = await visit(
        "POST",
        "/api/executions/{execution_id}/resume",
        f"/api/executions/{paused['id'][:12]}/resume?wait=true",
        json={"decision": "reject"},
    )
    assert resumed["status"] == "failed"
    retried = await visit(
        "POST", "/api/executions/{execution_id}/retry", f"/api/executions/{done['id']}/retry?wait=true", json={}
    )
    assert retried["status"] == "completed"

    started = await visit(
        "POST", "/api/workflows/{workflow_id}/execute", "/api/workflows/slow/execute", json={"input": {}}
    )
    slow = started["execution_id"]
    await eventually(mesh.waiter.started.wait, timeout=10, what="the slow run to start")
    cancelled = await visit("POST", "/api/executions/{execution_id}/cancel", f"/api/executions/{slow[:12]}/cancel")
    assert cancelled["status"] == "cancelled"
    assert cancelled["id"] == slow
    detail = await visit("GET", "/api/executions/{execution_id}", f"/api/executions/{slow[:12]}")
    assert detail["duration_ms"] >= 0
    assert any(e["status"] == "cancelled" for e in detail["trail"])

    for spelling in ("cancelled", "canceled", "TASK_STATE_CANCELED", "Cancelled"):
        page = await visit("GET", "/api/executions", "/api/executions", params={"status": spelling})
        assert [e["id"] for e in page["items"]] == [slow], spelling
    page = await visit("GET", "/api/executions", "/api/executions", params={"status": "working"})
    assert page["items"] == []
    listed = await visit("GET", "/api/executions", "/api/executions")
    assert {e["status"] for e in listed["items"]} == {"completed", "failed", "cancelled"}
    r = await http.get("/api/executions", params={"status": "sleeping"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "query.status"
    r = await http.get("/api/executions/zz-no-such")
    assert (r.status_code, r.json()["detail"]) == (404, "no execution 'zz-no-such'")

    await visit("GET", "/api/workflows", "/api/workflows")
    await visit("GET", "/api/llm-agents", "/api/llm-agents")
    await visit("GET", "/api/schedules", "/api/schedules")
    await visit("GET", "/api/memory", "/api/memory", params={"agent": "flow"})
    await visit("GET", "/api/mcp-servers", "/api/mcp-servers")
    await visit("GET", "/api/remotes", "/api/remotes")

    seen.add(("GET", "/api/events"))
    async with http.stream("GET", "/api/events", params={"execution": slow, "after": 0}) as stream:
        statuses: list[str] = []
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                import json

                event = json.loads(line[5:])
                check_vocabulary(event, "GET /api/events")
                statuses.append(event["status"])
                if event["event"] == "execution.canceled" or event["status"] == "cancelled":
                    break
    assert "cancelled" in statuses

    # every read route was walked (the writes of definitions, schedules and memory are covered by their own tests)
    reads = {(m, p) for m, p in _api_paths() if m == "GET" and "{" not in p}
    assert reads <= seen, reads - seen
