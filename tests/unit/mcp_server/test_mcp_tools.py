"""MCP tools of agent nodes without a mesh: names for the model, and servers that cannot be started or reached."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from a2amesh.builtins.mcp_tools import McpServerDown, McpTools, tool_name
from a2amesh.workflow.dag.agent_nodes import McpServerRef
from tests.agents import mcp_calc

STDIO_SERVER = str(Path(mcp_calc.__file__).resolve())


def test_tool_names_are_prefixed_and_safe_for_the_model() -> None:
    assert tool_name("calc", "add") == "calc__add"
    assert tool_name("files", "read.file/v2") == "files__read_file_v2"
    assert len(tool_name("s", "x" * 100)) == 64


async def test_a_command_that_does_not_exist_is_named_with_the_cause() -> None:
    ref = McpServerRef(name="ghost", command=["/nonexistent/mcp-server", "--stdio"])
    with pytest.raises(McpServerDown) as caught:
        await McpTools().tools(ref)
    message = str(caught.value)
    assert message.startswith("MCP server 'ghost' (/nonexistent/mcp-server --stdio) cannot list its tools:"), message


async def test_a_closed_port_is_named_with_the_cause() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ref = McpServerRef(name="gone", url=f"http://127.0.0.1:{port}/mcp")
    with pytest.raises(McpServerDown) as caught:
        await McpTools().tools(ref)
    assert f"MCP server 'gone' (http://127.0.0.1:{port}/mcp) cannot list its tools:" in str(caught.value)


async def test_stdio_tools_carry_their_schemas_and_run() -> None:
    ref = McpServerRef(name="words", command=[sys.executable, STDIO_SERVER])
    tools = {t.name: t for t in await McpTools().tools(ref)}
    assert set(tools) == {"words__add", "words__shout"}
    assert tools["words__shout"].parameters["required"] == ["text"]
    assert await tools["words__shout"].handler({"text": "quiet"}, None) == {"result": "QUIET"}  # type: ignore[arg-type]
