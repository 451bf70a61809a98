"""The management API refuses what it cannot carry out as asked, before anything runs: unknown fields, an input
not wrapped in ``{"input": …}``, an input the workflow's schema refuses (no execution is created); and an
execution's two ends are on one clock (issue 37)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from a2amesh.client import Client, make_message
from a2amesh.gateway.settings import parse_api_keys

ADMIN = {"Authorization": "Bearer adm1n"}

TYPED = """
name: typed
input_schema:
  type: object
  required: [n]
  properties: {n: {type: integer, maximum: 10}, tag: {type: string}}
nodes:
  - {id: a, type: agent, agent_name: strict_count, input: "{{workflow.input}}"}
"""


class Count:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.calls += 1
        return {"n": input["n"]}


@pytest.fixture
async def api(
    agent_host: Any, executor: Any, gateway: Any, client: Client
) -> AsyncIterator[tuple[httpx.AsyncClient, Count]]:
    count = Count()
    await agent_host("strict_count", count)
    await executor({"typed": TYPED})
    await client.registry.wait_for("typed", 10)
    url = await gateway(api_keys=parse_api_keys("admin=adm1n"))
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as http:
        yield http, count


async def _executions(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await http.get("/api/executions", params={"workflow": "typed"})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def test_bodies_are_strict_and_bad_input_runs_nothing(api: tuple[httpx.AsyncClient, Count]) -> None:
    http, count = api
    # the input not wrapped: 422 naming both the missing wrapper and the stray field
    r = await http.post("/api/workflows/typed/execute", json={"n": 2})
    assert r.status_code == 422, r.text
    paths = {e["path"]: e["message"] for e in r.json()["errors"]}
    assert set(paths) == {"body.input", "body.n"}, paths
    assert "required" in paths["body.input"].lower()
    # an unknown top-level field beside a good input
    r = await http.post("/api/workflows/typed/execute", json={"input": {"n": 2}, "wiat": True})
    assert r.status_code == 422, r.text
    assert [e["path"] for e in r.json()["errors"]] == ["body.wiat"]
    r = await http.post("/api/executions/whatever/retry", json={"from": "a"})
    assert r.status_code == 422, r.text
    assert [e["path"] for e in r.json()["errors"]] == ["body.from"]
    r = await http.post("/api/executions/whatever/resume", json={"decision": "approve", "note": "x"})
    assert r.status_code == 422, r.text
    assert [e["path"] for e in r.json()["errors"]] == ["body.note"]

    # an input the schema refuses: 422 with every schema error, and no execution, no agent call
    r = await http.post("/api/workflows/typed/execute", json={"input": {"n": 50, "tag": 3}}, params={"wait": "true"})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert {e["path"] for e in problem["errors"]} == {"body.input.n", "body.input.tag"}, problem
    assert "50 is greater than the maximum of 10" in problem["detail"]
    r = await http.post("/api/workflows/typed/execute", json={"input": {}})
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [{"path": "body.input", "message": "'n' is a required property"}]
    assert await _executions(http) == []
    assert count.calls == 0

    r = await http.post("/api/workflows/typed/execute", json={"input": {"n": 3}}, params={"wait": "true"})
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["output"]) == ("completed", {"a": {"n": 3}})
    assert count.calls == 1


async def test_an_execution_refused_by_the_executor_never_has_a_negative_duration(
    api: tuple[httpx.AsyncClient, Count], client: Client
) -> None:
    """An A2A caller (not the API) sends a bad input: the execution fails at once, its two ends on one clock."""
    http, _ = api
    task = await client.send("typed", make_message(data={"n": "many"}))
    assert task.status.state.value == "TASK_STATE_FAILED"
    detail = (await http.get(f"/api/executions/{task.id}")).json()
    assert detail["status"] == "failed"
    assert detail["finished_at"] >= detail["started_at"], detail
    assert detail["duration_ms"] >= 0, detail
