"""The gateway's ASGI app: the a2a-sdk routes mounted once under ``/agents/{agent}``, plus the directory and probes.

``create_app`` builds the SDK's card, JSON-RPC and HTTP+JSON routes a single time, over one
:class:`~a2amesh.gateway.handler.MeshRequestHandler`, and mounts them under the parameterised prefix; the agent
is a path parameter, so agents that appear later need nothing new. In front of the SDK routes,
:class:`AgentGate` answers what the SDK does not know about: unknown agents (404), API keys (401/403), the rate
limit (429), the body limit (413) and the content type (415), each with an A2A error body.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2amesh import metrics, tracing
from a2amesh.bus import headers as h
from a2amesh.client import Client
from a2amesh.gateway import cards, errors
from a2amesh.gateway.auth import Authenticator, AuthFailed, RateLimiter
from a2amesh.gateway.bodies import read_body, replay
from a2amesh.gateway.conversion import card_to_proto
from a2amesh.gateway.handler import CALL_STATE_KEY, CallInfo, MeshRequestHandler
from a2amesh.gateway.mcp_mount import MCP_PATH, WORKFLOW_MCP_PATH, McpMount
from a2amesh.gateway.push import PushNotifications, PushSettings
from a2amesh.gateway.settings import GatewaySettings
from a2amesh.gateway.streams import v0_3_streams_first_event_first
from a2amesh.ids import NAME_RE
from a2amesh.lifecycle import side_task
from a2amesh.logs import get_logger
from a2amesh.manage.facade import Management
from a2amesh.protocol import codes
from a2amesh.store.keys import Keys
from a2amesh.store.push import PushConfigStore
from a2amesh.store.redis import Redis

log = get_logger("gateway")

CARD_PATH = "/.well-known/agent-card.json"
_SECRET_HEADERS = ("authorization", "x-api-key")
_JSON_TYPES = ("application/json", "application/a2a+json")
_TRACEPARENT_LEN = 55


@dataclass(frozen=True)
class _CardTarget:
    agent: str
    base_url: str
    a2a_1: bool = False
    """The card request said ``A2A-Version: 1.x``: it gets the A2A 1.0 card alone (no 0.3 interfaces or fields)."""


_card_target: contextvars.ContextVar[_CardTarget] = contextvars.ContextVar("a2amesh_gateway_card")


class MeshContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context plus our :class:`CallInfo`; API keys are dropped from the headers it keeps."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        saved = context.state.get("headers")
        if isinstance(saved, dict):
            for name in _SECRET_HEADERS:
                saved.pop(name, None)
        context.state[CALL_STATE_KEY] = request.scope.get(CALL_STATE_KEY)
        return context


def base_url(scope: Scope, settings: GatewaySettings) -> str:
    """The URL clients reach the gateway at: ``public_url``, else the request's scheme and Host."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None)
    if not host:
        server = scope.get("server") or ("127.0.0.1", settings.port)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def _is_jsonrpc(method: str, sub_path: str) -> bool:
    return method == "POST" and sub_path in ("", "/")


def error_response(
    status: int, reason: str, message: str, *, jsonrpc: bool, headers: dict[str, str] | None = None
) -> Response:
    """An A2A error answered before the SDK: a JSON-RPC error envelope, or the HTTP+JSON error payload."""
    info = {"@type": codes.ERROR_INFO_TYPE, "reason": reason, "domain": codes.DOMAIN, "metadata": {}}
    if jsonrpc:
        code = (
            codes.TRANSPORT_ERROR
            if reason in codes.TRANSPORT_REASONS
            else _JSONRPC_CODES.get(reason, codes.INVALID_REQUEST)
        )
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": code, "message": message, "data": [info]},
        }
    else:
        body = {
            "error": {
                "code": status,
                "status": _GRPC_STATUS.get(status, "UNKNOWN"),
                "message": message,
                "details": [info],
            }
        }
    return JSONResponse(body, status_code=status, headers=headers)


_JSONRPC_CODES = {reason: code for code, reason in codes.A2A_REASONS.items()}
"""The JSON-RPC code of an A2A reason answered before the SDK (415 → -32005, A2A 1.0 §5.4)."""

