"""A tiny MCP server for the tests of MCP tools in agent nodes: served over streamable HTTP in the test's process,
or run as a script over stdio (``python tests/agents/mcp_calc.py``)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

calls: list[tuple[str, dict[str, object]]] = []
"""The calls the in-process server ran (the stdio server runs in its own process and records nothing here)."""


def build() -> MCPServer:
    """The server: ``add`` (two integers) and ``shout`` (a text in capitals)."""
    server: MCPServer = MCPServer("calc")

    @server.tool(description="Adds two integers.")
    def add(a: int, b: int) -> int:
        calls.append(("add", {"a": a, "b": b}))
        return a + b

    @server.tool(description="The text in capitals.")
    def shout(text: str) -> str:
        calls.append(("shout", {"text": text}))
        return text.upper()

    return server


if __name__ == "__main__":
    build().run("stdio")
