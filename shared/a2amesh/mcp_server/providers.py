"""The seam for tools that are not agents or workflows: a provider hands the server a fixed list of tools.

The server lists a provider's tools beside the mesh tools, validates arguments against each tool's
``inputSchema``, checks the caller holds the tool's scope, then calls its handler. ``runs.py`` provides the
run tools that need only the mesh (``list_agents``, ``get_agent``, ``get_run``, ``cancel_run``,
``resume_run``); ``management.py`` provides the management tools over ``manage/`` (``list_workflows``,
``get_workflow``, ``create_workflow``, ``update_workflow``, ``execute_workflow``, ``list_runs``; see
:data:`MANAGEMENT_TOOLS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types

from a2amesh.mcp_server.access import Access
from a2amesh.mcp_server.calls import CallScope

ToolOutcome = types.CallToolResult | types.InputRequiredResult


@dataclass(frozen=True)
class ToolRequest:
    """One call of a provided tool: who calls, and the call's MCP scope (progress, elicitation, limits)."""

    access: Access
    scope: CallScope

    @property
    def headers(self) -> Mapping[str, str]:
        """The headers mesh calls made for this request carry (``A2A-User``)."""
        return self.scope.headers


Handler = Callable[[dict[str, Any], ToolRequest], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class ProvidedTool:
    """A tool of a provider: its MCP definition, the key scope it needs, and its handler.

    Attributes:
        tool: the definition clients list (its ``inputSchema`` is enforced before ``handler`` runs).
        scope: ``read``, ``run``, ``review`` or ``admin``.
        handler: answers a call with validated arguments.
    """

    tool: types.Tool
    scope: str
    handler: Handler


class ToolProvider(Protocol):
    """Anything with a list of tools; passed to :class:`~a2amesh.mcp_server.server.MeshMcpServer`."""

    def tools(self) -> Sequence[ProvidedTool]:
        """The provider's tools (a fixed list: names must not change while the server runs)."""
        ...


MANAGEMENT_TOOLS: tuple[tuple[str, str], ...] = (
    ("list_workflows", "read"),
    ("get_workflow", "read"),
    ("create_workflow", "admin"),
    ("update_workflow", "admin"),
    ("execute_workflow", "run"),
    ("list_runs", "read"),
    ("get_run", "read"),
    ("cancel_run", "run"),
    ("resume_run", "review"),
    ("list_agents", "read"),
    ("get_agent", "read"),
)
"""The management tools (seed 003) with the key scope each needs: the first six are provided over
``manage/`` by :class:`~a2amesh.mcp_server.management.ManagementTools`, the run tools by
:class:`~a2amesh.mcp_server.runs.RunTools` (``get_run`` reads the execution record through ``manage/`` too)."""