_GRPC_STATUS = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
}


class AgentGate:
    """The ASGI app under ``/agents/{agent}``: checks one call, then hands it to the SDK's router."""

    def __init__(
        self,
        router: ASGIApp,
        *,
        client: Client,
        auth: Authenticator,
        limiter: RateLimiter,
        settings: GatewaySettings,
    ) -> None:
        self.router = router
        self.client = client
        self.auth = auth
        self.limiter = limiter
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.router(scope, receive, send)
            return
        started = time.perf_counter()
        agent = str(scope["path_params"].get("agent", ""))
        sub_path = scope["path"][len(scope.get("root_path", "")) :]
        method = scope["method"]
        jsonrpc = _is_jsonrpc(method, sub_path)
        status = [0]
        info: CallInfo | None = None

        card = sub_path == CARD_PATH

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if card:  # the card depends on the A2A-Version asked for (see cards.rewrite_card)
                    message = {**message, "headers": [*message.get("headers", []), (b"vary", b"A2A-Version")]}
            await send(message)

        try:
            checked = await self._check(scope, receive, agent, sub_path, jsonrpc)
            if isinstance(checked, Response):
                await checked(scope, receive, send_logged)
                return
            info, receive = checked
            if info is not None:
                scope[CALL_STATE_KEY] = info
            asked = Request(scope).headers.get(h.VERSION, "") if card else ""
            target = _CardTarget(agent, base_url(scope, self.settings), a2a_1=asked.startswith("1."))
            token = _card_target.set(target)
            try:
                with tracing.request_span(method, agent, info.traceparent if info else None) as span:
                    await self.router(scope, receive, send_logged)
                    if span is not None:
                        tracing.set_attributes(span, {"http.response.status_code": status[0]})
            finally:
                _card_target.reset(token)
        finally:
            seconds = time.perf_counter() - started
            if metrics.enabled and info is not None:
                metrics.http_request(agent, status[0], seconds)
            log.info(
                "http.request",
                agent=agent,
                method=method,
                path=scope["path"],
                status=status[0],
                ms=round(seconds * 1000, 1),
                key_id=info.caller.key_id if info else None,
                task_id=info.task_id if info else None,
            )

    async def _check(
        self, scope: Scope, receive: Receive, agent: str, sub_path: str, jsonrpc: bool
    ) -> Response | tuple[CallInfo | None, Receive]:
        if not NAME_RE.match(agent):
            return error_response(404, codes.AGENT_NOT_FOUND, f"no agent or workflow named {agent!r}", jsonrpc=jsonrpc)
        request = Request(scope, receive)
        if sub_path == CARD_PATH:  # cards are public: they tell a client how to authenticate
            if self.client.registry.get(agent) is None:
                return error_response(
                    404, codes.AGENT_NOT_FOUND, f"no live agent or workflow named {agent!r}", jsonrpc=False
                )
            return None, receive
        try:
            caller = self.auth.authenticate(request.headers)
            self.auth.authorize(caller, agent)
        except AuthFailed as e:
            hdrs = {"WWW-Authenticate": 'Bearer realm="a2amesh"'} if e.status == 401 else None
            reason = "UNAUTHENTICATED" if e.status == 401 else "PERMISSION_DENIED"
            return error_response(e.status, reason, str(e), jsonrpc=jsonrpc, headers=hdrs)
        wait = self.limiter.retry_after(caller.key_id or "anonymous")
        if wait > 0:
            return error_response(
                429,
                "RATE_LIMITED",
                f"rate limit of {self.settings.rate_limit:g} requests/s exceeded",
                jsonrpc=jsonrpc,
                headers={"Retry-After": str(max(1, round(wait)))},
            )
        if self.client.registry.get(agent) is None:
            return error_response(
                404, codes.AGENT_NOT_FOUND, f"no live agent or workflow named {agent!r}", jsonrpc=jsonrpc
            )
        body = await read_body(request, self.settings.max_body_bytes)
        if body is None:
            return error_response(
                413,
                codes.PAYLOAD_TOO_LARGE,
                f"request body exceeds the gateway's limit of {self.settings.max_body_bytes} bytes",
                jsonrpc=jsonrpc,
            )
        if body:
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype not in _JSON_TYPES:
                return error_response(
                    415,
                    codes.A2A_REASONS[codes.CONTENT_TYPE_NOT_SUPPORTED],
                    f"Content-Type {ctype or '(none)'!r} is not served; send application/json",
                    jsonrpc=jsonrpc,
                )
        traceparent = request.headers.get(h.TRACEPARENT)
        if traceparent is not None and len(traceparent) != _TRACEPARENT_LEN:
            traceparent = None  # malformed: not carried on
        return CallInfo(agent=agent, caller=caller, traceparent=traceparent), replay(body, receive)


