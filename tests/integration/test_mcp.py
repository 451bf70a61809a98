"""The MCP server over streamable HTTP (the gateway's ``/mcp``) with the official ``mcp`` client."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from tests.support.mcp import ADD_INPUT, ADD_OUTPUT, Seen, approve_with, mcp_http, start_mesh
from tests.support.waiting import within

KEYS = "admin=adm1n-secret,reader=r3ader-secret#read"


@pytest.fixture
async def url(agent_host: Any, executor: Any, client: Client, gateway: Any) -> str:
    await start_mesh(agent_host, executor, client)
    return str(await gateway(api_keys=parse_api_keys(KEYS)))


async def test_tools_match_the_cards(url: str, client: Client) -> None:
    """Every exposed agent and workflow is a tool with the card's schemas; mcp_export=false hides one."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
    assert {"add", "total", "refund", "slow_flow", "get_run", "cancel_run", "resume_run"} <= set(tools)
    assert "propose" not in tools and "pay" not in tools
    assert tools["add"].input_schema == ADD_INPUT
    assert tools["add"].output_schema == ADD_OUTPUT
    assert tools["add"].description and tools["add"].description.startswith("Adds x and y")
    card = client.registry.get("total")
    assert card is not None
    assert tools["total"].input_schema == card.input_schema
    assert tools["total"].output_schema == card.output_schema
    assert tools["sleeper"].input_schema["required"] == ["text"]


async def test_call_agent_and_workflow_with_structured_output_and_progress(url: str) -> None:
    """A Python agent and a workflow answer with structured content; their status updates arrive as progress."""
    seen = Seen()
    async with mcp_http(url, "adm1n-secret") as mcp:
        result = await within(mcp.call_tool("add", {"x": 2, "y": 3}, progress_callback=seen.on_progress), 20, "add")
        assert not result.is_error, result.content
        assert result.structured_content == {"sum": 5}
        assert result.meta is not None and result.meta["a2amesh/agent"] == "add"
        assert any(m == "adding" for _, m in seen.progress), seen.progress
        seen.progress.clear()
        flow = await within(mcp.call_tool("total", {"x": 4, "y": 5}, progress_callback=seen.on_progress), 20, "total")
        assert not flow.is_error, flow.content
        assert flow.structured_content == {"total": 9}
        assert any(m and m.startswith("node.started a") for _, m in seen.progress), seen.progress
        steps = [p for p, _ in seen.progress]
        assert steps == sorted(steps) and len(set(steps)) == len(steps)


async def test_bad_arguments_and_unknown_tool_are_tool_errors(url: str) -> None:
    """A schema violation names the field and the rule; an unknown tool is a tool error; the server serves on."""
    async with mcp_http(url, "adm1n-secret") as mcp:
        bad = await mcp.call_tool("add", {"x": "a", "y": 1})
        assert bad.is_error
        text = bad.content[0].text  # type: ignore[union-attr]
        assert "x: 'a' is not of type 'number'" in text
        missing = await mcp.call_tool("total", {"x": 1})
        assert missing.is_error and "'y' is a required property" in missing.content[0].text  # type: ignore[union-attr]
        unknown = await mcp.call_tool("ad", {})
        assert unknown.is_error
        assert "unknown tool 'ad' (did you mean 'add'?)" in unknown.content[0].text  # type: ignore[union-attr]
        ok = await mcp.call_tool("add", {"x": 1, "y": 1})
        assert ok.structured_content == {"sum": 2}


async def test_review_is_answered_through_elicitation(url: str) -> None:
    """A paused review becomes an elicitation; approving it resumes the run to its output."""
    answer = approve_with({"decision": "approve"})
    async with mcp_http(url, "adm1n-secret", elicitation_callback=answer) as mcp:
        result = await within(mcp.call_tool("refund", {"amount": 30}), 30, "the reviewed refund")
    assert not result.is_error, result.content
    assert result.structured_content == {"paid": 30}
    (asked,) = answer.asked
    assert isinstance(asked, types.ElicitRequestFormParams)
    assert asked.message.startswith("Refund 30?")
    assert asked.requested_schema["properties"]["decision"]["enum"] == ["approve", "edit", "reject"]
    assert asked.requested_schema["properties"]["amount"]["default"] == 30
