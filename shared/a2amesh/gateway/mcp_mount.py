"""``/mcp``: the mesh's MCP server over streamable HTTP, behind the gateway's API keys.

:class:`McpMount` is a thin ASGI wrapper: it authenticates the key (401 without a valid one), refuses a
``tools/call`` from a key without the tool's scope (403; ``run`` for agents and workflows), names the workflow of
a per-workflow server (``/mcp/{workflow}``, 404 for one without a server), puts the caller in
the request scope for the tool handlers (per-agent allow-lists, ``A2A-User``) and in the SDK's ``user`` (a
session is bound to the key that opened it), applies the gateway's per-key rate limit (429), then hands the
request to the SDK's session manager. The SDK's DNS-rebinding protection (421 for an unknown ``Host``) is
configured from the gateway's address and ``public_url`` (see :func:`transport_security`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from a2amesh.client import Client
from a2amesh.gateway.auth import Authenticator, AuthFailed, Caller, RateLimiter
from a2amesh.gateway.bodies import read_body, replay
from a2amesh.gateway.settings import GatewaySettings, is_loopback
from a2amesh.logs import get_logger
from a2amesh.manage.facade import Management
from a2amesh.mcp_server import ACCESS_SCOPE_KEY, MeshMcpServer
from a2amesh.mcp_server.access import WORKFLOW_SCOPE_KEY
from a2amesh.mcp_server.management import ManagementTools

log = get_logger("gateway")

MCP_PATH = "/mcp"
WORKFLOW_MCP_PATH = "/mcp/{workflow}"
"""A workflow's own server (seed 004 §6): the workflow, the agents and sub-workflows it calls."""
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def transport_security(settings: GatewaySettings) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks for the gateway's configuration.

    Allowed hosts: the loopback names (any port), the bound address when it is a specific one, and the host of
    ``public_url`` (what clients behind a proxy or in containers send). Allowed origins: the same, over http and
    https, plus ``cors_origins``. A gateway bound to every interface (``0.0.0.0``, ``::``) without
    ``public_url`` cannot know the names it is reached by, so the check is off there (auth still applies).
    """
    hosts = [f"{h}:*" for h in LOCAL_HOSTS] + list(LOCAL_HOSTS)
    origins = [f"{scheme}://{h}:*" for h in LOCAL_HOSTS for scheme in ("http", "https")]
    origins += [f"{scheme}://{h}" for h in LOCAL_HOSTS for scheme in ("http", "https")]
    bound = settings.host
    wildcard = bound in ("0.0.0.0", "::", "")
    if not wildcard and not is_loopback(bound):
        name = f"[{bound}]" if ":" in bound else bound
        hosts += [name, f"{name}:*"]
        origins += [f"http://{name}:*", f"https://{name}:*", f"http://{name}", f"https://{name}"]
    if settings.public_url:
        url = urlsplit(settings.public_url)
        if url.netloc:
            hosts.append(url.netloc)
            if url.port is None:
                hosts.append(f"{url.netloc}:*")
            origins.append(f"{url.scheme}://{url.netloc}")
    origins += settings.cors_origins
    enabled = not (wildcard and not settings.public_url)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=enabled, allowed_hosts=hosts, allowed_origins=origins
    )


def _principal(caller: Caller) -> AuthenticatedUser | None:
    """The caller as the SDK's authenticated user: the session manager binds each session to the key that
    opened it (another key presenting its id is answered 404). No secret is put in it."""
    if caller.key_id is None:
        return None
    scopes = sorted(caller.key.scopes) if caller.key is not None and caller.key.scopes is not None else ["admin"]
    return AuthenticatedUser(AccessToken(token="a2amesh-api-key", client_id=caller.key_id, scopes=scopes))


def _problem(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON-RPC error answered before the MCP server (the ids of the request are unknown here)."""
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="a2amesh"'}
    code = {401: -32001, 403: -32003, 404: -32002, 413: -32004, 429: -32005}.get(status, -32000)
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def _tools_called(body: bytes) -> list[str]:
    """The names of the tools a JSON-RPC body (one message or a batch) calls."""
    try:
        value = json.loads(body)
    except ValueError:
        return []  # the SDK answers the parse error
    names = []
    for m in value if isinstance(value, list) else [value]:
        if isinstance(m, dict) and m.get("method") == "tools/call" and isinstance(m.get("params"), dict):
            names.append(str(m["params"].get("name", "")))
    return names


class McpMount:
    """The ASGI app at ``/mcp`` (its :meth:`lifespan` runs the SDK's session manager and the registry watch)."""

    def __init__(
        self, client: Client, settings: GatewaySettings, *, auth: Authenticator, manage: Management | None
    ) -> None:
        self.settings = settings
        self.auth = auth
        self.limiter = RateLimiter(settings.rate_limit, settings.rate_burst)
        self._manage = manage
        if manage is None:
            self.server = MeshMcpServer(client, settings.mcp)
        else:
            self.server = MeshMcpServer(
                client,
                settings.mcp,
                artifacts=manage.artifacts,
                executions=manage.execution_store,
                details=manage.executions,
                providers=[ManagementTools(manage.workflows, manage.runs)],
            )
        self.manager = StreamableHTTPSessionManager(
            app=self.server.server,
            security_settings=transport_security(settings),
            max_request_body_size=settings.max_body_bytes,
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """Run the session manager and the tool-list watch while the gateway serves."""
        async with self.server.running(), self.manager.run():
            yield
        if self._manage is not None:
            await self._manage.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        status = [0]

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        key_id: str | None = None
        try:
            request = Request(scope, receive)
            try:
                caller = self.auth.authenticate(request.headers)
            except AuthFailed as e:
                await _problem(e.status, str(e))(scope, receive, send_logged)
                return
            key_id = caller.key_id
            wait = self.limiter.retry_after(caller.key_id or "anonymous")
            if wait > 0:
                message = f"rate limit of {self.settings.rate_limit:g} requests/s exceeded"
                retry = {"Retry-After": str(max(1, round(wait)))}
                await _problem(429, message, retry)(scope, receive, send_logged)
                return
            workflow = scope.get("path_params", {}).get("workflow")
            if workflow is not None:
                if self.server.workflows.get(str(workflow)) is None:
                    message = f"no MCP server for workflow {workflow!r} (not live, or mcpExport: false)"
                    await _problem(404, message)(scope, receive, send_logged)
                    return
                scope[WORKFLOW_SCOPE_KEY] = str(workflow)
            if request.method == "POST" and caller.key is not None and caller.key.scopes is not None:
                body = await read_body(request, self.settings.max_body_bytes)
                if body is None:
                    limit = self.settings.max_body_bytes
                    await _problem(413, f"request body exceeds the gateway's limit of {limit} bytes")(
                        scope, receive, send_logged
                    )
                    return
                for tool in _tools_called(body):
                    needed = self.server.scope_of(tool)
                    if not caller.has_scope(needed):
                        message = f"API key {caller.key_id!r} lacks the {needed!r} scope tool {tool!r} needs"
                        await _problem(403, message)(scope, receive, send_logged)
                        return
                receive = replay(body, receive)
            scope[ACCESS_SCOPE_KEY] = caller
            user = _principal(caller)
            if user is not None:
                scope["user"] = user
            await self.manager.handle_request(scope, receive, send_logged)
        finally:
            log.info(
                "http.request",
                path=scope["path"],
                method=scope["method"],
                status=status[0],
                ms=round((time.perf_counter() - started) * 1000, 1),
                key_id=key_id,
            )