def sdk_routes(handler: MeshRequestHandler, card_modifier: Any, settings: GatewaySettings) -> list[BaseRoute]:
    """The SDK's card, JSON-RPC and HTTP+JSON routes for one mount.

    ``create_rest_routes`` ends with a catch-all ``Mount('/{tenant}')`` repeating its routes under a tenant
    prefix. Under our mount it would swallow every path not matched before it, so it is left out: the gateway
    serves no tenants, and an unknown path is a clean 404. The card and JSON-RPC routes come first. The 0.3
    HTTP+JSON streams wait for their first event before they answer, as the 1.0 ones do (gateway/streams.py).
    """
    builder = MeshContextBuilder()
    # The route's own card is never served (the modifier replaces it per agent); it is complete only so the
    # SDK's spec-compliance check has nothing to warn about.
    placeholder = pb.AgentCard(
        name="a2amesh",
        description="served per agent",
        version="1.0",
        supported_interfaces=[
            pb.AgentInterface(
                url="http://localhost/", protocol_binding=cards.JSONRPC, protocol_version=codes.A2A_VERSION
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[pb.AgentSkill(id="a2amesh", name="a2amesh", description="served per agent", tags=["a2amesh"])],
    )
    routes: list[BaseRoute] = [
        *create_agent_card_routes(
            placeholder,
            card_modifier=card_modifier,
            card_url=CARD_PATH,
            cache_control=f"public, max-age={settings.card_cache_seconds}",
        ),
        *create_jsonrpc_routes(handler, rpc_url="/", context_builder=builder, enable_v0_3_compat=True),
    ]
    rest = create_rest_routes(handler, context_builder=builder, enable_v0_3_compat=True)
    routes.extend(v0_3_streams_first_event_first([r for r in rest if not isinstance(r, Mount)]))
    return routes


async def read_execution_counts(counts: Callable[[], Awaitable[dict[str, int]]]) -> None:
    """Set the namespace's executions per status from the store (2 s at most; a failure leaves the last values)."""
    try:
        async with asyncio.timeout(2):
            metrics.set_executions(await counts())
    except Exception as e:  # the other series are still worth serving
        log.warning("metrics.counts_failed", error=str(e) or type(e).__name__)


def metrics_route(client: Client, auth: Authenticator, manage: Management | None) -> Route:
    """``/metrics``: this process's metrics in the Prometheus text format, with the namespace's executions per
    status read for each scrape; with API keys, it asks for a key with the ``read`` scope (docs/observability.md)."""
    metrics.enable()
    counts = None if manage is None else manage.executions.counts

    async def metrics_text(request: Request) -> Response:
        try:
            auth.require_scope(auth.authenticate(request.headers), "read")
        except AuthFailed as e:
            return JSONResponse({"error": str(e)}, status_code=e.status)
        if counts is not None:
            await read_execution_counts(counts)
        body, ctype = metrics.exposition()
        return Response(body, media_type=ctype)

    return Route("/metrics", metrics_text, methods=["GET"])


@contextlib.asynccontextmanager
async def exported_execution_counts(manage: Management | None) -> AsyncIterator[None]:
    """While the gateway serves with OTLP metrics export on: the executions per status read every export interval,
    since no scrape reads them for the exporter."""
    interval = metrics.export_interval()
    if manage is None or interval is None:
        yield
        return

    async def refresh() -> None:
        while True:
            await read_execution_counts(manage.executions.counts)
            await asyncio.sleep(interval)  # the export's period, not a wait for an event

    async with side_task(refresh(), name="a2amesh-execution-counts"):
        yield


def create_app(
    client: Client, settings: GatewaySettings, *, redis: Redis | None = None, closing: asyncio.Event | None = None
) -> Starlette:
    """The gateway as an ASGI app over a started ``Client`` (the app never closes it).

    Args:
        client: the mesh client every call is forwarded with; its registry lists the agents.
        settings: the gateway's settings.
        redis: checked by ``/readyz`` when given (and the store of the management API and the dashboard).
        closing: set when the gateway stops, so that open event streams end.
    """
    errors.register()
    auth = Authenticator(settings.api_keys)
    manage = None if redis is None else Management(client, redis)
    push = None
    if redis is not None:
        store = PushConfigStore(redis, Keys(client.settings.namespace), ttl=client.settings.task_retention)
        push = PushNotifications(store, PushSettings(allow_private=settings.push_private_targets))
    handler = MeshRequestHandler(client, call_timeout=client.settings.call_timeout, push=push)
    security = auth.security()

    async def card_modifier(_: pb.AgentCard) -> pb.AgentCard:
        target = _card_target.get()
        card = client.registry.get(target.agent)
        if card is None:  # gone between the gate's check and now
            raise LookupError(target.agent)
        rewritten = cards.rewrite_card(card, target.base_url, security, push=push is not None, v0_3=not target.a2a_1)
        return card_to_proto(rewritten)

    gate = AgentGate(
        Router(routes=sdk_routes(handler, card_modifier, settings)),
        client=client,
        auth=auth,
        limiter=RateLimiter(settings.rate_limit, settings.rate_burst),
        settings=settings,
    )

    async def list_agents(request: Request) -> Response:
        body = cards.directory(client.cards(), base_url(request.scope, settings))
        return JSONResponse(body.model_dump(mode="json", by_alias=True))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        checks = {"nats": client.bus.connected, "registry": True, "redis": True}
        if redis is not None:
            try:
                async with asyncio.timeout(2):
                    await redis.ping()
            except Exception:  # any failure means "not ready"; the probe says which
                checks["redis"] = False
        ready = all(checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
        )

    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST", "PUT", "DELETE"],
                allow_headers=[
                    "Authorization",
                    "X-API-Key",
                    "Content-Type",
                    "A2A-Version",
                    "A2A-Extensions",
                    "traceparent",
                    "If-Match",
                    "Last-Event-ID",
                ],
            )
        )
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        metrics_route(client, auth, manage),
        Route("/agents", list_agents, methods=["GET"]),
        Mount("/agents/{agent}", app=gate),
    ]
    mcp = McpMount(client, settings, auth=auth, manage=manage)
    routes.append(Route(MCP_PATH, endpoint=mcp))  # MCP over streamable HTTP (docs/mcp.md)
    routes.append(Route(WORKFLOW_MCP_PATH, endpoint=mcp))  # one workflow's own MCP server
    if redis is not None and manage is not None:
        from a2amesh.gateway.api import ApiMesh, create_api
        from a2amesh.gateway.dashboard import dashboard_routes

        mesh = ApiMesh(
            client=client,
            redis=redis,
            settings=client.settings,
            http=settings,
            auth=auth,
            manage=manage,
            mcp_servers=mcp.server.workflows,
            closing=closing or asyncio.Event(),
        )
        routes[:0] = dashboard_routes(mesh, directory=list_agents)  # its /agents answers JSON unless asked for HTML
        routes.append(Mount("", app=create_api(mesh)))  # last: /api/…, /openapi.json, /docs

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.lifespan(app), exported_execution_counts(manage):
            yield

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers={404: _no_route})
    app.state.push = push  # closed by the server once it stops serving (queued deliveries get a grace period)
    return app


async def _no_route(request: Request, exc: Exception) -> Response:
    """A path no route serves (one the API's mount cannot match either, such as one holding a line break)."""
    from a2amesh.gateway.api.problems import Problem, problem_response

    return problem_response(Problem(404, "not-found", "no resource at this path"))
