"""``a2amesh mcp`` as a child process over stdio, driven by the official ``mcp`` client.

The agents and the executor run in the test process; the MCP server is a separate process that joins the mesh
with only ``NATS_URL`` / ``REDIS_URL`` (and the namespace), as a desktop client would launch it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters, stdio_client

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from tests.support.mcp import ADD_INPUT, ADD_OUTPUT, Seen, Sleeper, add, approve_with, start_mesh, text_of
from tests.support.processes import REPO, process_env
from tests.support.waiting import eventually, within

OpenStdio = Callable[..., contextlib.AbstractAsyncContextManager[McpClient]]


@pytest.fixture
async def sleeper(agent_host: Any, executor: Any, client: Client) -> Sleeper:
    return await start_mesh(agent_host, executor, client)


@pytest.fixture
def stdio(settings: Settings, tmp_path: Path) -> OpenStdio:
    """Open an MCP client over a fresh ``a2amesh mcp`` process; its stderr goes to ``tmp_path/mcp.err``."""

    @contextlib.asynccontextmanager
    async def open_client(**options: Any) -> AsyncIterator[McpClient]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "a2amesh", "mcp"],
            env=process_env(settings, A2AMESH_LOG_FORMAT="json", A2AMESH_LOG_LEVEL="INFO"),
            cwd=str(REPO),
        )
        with (tmp_path / "mcp.err").open("a") as errlog:
            async with McpClient(stdio_client(params, errlog=errlog), **options) as client:
                yield client

    return open_client


async def test_tools_calls_and_progress_over_stdio(
    sleeper: Sleeper, stdio: OpenStdio, client: Client, tmp_path: Path
) -> None:
    """Tools match the cards; a Python agent and a workflow answer with structured content and progress; bad
    arguments and an unknown tool are tool errors; logs go to stderr (stdout carries only the protocol)."""
    seen = Seen()
    async with stdio(mode="legacy") as mcp:
        tools = {t.name: t for t in (await within(mcp.list_tools(), 20, "tools/list")).tools}
        assert tools["add"].input_schema == ADD_INPUT
        assert tools["add"].output_schema == ADD_OUTPUT
        card = client.registry.get("refund")
        assert card is not None
        assert tools["refund"].input_schema == card.input_schema
        assert "propose" not in tools
        result = await within(mcp.call_tool("add", {"x": 2, "y": 40}, progress_callback=seen.on_progress), 20, "add")
        assert result.structured_content == {"sum": 42}
        flow = await within(mcp.call_tool("total", {"x": 1, "y": 2}, progress_callback=seen.on_progress), 20, "total")
        assert flow.structured_content == {"total": 3}
        messages = [m for _, m in seen.progress]
        assert "adding" in messages, messages
        assert any(m and m.startswith("node.completed a") for m in messages), messages
        bad = await mcp.call_tool("total", {"x": "one", "y": 2})
        assert bad.is_error
        assert "x: 'one' is not of type 'number'" in text_of(bad)
        unknown = await mcp.call_tool("nope", {})
        assert unknown.is_error
        assert text_of(unknown).startswith("unknown tool 'nope'")
    assert '"event":"mcp.stdio_serving"' in (tmp_path / "mcp.err").read_text()


async def test_a_new_agent_appears_and_goes_over_stdio(sleeper: Sleeper, stdio: OpenStdio, agent_host: Any) -> None:
    """A tool appears when an agent starts and disappears when it stops, with tools/list_changed each time."""
    seen = Seen()
    async with stdio(mode="legacy", message_handler=seen.on_message) as mcp:
        assert "late" not in {t.name for t in (await within(mcp.list_tools(), 20, "tools/list")).tools}
        host = await agent_host("late", add, input_schema=ADD_INPUT, output_schema=ADD_OUTPUT)
        await within(seen.tools_changed.wait(), 15, "notifications/tools/list_changed after the agent started")
        assert "late" in {t.name for t in (await mcp.list_tools()).tools}
        seen.tools_changed.clear()
        await host.shutdown()
        await within(seen.tools_changed.wait(), 15, "notifications/tools/list_changed after the agent stopped")
        assert "late" not in {t.name for t in (await mcp.list_tools()).tools}


async def test_cancel_over_stdio_cancels_the_execution(
    sleeper: Sleeper, stdio: OpenStdio, redis: Any, settings: Settings
) -> None:
    """Cancelling the tools/call (notifications/cancelled) cancels the execution, which the store records."""
    store = ExecutionStore(redis, Keys(settings.namespace), retention=60, lease_ttl=settings.lease_ttl)
    try:
        async with stdio(mode="legacy") as mcp:
            call = asyncio.create_task(mcp.call_tool("slow_flow", {"text": "wait"}))
            await within(sleeper.started.wait(), 20, "the sleeper to start")
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            await within(sleeper.cancelled.wait(), 20, "the sleeper to be cancelled")

            async def canceled() -> bool:
                runs = await store.list(workflow="slow_flow")
                return len(runs) == 1 and runs[0].get("status") == "canceled"

            await eventually(canceled, timeout=20, what="the slow_flow execution to be canceled in the store")
    finally:
        await store.aclose()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_review_by_elicitation_over_stdio(sleeper: Sleeper, stdio: OpenStdio, mode: str) -> None:
    """A paused review is asked through elicitation (a server request in the handshake era, an
    InputRequiredResult at 2026-07-28) and approving it finishes the run."""
    answer = approve_with({"decision": "approve"})
    async with stdio(mode=mode, elicitation_callback=answer) as mcp:
        result = await within(mcp.call_tool("refund", {"amount": 12}), 30, "the reviewed refund")
    assert not result.is_error, result.content
    assert result.structured_content == {"paid": 12}
    (asked,) = answer.asked
    assert isinstance(asked, types.ElicitRequestFormParams)
    assert asked.message.startswith("Refund 12?")


PLUS_YAML = """
name: plus_one
description: Adds one through the add agent
nodes:
  - {id: a, type: agent, agent_name: add, input: {x: "{{workflow.input.x}}", y: 1}}
