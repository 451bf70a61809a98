"""The ``a2amesh mcp`` verb: the mesh as an MCP server on stdin/stdout (what desktop MCP clients launch).

It is a mesh client like the other verbs (``NATS_URL`` / ``REDIS_URL``, or the mesh ``a2amesh up`` runs from
this folder). stdout carries the protocol, so logs go to stderr only.
"""

from __future__ import annotations

import argparse
from typing import Any

from a2amesh import logs
from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.settings import verb_settings

__all__ = ["add_mcp_verb", "cmd_mcp"]


def add_mcp_verb(sub: Any) -> None:
    """Add ``mcp`` to the verbs."""
    s = sub.add_parser("mcp", help="serve the mesh's agents and workflows as MCP tools over stdio")
    s.add_argument("--include", help="comma-separated name globs exposed as tools (also A2AMESH_MCP_INCLUDE)")
    s.add_argument("--exclude", help="comma-separated name globs never exposed (also A2AMESH_MCP_EXCLUDE)")
    s.add_argument(
        "--tool-names",
        choices=["name", "agent_skill"],
        help="one tool per agent ('name', default) or per skill ('agent_skill'; also A2AMESH_MCP_TOOL_NAMES)",
    )
    s.set_defaults(func=cmd_mcp)


async def cmd_mcp(args: argparse.Namespace) -> int:
    """``a2amesh mcp``: serve one MCP session over stdio until the client closes it."""
    from a2amesh.mcp_server import McpSettings
    from a2amesh.mcp_server.stdio import serve_stdio

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    mcp = McpSettings.load(include=args.include, exclude=args.exclude, tool_names=args.tool_names)
    await serve_stdio(settings, mcp)
    return EXIT_OK
