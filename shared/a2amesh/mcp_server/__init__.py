"""The mesh as an MCP server (``docs/mcp.md``): every agent and workflow a live tool, over stdio and HTTP.

``server`` (the SDK server, tool list and list_changed), ``catalog`` (cards → tools and schemas), ``calls`` (a
tool call as an A2A call: progress, cancel, review), ``review`` (reviews as elicitation forms), ``runs`` (the
run tools), ``management`` (the management tools over ``manage/``), ``providers`` (the seam for more tools),
``workflow_servers`` (per-workflow servers), ``resources`` (artifacts), ``access`` (who calls), ``settings``,
``stdio`` (``a2amesh mcp``).
"""

from a2amesh.mcp_server.access import ACCESS_SCOPE_KEY, Access
from a2amesh.mcp_server.providers import MANAGEMENT_TOOLS, ProvidedTool, ToolProvider, ToolRequest
from a2amesh.mcp_server.server import MeshMcpServer
from a2amesh.mcp_server.settings import McpSettings

__all__ = [
    "ACCESS_SCOPE_KEY",
    "MANAGEMENT_TOOLS",
    "Access",
    "McpSettings",
    "MeshMcpServer",
    "ProvidedTool",
    "ToolProvider",
    "ToolRequest",
]
