"""The management tools over the gateway's ``/mcp`` with the official ``mcp`` client: stored workflows,
executions, run records, scopes, and a stored workflow's ``mcpExport``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import codes
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from tests.support.mcp import Seen, Sleeper, mcp_http, start_mesh, text_of
from tests.support.waiting import eventually, within

KEYS = "admin=adm1n-secret,reader=r3ader-secret#read,runner=runn3r-secret#run|read"

PLUS: dict[str, Any] = {
    "name": "plus",
    "description": "Adds through the add agent",
    "input_schema": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}},
    "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}},
    "nodes": [{"id": "a", "type": "agent", "agent_name": "add", "input": {"x": "{{workflow.input.x}}", "y": 1}}],
    "output_mapping": {"total": "{{a.output.sum}}"},
}


@pytest.fixture
async def sleeper(agent_host: Any, executor: Any, client: Client) -> Sleeper:
    return await start_mesh(agent_host, executor, client)


@pytest.fixture
async def url(sleeper: Sleeper, gateway: Any) -> str:
    return str(await gateway(api_keys=parse_api_keys(KEYS)))


async def test_create_execute_get_run(url: str, client: Client) -> None:
    """create_workflow stores a workflow the executor serves; execute_workflow runs it; get_run shows the record
    with its trail; get_workflow, list_workflows and update_workflow see the stored versions."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"list_workflows", "get_workflow", "create_workflow", "update_workflow", "execute_workflow"} <= names
        assert {"list_runs", "get_run", "cancel_run", "resume_run", "list_agents", "get_agent"} <= names
        created = await mcp.call_tool("create_workflow", {"definition": PLUS, "message": "first"})
        assert not created.is_error, created.content
        assert created.structured_content is not None
        assert created.structured_content["id"] == "plus"
        assert created.structured_content["version"] == 1
        await client.registry.wait_for("plus", 10)
        ran = await within(mcp.call_tool("execute_workflow", {"workflow": "plus", "input": {"x": 4}}), 20, "plus")
        assert not ran.is_error, ran.content
        run = ran.structured_content
        assert run is not None
        assert run["status"] == "completed"
        assert run["output"] == {"total": 5}
        got = await mcp.call_tool("get_run", {"run_id": run["execution_id"]})
        assert not got.is_error, got.content
        detail = got.structured_content
        assert detail is not None
        assert detail["agent"] == "plus"
        assert detail["status"] == "completed"
        assert detail["output"] == {"total": 5}
        assert detail["execution"]["version"] == 1
        events = [e["event"] for e in detail["trail"]]
        assert "node.started" in events
        assert "node.completed" in events
        stored = await mcp.call_tool("get_workflow", {"id": "plus"})
        assert stored.structured_content is not None
        assert stored.structured_content["definition"]["nodes"][0]["agent_name"] == "add"
        assert stored.structured_content["mcpExport"] is True
        listed = await mcp.call_tool("list_workflows", {})
        assert listed.structured_content is not None
        assert [w["id"] for w in listed.structured_content["workflows"]] == ["plus"]
        yaml_text = "name: plus\nnodes:\n  - {id: a, type: agent, agent_name: add, input: {x: 10, y: 10}}\n"
        updated = await mcp.call_tool("update_workflow", {"id": "plus", "definition": yaml_text})
        assert not updated.is_error, updated.content
        assert updated.structured_content is not None
        assert updated.structured_content["version"] == 2


