"""The executions half of the management API over real HTTP: execute, list and page, nodes, cancel, resume,
retry, schedules, and precise errors (a real gateway, executor and agents on real NATS + Valkey)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from a2amesh.config import Settings
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.manage.executions import Executions
from a2amesh.schedules import ScheduleState, parse_schedule
from a2amesh.store.executions import ExecutionStore, Listed
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis
from a2amesh.store.schedules import ScheduleStore
from tests.support.waiting import eventually, within

KEYS = "admin=adm1n,reader=r3ad#read,runner=ru4n#run|read,reviewer=rev1ew#review|read,echoonly=ech0@other#run"
ADMIN = {"Authorization": "Bearer adm1n"}

FLOW = """
name: flow
nodes:
  - {id: a, type: agent, agent_name: double, input: "{{workflow.input}}"}
  - {id: b, type: agent, agent_name: flaky, depends_on: [a], input: "{{a.output}}"}
output_mapping: {result: "{{b.output.n}}"}
"""

PARENT = """
name: parent
nodes:
  - {id: sub, type: workflow, workflow_name: child, input: "{{workflow.input}}"}
output_mapping: {result: "{{sub.output.result}}"}
"""

CHILD = """
name: child
nodes:
  - {id: d, type: agent, agent_name: double, input: "{{workflow.input}}"}
output_mapping: {result: "{{d.output.n}}"}
"""

SLOW = """
name: slow
nodes:
  - {id: wait, type: agent, agent_name: waiter, input: "{{workflow.input}}"}
"""

REFUND = """
name: refund
nodes:
  - {id: propose, type: agent, agent_name: double, input: {n: "{{workflow.input.n}}"}}
  - id: review
    type: human_review
    depends_on: [propose]
    prompt: "Refund {{propose.output.n}}?"
    data: "{{propose.output}}"
    edit_schema: {type: object, properties: {n: {type: number, maximum: 100}}, required: [n]}
  - {id: pay, type: agent, agent_name: double, depends_on: [review], input: "{{review.output}}"}
output_mapping: {paid: "{{pay.output.n}}"}
"""


class Counter:
    """An agent that doubles ``n`` and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.calls += 1
        return {"n": input["n"] * 2}


class Flaky:
    """Fails while ``failing`` is set; passes ``n`` on otherwise."""

    def __init__(self) -> None:
        self.failing = False

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("flaky is down")
        return {"n": input["n"] + 1}


