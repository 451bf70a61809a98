"""What every management route needs: the mesh it serves, and the caller with the scope the route asks for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from fastapi import Request

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.gateway.api.problems import Problem
from a2amesh.gateway.auth import Authenticator, AuthFailed, Caller
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.manage.facade import Management
from a2amesh.store.redis import Redis

if TYPE_CHECKING:
    from a2amesh.mcp_server.workflow_servers import WorkflowServers

__all__ = ["ApiMesh", "Scope", "mesh_of", "require"]

Scope = Literal["read", "run", "review", "admin"]


@dataclass
class ApiMesh:
    """The connections and settings the management routes work with (one per gateway process).

    Attributes:
        client: the gateway's mesh client (its bus, registry and calls).
        redis: the gateway's Redis connection.
        settings: the mesh settings (namespace, timeouts).
        http: the gateway's settings (keys, limits).
        auth: checks API keys.
        manage: the management services every route, page and MCP tool of this gateway shares.
        mcp_servers: the per-workflow MCP servers this gateway serves (None: it serves no MCP).
        closing: set when the gateway stops: open streams end.
    """

    client: Client
    redis: Redis
    settings: Settings
    http: GatewaySettings
    auth: Authenticator
    manage: Management
    mcp_servers: WorkflowServers | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)


def mesh_of(request: Request) -> ApiMesh:
    """The :class:`ApiMesh` of the app serving ``request``."""
    mesh: ApiMesh = request.app.state.mesh
    return mesh


def require(scope: Scope) -> Callable[[Request], Awaitable[Caller]]:
    """A route dependency: the authenticated caller, whose key must have ``scope`` (401 / 403 otherwise)."""

    async def caller(request: Request) -> Caller:
        auth = mesh_of(request).auth
        try:
            who = auth.authenticate(request.headers)
            auth.require_scope(who, scope)
        except AuthFailed as e:
            headers = {"WWW-Authenticate": 'Bearer realm="a2amesh"'} if e.status == 401 else None
            title = "unauthenticated" if e.status == 401 else "forbidden"
            raise Problem(e.status, title, str(e), headers=headers) from e
        return who

    return caller
