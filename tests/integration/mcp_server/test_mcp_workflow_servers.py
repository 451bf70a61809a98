"""Per-workflow MCP servers (seed 004 §6): ``/mcp/{workflow}`` on the gateway and ``/api/mcp-servers``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from tests.support.mcp import Sleeper, mcp_http, start_mesh, text_of
from tests.support.waiting import eventually, within

KEYS = "admin=adm1n-secret,reader=r3ader-secret#read,runner=runn3r-secret#run|read"
ADMIN = {"Authorization": "Bearer adm1n-secret"}
READER = {"Authorization": "Bearer r3ader-secret"}


def plus(agent: str) -> dict[str, Any]:
    return {
        "name": "plus",
        "description": f"Calls {agent}",
        "nodes": [{"id": "a", "type": "agent", "agent_name": agent, "input": {"x": 1, "y": 2}}],
    }


@pytest.fixture
async def sleeper(agent_host: Any, executor: Any, client: Client) -> Sleeper:
    return await start_mesh(agent_host, executor, client)


@pytest.fixture
async def url(sleeper: Sleeper, gateway: Any) -> str:
    return str(await gateway(api_keys=parse_api_keys(KEYS)))


async def tool_names(url: str, workflow: str) -> list[str]:
    async with mcp_http(url, "adm1n-secret", path=f"/mcp/{workflow}") as mcp:
        return [t.name for t in (await mcp.list_tools()).tools]


async def test_a_workflow_server_lists_the_workflow_and_its_agents(url: str) -> None:
    """/mcp/total lists total and the agent it calls, nothing else; its tools can be called; others cannot."""
    assert await tool_names(url, "total") == ["total", "add"]
    assert await tool_names(url, "refund") == ["refund"], "propose and pay opt out of MCP"
    async with mcp_http(url, "adm1n-secret", path="/mcp/total") as mcp:
        flow = await within(mcp.call_tool("total", {"x": 2, "y": 2}), 20, "total")
        assert flow.structured_content == {"total": 4}
        added = await within(mcp.call_tool("add", {"x": 1, "y": 2}), 20, "add")
        assert added.structured_content == {"sum": 3}
        other = await mcp.call_tool("refund", {"amount": 1})
        assert other.is_error
        assert text_of(other) == "unknown tool 'refund' at /mcp/total; its tools: add, total"
        management = await mcp.call_tool("list_workflows", {})
        assert management.is_error
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **ADMIN}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx.AsyncClient(timeout=10) as http:
        missing = await http.post(f"{url}/mcp/ghost", json=ping, headers=headers)
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == (
            "no MCP server for workflow 'ghost' (not live, or mcpExport: false)"
        )
        anonymous = await http.post(f"{url}/mcp/total", json=ping, headers={**headers, "Authorization": ""})
        assert anonymous.status_code == 401


async def test_a_workflow_server_follows_its_definition(url: str, client: Client) -> None:
    """Updating a stored workflow regenerates its server (tools and generated_at); mcpExport: false removes it;
    the /api/mcp-servers routes list, show and regenerate them with their scopes."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        created = await mcp.call_tool("create_workflow", {"definition": plus("add")})
        assert not created.is_error, created.content
        await client.registry.wait_for("plus", 10)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:

            async def server(expected: list[str]) -> dict[str, Any] | None:
                answer = await http.get("/api/mcp-servers/plus", headers=READER)
                if answer.status_code != 200:
                    return None
                body: dict[str, Any] = answer.json()
                return body if [t["name"] for t in body["tools"]] == expected else None

            first = await eventually(lambda: server(["plus", "add"]), timeout=10, what="the server of plus")
            assert first["path"] == "/mcp/plus"
            assert await tool_names(url, "plus") == ["plus", "add"]
            updated = await mcp.call_tool("update_workflow", {"id": "plus", "definition": plus("sleeper")})
            assert not updated.is_error, updated.content
            second = await eventually(lambda: server(["plus", "sleeper"]), timeout=10, what="plus calling sleeper")
            assert second["generated_at"] > first["generated_at"]
            assert second["fingerprint"] != first["fingerprint"]
            assert await tool_names(url, "plus") == ["plus", "sleeper"]
            listed = await http.get("/api/mcp-servers", headers=READER)
            assert listed.status_code == 200
            assert [s["id"] for s in listed.json()] == ["plus", "refund", "slow_flow", "total"]
            denied = await http.post("/api/mcp-servers/plus/regenerate", headers=READER)
            assert denied.status_code == 403
            assert denied.headers["content-type"] == "application/problem+json"
            again = await http.post("/api/mcp-servers/plus/regenerate", headers=ADMIN)
            assert again.status_code == 200
            assert again.json()["generated_at"] > second["generated_at"]
            assert again.json()["fingerprint"] == second["fingerprint"]
            unknown = await http.get("/api/mcp-servers/ghost", headers=READER)
            assert unknown.status_code == 404
            assert unknown.json()["detail"] == "no MCP server for workflow 'ghost' (not live, or mcpExport: false)"
            hidden = await mcp.call_tool(
                "update_workflow", {"id": "plus", "definition": {**plus("add"), "mcpExport": False}}
            )
            assert not hidden.is_error, hidden.content

            async def gone() -> bool:
                return (await http.get("/api/mcp-servers/plus", headers=READER)).status_code == 404

            await eventually(gone, timeout=10, what="the server of plus to go with mcpExport: false")