output_mapping: {total: "{{a.output.sum}}"}
"""


async def test_management_tools_over_stdio(sleeper: Sleeper, stdio: OpenStdio, client: Client) -> None:
    """Over stdio (every scope: a local mesh client) create_workflow stores a workflow, execute_workflow runs
    it, get_run and list_runs show the execution record; an invalid definition is a tool error with paths."""
    async with stdio(mode="legacy") as mcp:
        created = await within(mcp.call_tool("create_workflow", {"definition": PLUS_YAML}), 20, "create_workflow")
        assert not created.is_error, created.content
        assert created.structured_content is not None
        assert created.structured_content["id"] == "plus_one"
        await client.registry.wait_for("plus_one", 10)
        ran = await within(mcp.call_tool("execute_workflow", {"workflow": "plus_one", "input": {"x": 41}}), 20, "run")
        assert not ran.is_error, ran.content
        assert ran.structured_content is not None
        assert ran.structured_content["output"] == {"total": 42}
        run_id = ran.structured_content["execution_id"]
        got = await mcp.call_tool("get_run", {"run_id": run_id})
        assert got.structured_content is not None
        assert got.structured_content["status"] == "completed"
        assert got.structured_content["output"] == {"total": 42}
        assert any(e["event"] == "node.completed" for e in got.structured_content["trail"])
        runs = await mcp.call_tool("list_runs", {"workflow": "plus_one"})
        assert runs.structured_content is not None
        assert [r["id"] for r in runs.structured_content["items"]] == [run_id]
        invalid = await mcp.call_tool("create_workflow", {"definition": {"name": "bad", "nodes": [{"id": "a"}]}})
        assert invalid.is_error
        text = text_of(invalid)
        assert text.startswith("invalid workflow definition")
        assert "nodes[a]" in text
