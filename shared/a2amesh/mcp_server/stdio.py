"""``a2amesh mcp``: the MCP server over stdio, as a mesh client (NATS for calls, Redis for artifacts and runs)."""

from __future__ import annotations

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.logs import get_logger
from a2amesh.mcp_server.management import management_of
from a2amesh.mcp_server.server import MeshMcpServer
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis

log = get_logger("mcp")


async def serve_stdio(settings: Settings, mcp: McpSettings) -> None:
    """Connect to the mesh and serve one MCP session on stdin/stdout until the client closes it.

    Logs go to stderr only: stdout carries the protocol.
    """
    client = await Client.connect(settings, name="a2amesh-mcp")
    try:
        redis = await connect_redis(settings, check=False)
        keys = Keys(settings.namespace)
        executions = ExecutionStore(redis, keys, retention=settings.task_retention, lease_ttl=settings.lease_ttl)
        artifacts = ArtifactStore(
            redis, keys, retention=settings.artifact_retention, max_bytes=settings.artifact_max_bytes
        )
        try:
            management, details = management_of(client, executions)
            server = MeshMcpServer(
                client, mcp, artifacts=artifacts, executions=executions, details=details, providers=[management]
            )
            log.info("mcp.stdio_serving", namespace=settings.namespace, tools=len(server.catalog().tools))
            await server.serve_stdio()
        finally:
            await executions.aclose()
            await redis.aclose()
    finally:
        await client.close()
    log.info("mcp.stdio_stopped")