class Waiter:
    """Waits until released (or cancelled)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.started.set()
        await self.release.wait()
        return {"done": True}


class Mesh:
    def __init__(self, http: httpx.AsyncClient, double: Counter, flaky: Flaky, waiter: Waiter) -> None:
        self.http = http
        self.double = double
        self.flaky = flaky
        self.waiter = waiter


@pytest.fixture
async def mesh(agent_host: Any, executor: Any, gateway: Any, client: Any) -> AsyncIterator[Mesh]:
    double, flaky, waiter = Counter(), Flaky(), Waiter()
    await agent_host("double", double)
    await agent_host("flaky", flaky, max_retries=0)
    await agent_host("waiter", waiter)
    await executor({"flow": FLOW, "parent": PARENT, "child": CHILD, "slow": SLOW, "refund": REFUND})
    for name in ("flow", "parent", "child", "slow", "refund"):
        await client.registry.wait_for(name, 5)
    url = await gateway(api_keys=parse_api_keys(KEYS))
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as http:
        yield Mesh(http, double, flaky, waiter)
    waiter.release.set()


async def _status(http: httpx.AsyncClient, execution_id: str) -> str:
    r = await http.get(f"/api/executions/{execution_id}")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


async def test_execute_with_and_without_wait_then_read_it_and_its_nodes(mesh: Mesh) -> None:
    """execute answers 200 with the finished execution (wait) or 202 with its id; detail and nodes read back."""
    http = mesh.http
    r = await http.post("/api/workflows/flow/execute", params={"wait": "true"}, json={"input": {"n": 2}})
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["status"] == "completed"
    assert done["output"] == {"result": 5}
    assert done["workflow"] == "flow"
    assert done["input"] == {"n": 2}
    assert done["error"] is None
    assert done["started_at"]
    assert done["finished_at"]
    assert done["duration_ms"] >= 0
    assert [e["event"] for e in done["trail"]][0] == "execution.started"
    assert done["trail"][-1]["event"] == "execution.completed"

    r = await http.post("/api/workflows/flow/execute", json={"input": {"n": 10}})
    assert r.status_code == 202, r.text
    started = r.json()["execution_id"]
    assert await eventually(lambda: _is(http, started, "completed"), timeout=10, what="the 202 run to complete")
    detail = (await http.get(f"/api/executions/{started}")).json()
    assert detail["output"] == {"result": 21}

    nodes = (await http.get(f"/api/executions/{started}/nodes")).json()
    assert nodes["next_cursor"] is None
    by_id = {n["node_id"]: n for n in nodes["items"]}
    assert [n["node_id"] for n in nodes["items"]] == ["a", "b"]
    a = by_id["a"]
    assert a["status"] == "completed"
    assert a["agent"] == "double"
    assert a["input"] == {"n": 10}
    assert a["output"] == {"n": 20}
    assert a["task_id"]
    assert a["sub_execution_id"] is None
    assert a["duration_ms"] is not None
    assert a["duration_ms"] >= 0
    assert [(t["attempt"], t["status"]) for t in a["attempts"]] == [(1, "completed")]


async def _is(http: httpx.AsyncClient, execution_id: str, status: str) -> bool:
    return await _status(http, execution_id) == status


async def test_sub_workflow_links_parent_and_children(mesh: Mesh) -> None:
    """A workflow node's execution names its parent, the parent lists it, and the parent filter finds it."""
    http = mesh.http
    r = await http.post("/api/workflows/parent/execute", params={"wait": "true"}, json={"input": {"n": 4}})
    assert r.status_code == 200, r.text
    parent = r.json()
    assert parent["output"] == {"result": 8}
    assert len(parent["children"]) == 1
    child_id = parent["children"][0]
    child = (await http.get(f"/api/executions/{child_id}")).json()
    assert child["workflow"] == "child"
    assert child["parent_id"] == parent["id"]
    nodes = (await http.get(f"/api/executions/{parent['id']}/nodes")).json()["items"]
    assert nodes[0]["sub_execution_id"] == child_id
    page = (await http.get("/api/executions", params={"parent": parent["id"]})).json()
    assert [e["id"] for e in page["items"]] == [child_id]


async def test_cancel_a_running_execution(mesh: Mesh) -> None:
    """cancel stops a running execution (cancelled); cancelling it again is a 409."""
    http = mesh.http
    r = await http.post("/api/workflows/slow/execute", json={"input": {}})
    assert r.status_code == 202, r.text
    execution_id = r.json()["execution_id"]
    await within(mesh.waiter.started.wait(), 10, "the slow node to start")
    r = await http.post(f"/api/executions/{execution_id}/cancel")
    assert r.status_code == 200, r.text
    assert await eventually(lambda: _is(http, execution_id, "cancelled"), timeout=10, what="the cancelled status")
    r = await http.post(f"/api/executions/{execution_id}/cancel")
    assert r.status_code == 409, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "cancelled" in r.json()["detail"]


