"""The management API (docs/api.md): definitions, executions, schedules and events over HTTP.

A FastAPI app served by the gateway beside the A2A routes (same process, same API keys). Its routes are thin:
they check the caller's scope, validate the request with pydantic and call the library code the CLI and the
MCP server use too.
"""

from a2amesh.gateway.api.app import create_api
from a2amesh.gateway.api.deps import ApiMesh

__all__ = ["ApiMesh", "create_api"]
