"""The tools a built-in agent offers a model: mesh agents and workflows (with their schemas), Python functions
and the tools of external MCP servers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from a2amesh.agent.context import TaskContext
from a2amesh.agent.python_agent import import_object
from a2amesh.agent.tools import Tool, peer_tool, tool_from_function
from a2amesh.builtins.mcp_tools import McpServerDown, McpTools
from a2amesh.diagnostics import did_you_mean
from a2amesh.errors import ConfigError, TransportError
from a2amesh.workflow.dag.agent_nodes import McpServerRef, ToolRef

__all__ = ["CARD_WAIT", "ToolUnavailable", "Toolbox"]

CARD_WAIT = 5.0
"""Seconds a tool's agent or workflow may take to appear in the registry before the node fails."""


class ToolUnavailable(Exception):
    """A tool of the node cannot be offered: its agent is not in the mesh or its function cannot be imported."""


class Toolbox:
    """Resolves tool references; Python tools are imported once per process and kept."""

    def __init__(self, mcp: McpTools | None = None) -> None:
        self._python: dict[tuple[str, str | None], Tool] = {}
        self.mcp = mcp or McpTools()

    async def resolve(
        self, refs: Sequence[ToolRef], ctx: TaskContext, mcp_servers: Sequence[McpServerRef] = ()
    ) -> dict[str, Tool]:
        """The tools of ``refs`` and of the ``mcp_servers`` by the name the model calls them.

        Raises:
            ToolUnavailable: a reference names an agent or workflow that is not in the mesh (after a short
                wait), a card of the other kind, a function that cannot be imported, an MCP server cannot list
                its tools, or two tools share a name.
        """
        tools: dict[str, Tool] = {}
        for index, ref in enumerate(refs):
            tool = await self._one(ref, ctx, f"tools[{index}]")
            if tool.name in tools:
                raise ToolUnavailable(f"tools[{index}]: two tools are named {tool.name!r}; give one a name")
            tools[tool.name] = tool
        for index, server in enumerate(mcp_servers):
            try:
                offered = await self.mcp.tools(server)
            except McpServerDown as e:
                raise ToolUnavailable(f"mcp_servers[{index}]: {e}") from e
            for tool in offered:
                if tool.name in tools:
                    raise ToolUnavailable(f"mcp_servers[{index}]: its tool {tool.name!r} clashes with another tool")
                tools[tool.name] = tool
        return tools

    async def _one(self, ref: ToolRef, ctx: TaskContext, where: str) -> Tool:
        if ref.python is not None:
            key = (ref.python, ref.name)
            tool = self._python.get(key)
            if tool is None:
                try:
                    fn = import_object(ref.python, base_dir=None, source=where, field="python")
                    if not callable(fn):
                        raise ToolUnavailable(f"{where}: {ref.python!r} is not a function")
                    tool = tool_from_function(fn, source=where, name=ref.name)
                except ConfigError as e:
                    raise ToolUnavailable(f"{where}: {e}") from e
                self._python[key] = tool
            return tool
        name = ref.agent or ref.workflow
        assert name is not None, "validated: one target is set"
        kind = "agent" if ref.agent is not None else "workflow"
        try:
            card = await ctx.client.registry.wait_for(name, CARD_WAIT)
        except (TransportError, TimeoutError) as e:
            hint = did_you_mean(name, [c.name for c in ctx.client.cards()])
            raise ToolUnavailable(f"{where}: no {kind} {name!r} is in the mesh{hint}") from e
        if card.agent_type != kind:
            raise ToolUnavailable(
                f"{where}: {name!r} is a {card.agent_type} on the mesh; write {card.agent_type}: {name}"
            )
        tool = peer_tool(card)
        return dataclasses.replace(tool, name=ref.name) if ref.name else tool