async def _paused_refund(http: httpx.AsyncClient, n: int) -> dict[str, Any]:
    r = await http.post("/api/workflows/refund/execute", params={"wait": "true"}, json={"input": {"n": n}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "paused", body
    return dict(body)


async def test_resume_a_review_approve_bad_edit_edit_and_reject(mesh: Mesh) -> None:
    """A paused review: an edit failing edit_schema is 422 and it stays paused; approve / edit / reject apply."""
    http = mesh.http
    paused = await _paused_refund(http, 15)
    assert paused["review"]["prompt"] == "Refund 30?"
    assert paused["review"]["data"] == {"n": 30}
    execution_id = paused["id"]

    r = await http.post(f"/api/executions/{execution_id}/resume", json={"decision": "edit", "data": {"n": 500}})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["errors"][0]["path"] == "body.data"
    assert "500 is greater than the maximum of 100" in problem["errors"][0]["message"]
    assert await _status(http, execution_id) == "paused"

    r = await http.post(f"/api/executions/{execution_id}/resume", params={"wait": "true"}, json={"decision": "approve"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"
    assert r.json()["output"] == {"paid": 60}
    r = await http.post(f"/api/executions/{execution_id}/resume", json={"decision": "approve"})
    assert r.status_code == 409, r.text
    assert "completed, not paused" in r.json()["detail"]

    edited = (await _paused_refund(http, 5))["id"]
    r = await http.post(
        f"/api/executions/{edited}/resume", params={"wait": "true"}, json={"decision": "edit", "data": {"n": 7}}
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == {"paid": 14}

    rejected = (await _paused_refund(http, 5))["id"]
    r = await http.post(f"/api/executions/{rejected}/resume", json={"decision": "reject", "reason": "not eligible"})
    assert r.status_code == 202, r.text
    assert r.json() == {"execution_id": rejected}
    assert await eventually(lambda: _is(http, rejected, "failed"), timeout=10, what="the rejected run to fail")
    assert "not eligible" in (await http.get(f"/api/executions/{rejected}")).json()["error"]


async def test_paused_executions_have_their_own_status_index(mesh: Mesh, redis: Redis, settings: Settings) -> None:
    """A pause moves the execution to the ``paused`` index (so ?status=paused reads it without a scan), a
    resume back to ``running``, the finish to ``completed``; a cancel of a paused one leaves ``paused``."""
    http = mesh.http
    keys = Keys(settings.namespace)

    async def indexed(execution_id: str) -> list[str]:
        found = []
        for status in ("running", "paused", "completed", "canceled"):
            if (
                await redis.zscore(keys.executions_by_status(status, keys.shard(execution_id)), execution_id)
                is not None
            ):
                found.append(status)
        return found

    approved = (await _paused_refund(http, 2))["id"]
    cancelled = (await _paused_refund(http, 3))["id"]
    assert await indexed(approved) == ["paused"]
    reader = Executions(ExecutionStore(redis, keys, retention=60, lease_ttl=5))
    assert (await reader.counts())["paused"] == 2
    assert (await reader.counts(since=datetime.now(UTC) + timedelta(minutes=1)))["paused"] == 0
    page = (await http.get("/api/executions", params={"status": "paused", "limit": 1})).json()
    assert [e["id"] for e in page["items"]] == [cancelled]
    assert page["next_cursor"] is not None
    page = (await http.get("/api/executions", params={"status": "paused", "cursor": page["next_cursor"]})).json()
    assert [e["id"] for e in page["items"]] == [approved]
    running = (await http.get("/api/executions", params={"status": "running"})).json()
    assert {approved, cancelled}.isdisjoint(e["id"] for e in running["items"])

    r = await http.post(f"/api/executions/{approved}/resume", params={"wait": "true"}, json={"decision": "approve"})
    assert r.status_code == 200, r.text

    async def moved(execution_id: str, where: list[str]) -> bool:
        return await indexed(execution_id) == where

    assert await eventually(lambda: moved(approved, ["completed"]), timeout=10, what="the completed index")
    r = await http.post(f"/api/executions/{cancelled}/cancel")
    assert r.status_code == 200, r.text
    assert await eventually(lambda: _is(http, cancelled, "cancelled"), timeout=10, what="the cancelled status")
    assert await eventually(lambda: moved(cancelled, ["canceled"]), timeout=10, what="it to leave the paused index")
    assert (await http.get("/api/executions", params={"status": "paused"})).json()["items"] == []
    counts = await reader.counts()
    assert (counts["paused"], counts["completed"], counts["cancelled"]) == (0, 1, 1)


async def test_retry_from_a_node_reuses_what_came_before(mesh: Mesh) -> None:
    """retry from_node runs that node and what follows again, reusing the outputs before it."""
    http = mesh.http
    mesh.flaky.failing = True
    r = await http.post("/api/workflows/flow/execute", params={"wait": "true"}, json={"input": {"n": 3}})
    failed = r.json()
    assert failed["status"] == "failed", failed
    assert "flaky is down" in failed["error"]
    calls = mesh.double.calls
    r = await http.post(f"/api/executions/{failed['id']}/retry", json={"from_node": "nope"})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["path"] == "body.from_node"
    assert "no node 'nope'" in r.json()["detail"]

    mesh.flaky.failing = False
    r = await http.post(f"/api/executions/{failed['id']}/retry", params={"wait": "true"}, json={"from_node": "b"})
    assert r.status_code == 200, r.text
    again = r.json()
    assert again["status"] == "completed"
    assert again["output"] == {"result": 7}
    assert again["reused_from"] == failed["id"]
    assert again["id"] != failed["id"]
    assert mesh.double.calls == calls  # node a was not run again

    r = await http.post("/api/workflows/slow/execute", json={"input": {}})
    running = r.json()["execution_id"]
    r = await http.post(f"/api/executions/{running}/retry", json={})
    assert r.status_code == 409, r.text


# --- listing -----------------------------------------------------------------------------------------------


async def _store_one(store: ExecutionStore, execution_id: str, workflow: str, status: str, **extra: str) -> None:
    """Write an execution record the way the executor does (created with its listing entries)."""
    fields = {"workflow": workflow, "status": "running", "task_id": execution_id, "input": '{"k": 1}'}
    parent = extra.get("parent", "")
    if parent:
        fields["reply"] = json.dumps({"node_request": {"execution_id": parent}})
    created = await store.create(
        execution_id,
        owner="test",
        state_json="{}",
        fields=fields,
        nodes={},
        events=[],
        timers={},
        listed=Listed(workflow, "running", parent),
    )
    assert created.created
    if status != "running":
        await store.redis.hset(store.keys.execution(execution_id), "status", status)
        await store.index_finished(execution_id, status)


async def _all_pages(http: httpx.AsyncClient, params: dict[str, Any], on_page: Any = None) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        r = await http.get("/api/executions", params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        seen += [e["id"] for e in body["items"]]
        if on_page is not None:
            await on_page()
        cursor = body["next_cursor"]
        if cursor is None:
            return seen


@pytest.fixture
async def listing(gateway: Any, redis: Redis, settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    store = ExecutionStore(redis, Keys(settings.namespace), retention=3600, lease_ttl=5)
    url = await gateway(api_keys=parse_api_keys(KEYS))
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as http:
        yield http, store
    await store.aclose()


async def test_list_pages_stay_stable_while_500_executions_arrive(listing: tuple[httpx.AsyncClient, Any]) -> None:
    """Paging while 500 new executions are written: no duplicates, and every execution that existed is seen."""
    http, store = listing
    existing = []
    for i in range(240):
        execution_id = f"old-{i:04d}"
        await _store_one(store, execution_id, "wa" if i % 2 else "wb", ["completed", "failed", "running"][i % 3])
        existing.append(execution_id)

    async def arrive() -> None:
        for i in range(500):
            await _store_one(store, f"new-{i:04d}", "wa" if i % 2 else "wb", "completed")
            if i % 25 == 0:
                await asyncio.sleep(0)

    writer = asyncio.create_task(arrive())
    pages = 0

    async def paced() -> None:
        nonlocal pages
        pages += 1
        await asyncio.sleep(0.01)  # let the writer interleave between pages

    try:
        seen = await _all_pages(http, {"limit": 7}, paced)
    finally:
        await within(writer, 60, "the 500 new executions to be written")
    assert len(seen) == len(set(seen)), "an execution was listed twice"
    assert set(existing) <= set(seen), f"missed: {sorted(set(existing) - set(seen))[:5]}"
    assert pages > 30

    # filters, each paged to the end
    wa = await _all_pages(http, {"workflow": "wa", "limit": 50})
    assert len(wa) == 370
    assert len(set(wa)) == 370
    failed = await _all_pages(http, {"status": "failed", "limit": 13})
    assert sorted(failed) == sorted(e for i, e in enumerate(existing) if i % 3 == 1)
    both = await _all_pages(http, {"status": "running", "workflow": "wb", "limit": 5})
    assert sorted(both) == sorted(e for i, e in enumerate(existing) if i % 3 == 2 and i % 2 == 0)
    newest = (await http.get("/api/executions", params={"limit": 3})).json()["items"]
    assert [e["id"] for e in newest] == ["new-0499", "new-0498", "new-0497"]
    assert newest[0]["status"] == "completed"
    assert newest[0]["input"] == {"k": 1}


async def test_list_by_time_range_and_parent(listing: tuple[httpx.AsyncClient, Any]) -> None:
    """since/until bound the start time; parent lists the sub-executions of one execution."""
    http, store = listing
    await _store_one(store, "p-1", "top", "completed")
    for i in range(3):
        await _store_one(store, f"c-{i}", "sub", "completed", parent="p-1")
    first = (await http.get("/api/executions/c-0")).json()["started_at"]
    last = (await http.get("/api/executions/c-2")).json()["started_at"]
    page = (await http.get("/api/executions", params={"parent": "p-1"})).json()
    assert sorted(e["id"] for e in page["items"]) == ["c-0", "c-1", "c-2"]
    assert (await http.get("/api/executions/p-1")).json()["children"] == ["c-0", "c-1", "c-2"]
    later = datetime.now(UTC) + timedelta(seconds=5)
    page = (await http.get("/api/executions", params={"since": later.isoformat()})).json()
    assert page == {"items": [], "next_cursor": None}
    page = (await http.get("/api/executions", params={"until": first, "workflow": "sub"})).json()
    assert "c-0" in [e["id"] for e in page["items"]]
    assert all(e["started_at"] <= first for e in page["items"])
    page = (await http.get("/api/executions", params={"since": last})).json()
    assert "c-2" in [e["id"] for e in page["items"]]
    assert all(e["started_at"] >= last for e in page["items"])


# --- schedules ---------------------------------------------------------------------------------------------


async def test_schedules_list_pause_resume_delete(listing: tuple[httpx.AsyncClient, Any], redis: Redis) -> None:
    """Schedules list with next fire times, pause and resume; delete removes one nobody serves (404 after)."""
    http, store = listing
    schedules = ScheduleStore(redis, store.keys)
    state = ScheduleState.new("nightly", parse_schedule("interval", "daily@02:00"), now=datetime.now(UTC))
    assert await schedules.write("nightly/main", None, state)
    listed = (await http.get("/api/schedules")).json()["items"]
    assert [(s["id"], s["paused"]) for s in listed] == [("nightly/main", False)]
    assert listed[0]["next_fire"].endswith("02:00:00Z") or "T02:00:00" in listed[0]["next_fire"]
    r = await http.post("/api/schedules/nightly/main/pause")
    assert r.status_code == 200
    assert r.json()["paused"] is True
    assert r.json()["next_fire"] is None
    r = await http.post("/api/schedules/nightly/main/resume")
    assert r.status_code == 200
    assert r.json()["paused"] is False
    assert r.json()["next_fire"]
    assert (await http.post("/api/schedules/nightly/other/pause")).status_code == 404
    r = await http.delete("/api/schedules/nightly/main")
    assert r.status_code == 204, r.text
    assert (await http.get("/api/schedules")).json()["items"] == []
    assert (await http.delete("/api/schedules/nightly/main")).status_code == 404


# --- bad input ---------------------------------------------------------------------------------------------


async def test_scopes_unknown_ids_invalid_bodies_and_cursors(listing: tuple[httpx.AsyncClient, Any]) -> None:
    """Wrong scope → 403, no key → 401, unknown ids → 404, invalid bodies and cursors → 422 naming the field."""
    http, store = listing
    await _store_one(store, "x-1", "wa", "completed")

    async def call(method: str, path: str, key: str | None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {"Authorization": ""}
        return await http.request(method, path, headers=headers, **kw)

    assert (await call("GET", "/api/executions", None)).status_code == 401
    r = await call("POST", "/api/workflows/wa/execute", "r3ad", json={"input": {}})
    assert r.status_code == 403
    assert "run" in r.json()["detail"]
    assert (await call("GET", "/api/executions/x-1", "r3ad")).status_code == 200
    r = await call("POST", "/api/executions/x-1/resume", "ru4n", json={"decision": "approve"})
    assert r.status_code == 403
    assert "review" in r.json()["detail"]
    r = await call("POST", "/api/executions/x-1/retry", "rev1ew", json={})
    assert r.status_code == 403
    r = await call("POST", "/api/executions/x-1/cancel", "ech0")  # may call 'other' only
    assert r.status_code == 403
    assert "'wa'" in r.json()["detail"]
    r = await call("DELETE", "/api/schedules/a/main", "ru4n")
    assert r.status_code == 403
    assert "admin" in r.json()["detail"]

    for method, path in [
        ("GET", "/api/executions/nope"),
        ("GET", "/api/executions/nope/nodes"),
        ("POST", "/api/executions/nope/cancel"),
        ("POST", "/api/executions/nope/retry"),
    ]:
        r = await http.request(method, path)
        assert r.status_code == 404, (path, r.text)
        assert r.json()["detail"] == "no execution 'nope'"
    r = await http.post("/api/executions/nope/resume", json={"decision": "approve"})
    assert r.status_code == 404
    r = await http.post("/api/workflows/ghost/execute", json={"input": {}})
    assert r.status_code == 404
    assert r.json()["detail"] == "no workflow 'ghost'"

    r = await http.post("/api/executions/x-1/resume", json={"decision": "maybe"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "body.decision"
    r = await http.post(
        "/api/executions/x-1/resume", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"].startswith("body")
    r = await http.post("/api/workflows/bad.name/execute", json={"input": {}})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "path.workflow_id"
    r = await http.get("/api/executions", params={"cursor": "garbage!"})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["path"] == "query.cursor"
    r = await http.get("/api/executions", params={"cursor": "Z2FyYmFnZQ"})  # base64url of "garbage"
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [
        {
            "path": "query.cursor",
            "message": "not a cursor issued by this API (pass next_cursor of the previous page unchanged)",
        }
    ]
    r = await http.get("/api/executions", params={"limit": 0, "status": "sleeping"})
    assert r.status_code == 422
    assert {e["path"] for e in r.json()["errors"]} == {"query.limit", "query.status"}
    r = await http.get("/api/executions", params={"since": "yesterday"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["path"] == "query.since"
    assert json.loads((await http.get("/api/executions/x-1")).text)["status"] == "completed"


BRANCHES = """
name: multi
nodes:
  - {id: m, type: agent, config: {agentId: double}}
edges: []
branches:
  - id: once
    nodes: [{id: o, type: agent, config: {agentId: double}}]
    edges: []
"""


async def test_execute_one_branch_of_a_graph_workflow(
    agent_host: Any, executor: Any, gateway: Any, client: Any
) -> None:
    """execute with a branch runs that branch's graph alone; an unknown branch, or a branch of a DAG, is a 422."""
    await agent_host("double", Counter())
    await executor({"multi": BRANCHES, "flow": FLOW})
    await client.registry.wait_for("multi", 5)
    await client.registry.wait_for("flow", 5)
    url = await gateway(api_keys=parse_api_keys(KEYS))
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as http:
        body = {"input": {"text": "hi"}, "branch": "once"}
        r = await http.post("/api/workflows/multi/execute", params={"wait": "true"}, json=body)
        assert r.status_code == 200, r.text
        nodes = (await http.get(f"/api/executions/{r.json()['id']}/nodes")).json()["items"]
        assert [n["node_id"] for n in nodes] == ["o"]
        r = await http.post("/api/workflows/multi/execute", json={"input": {}, "branch": "nope"})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["path"] == "body.branch"
        assert "nope" in r.json()["detail"]
        r = await http.post("/api/workflows/flow/execute", json={"input": {"n": 1}, "branch": "once"})
        assert r.status_code == 422, r.text
        assert "has no branches" in r.json()["detail"]


async def test_oversized_bodies_are_413_on_every_api_route(gateway: Any) -> None:
    """A body above the gateway's limit is a 413 problem on any route that takes one, before the route runs."""
    url = await gateway()
    big = b'{"input": "' + b"x" * (800 * 1024) + b'"}'
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        for path in ("/api/workflows/wf/execute", "/api/executions/nope/resume", "/api/executions/nope/retry"):
            r = await http.post(path, content=big, headers={"Content-Type": "application/json"})
            assert r.status_code == 413, (path, r.status_code, r.text[:200])
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "limit" in r.json()["detail"]
        assert (await http.get("/healthz")).status_code == 200
