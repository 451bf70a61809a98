"""``a2amesh mcp``: the MCP server over stdio, as a mesh client (NATS for calls, Redis for artifacts and runs)."""

from __future__ import annotations

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.logs import get_logger
from a2amesh.manage.facade import Management
from a2amesh.mcp_server.management import ManagementTools
from a2amesh.mcp_server.server import MeshMcpServer
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.store.redis import connect_redis

log = get_logger("mcp")


async def serve_stdio(settings: Settings, mcp: McpSettings) -> None:
    """Connect to the mesh and serve one MCP session on stdin/stdout until the client closes it.

    Logs go to stderr only: stdout carries the protocol.
    """
    client = await Client.connect(settings, name="a2amesh-mcp")
    try:
        redis = await connect_redis(settings, check=False)
        manage = Management(client, redis)
        try:
            server = MeshMcpServer(
                client,
                mcp,
                artifacts=manage.artifacts,
                executions=manage.execution_store,
                details=manage.executions,
                providers=[ManagementTools(manage.workflows, manage.runs)],
            )
            log.info("mcp.stdio_serving", namespace=settings.namespace, tools=len(server.catalog().tools))
            await server.serve_stdio()
        finally:
            await manage.aclose()
            await redis.aclose()
    finally:
        await client.close()
    log.info("mcp.stdio_stopped")