async def test_list_runs_filters(url: str, client: Client) -> None:
    """list_runs filters by workflow and status and pages with a cursor."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        for x in (1, 2, 3):
            done = await within(
                mcp.call_tool("execute_workflow", {"workflow": "total", "input": {"x": x, "y": 1}}), 20, "total"
            )
            assert not done.is_error, done.content
        started = await mcp.call_tool(
            "execute_workflow", {"workflow": "slow_flow", "input": {"text": "w"}, "wait": False}
        )
        assert started.structured_content is not None
        slow_id = started.structured_content["execution_id"]
        totals = await mcp.call_tool("list_runs", {"workflow": "total"})
        assert totals.structured_content is not None
        items = totals.structured_content["items"]
        assert len(items) == 3
        assert {i["workflow"] for i in items} == {"total"}
        assert [i["output"]["total"] for i in items] == [4, 3, 2], "newest first"

        async def running() -> bool:
            page = await mcp.call_tool("list_runs", {"status": "running"})
            assert page.structured_content is not None
            return [i["id"] for i in page.structured_content["items"]] == [slow_id]

        await eventually(running, timeout=10, what="slow_flow listed as running")
        first = await mcp.call_tool("list_runs", {"workflow": "total", "limit": 2})
        assert first.structured_content is not None
        assert len(first.structured_content["items"]) == 2
        cursor = first.structured_content["next_cursor"]
        rest = await mcp.call_tool("list_runs", {"workflow": "total", "limit": 2, "cursor": cursor})
        assert rest.structured_content is not None
        assert [i["output"]["total"] for i in rest.structured_content["items"]] == [2]
        bad = await mcp.call_tool("list_runs", {"status": "sleeping"})
        assert bad.is_error
        assert "status: 'sleeping' is not one of" in text_of(bad)
        canceled = await mcp.call_tool("cancel_run", {"run_id": slow_id})
        assert canceled.structured_content is not None
        assert canceled.structured_content["status"] == "cancelled"


async def test_invalid_definition_and_unknown_ids_are_tool_errors(url: str) -> None:
    """An invalid definition lists every error with its path; unknown ids are precise tool errors."""
    broken = {
        "name": "broken",
        "nodes": [
            {"id": "a", "type": "agent", "agent_name": "add", "depends_on": ["nowhere"]},
            {"id": "b", "type": "agent", "agent_name": "add", "input": "{{ghost.output}}"},
        ],
    }
    async with mcp_http(url, "adm1n-secret") as mcp:
        refused = await mcp.call_tool("create_workflow", {"definition": broken})
        assert refused.is_error
        lines = text_of(refused).splitlines()
        assert lines[0].startswith("invalid workflow definition (")
        assert lines == [
            "invalid workflow definition (2 errors):",
            "nodes[a].depends_on: unknown node 'nowhere'",
            "nodes[b].input: bad template {{ghost.output}}: unknown node 'ghost'",
        ]
        yaml_error = await mcp.call_tool("create_workflow", {"definition": "name: [unclosed"})
        assert yaml_error.is_error
        assert "YAML error at line" in text_of(yaml_error)
        missing = await mcp.call_tool("get_workflow", {"id": "ghost"})
        assert missing.is_error
        assert text_of(missing) == "workflow 'ghost' not found"
        update = await mcp.call_tool("update_workflow", {"id": "ghost", "definition": PLUS})
        assert update.is_error
        assert text_of(update) == "workflow 'ghost' not found; create it with create_workflow"
        nobody = await mcp.call_tool("execute_workflow", {"workflow": "ghost"})
        assert nobody.is_error
        assert "ghost" in text_of(nobody)
        again = await mcp.call_tool("create_workflow", {"definition": PLUS})
        assert not again.is_error
        twice = await mcp.call_tool("create_workflow", {"definition": PLUS})
        assert twice.is_error
        assert text_of(twice).startswith("workflow 'plus' already exists (version 1)")


async def test_a_read_key_cannot_create(url: str) -> None:
    """A read-only key lists and reads but is refused (403) a create before any tool runs."""
    async with mcp_http(url, "r3ader-secret") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"list_workflows", "get_workflow", "list_runs", "get_run"} <= names
        assert not names & {"create_workflow", "update_workflow", "execute_workflow"}
        listed = await mcp.call_tool("list_workflows", {})
        assert not listed.is_error
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "create_workflow", "arguments": {"definition": PLUS}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": "Bearer r3ader-secret",
    }
    async with httpx.AsyncClient(timeout=10) as http:
        denied = await http.post(f"{url}/mcp", json=call, headers=headers)
    assert denied.status_code == 403
    assert denied.json()["error"]["message"] == "API key 'reader' lacks the 'admin' scope tool 'create_workflow' needs"


HIDDEN = """
name: hidden
mcpExport: false
nodes:
  - {id: a, type: agent, agent_name: add, input: {x: 1, y: 1}}
"""


async def test_mcp_export_false_hides_a_workflow(url: str, client: Client, executor: Any) -> None:
    """A folder or stored workflow with mcpExport: false is served on the mesh but is no tool; true makes a
    stored one a tool again."""
    await executor({"hidden": HIDDEN})
    card = await client.registry.wait_for("hidden", 10)
    assert card.extension(codes.EXT_MCP) == {"export": False}
    async with mcp_http(url, "adm1n-secret") as mcp:
        assert "hidden" not in {t.name for t in (await mcp.list_tools()).tools}
        created = await mcp.call_tool("create_workflow", {"definition": {**PLUS, "mcpExport": False}})
        assert not created.is_error, created.content
        await client.registry.wait_for("plus", 10)
        assert "plus" not in {t.name for t in (await mcp.list_tools()).tools}
        agents = await mcp.call_tool("list_agents", {"type": "workflow"})
        assert agents.structured_content is not None
        assert {a["name"]: a["tool"] for a in agents.structured_content["agents"]}["plus"] is False
        ran = await within(mcp.call_tool("execute_workflow", {"workflow": "plus", "input": {"x": 1}}), 20, "plus")
        assert ran.structured_content is not None
        assert ran.structured_content["output"] == {"total": 2}
        shown = await mcp.call_tool("update_workflow", {"id": "plus", "definition": {**PLUS, "mcpExport": True}})
        assert not shown.is_error, shown.content

        async def listed() -> bool:
            return "plus" in {t.name for t in (await mcp.list_tools()).tools}

        await eventually(listed, timeout=10, what="plus to become a tool")


async def test_cancelling_execute_workflow_cancels_the_execution(
    url: str, sleeper: Sleeper, redis: Any, settings: Settings
) -> None:
    """execute_workflow reports that the execution runs; the client cancelling the request cancels it (A2A
    CancelTask): the node's agent stops and the store records it canceled."""
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    seen = Seen()
    async with mcp_http(url, "adm1n-secret") as mcp:
        call = asyncio.create_task(
            mcp.call_tool(
                "execute_workflow",
                {"workflow": "slow_flow", "input": {"text": "wait"}},
                progress_callback=seen.on_progress,
            )
        )
        await within(sleeper.started.wait(), 20, "the workflow's node to start the sleeper")

        async def running() -> bool:
            return any(m and m.endswith("of slow_flow is running") for _, m in seen.progress)

        await eventually(running, timeout=20, what="the progress saying the execution runs")
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        await within(sleeper.cancelled.wait(), 20, "the sleeper to be cancelled")

        async def canceled() -> bool:
            runs = await store.list(workflow="slow_flow")
            return len(runs) == 1 and runs[0].get("status") == "canceled"

        await eventually(canceled, timeout=20, what="the slow_flow execution to be canceled in the store")
        still = await mcp.call_tool("list_runs", {"workflow": "slow_flow"})
        assert not still.is_error, still.content
    await store.aclose()
