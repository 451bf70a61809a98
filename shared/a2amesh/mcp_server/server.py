"""The mesh as an MCP server: every exposed agent and workflow a tool, plus the providers' tools.

One :class:`MeshMcpServer` serves any number of MCP sessions (stdio: one; the gateway's ``/mcp``: many) over
the SDK's low-level ``Server``, whose tool list is read from the live registry at each ``tools/list``. A
watch on the registry tells clients when the list changes: handshake-era sessions get
``notifications/tools/list_changed`` on their connection, 2026-07-28 sessions on their
``subscriptions/listen`` streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import mcp_types as types
from mcp.server import NotificationOptions, Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from a2amesh.bus import headers as h
from a2amesh.client import Client
from a2amesh.diagnostics import did_you_mean, validate
from a2amesh.lifecycle import side_task
from a2amesh.logs import get_logger
from a2amesh.manage.executions import Executions
from a2amesh.mcp_server.access import Access, access_of, workflow_of
from a2amesh.mcp_server.calls import CallScope, MeshCaller, error_result, issues_text
from a2amesh.mcp_server.catalog import Catalog, MeshTool
from a2amesh.mcp_server.providers import ProvidedTool, ToolOutcome, ToolProvider, ToolRequest
from a2amesh.mcp_server.resources import ResourceError, ResourceReader
from a2amesh.mcp_server.runs import RunTools
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.mcp_server.tasks import CAPABILITY as TASKS_CAPABILITY
from a2amesh.mcp_server.tasks import TASK_VERSIONS, McpTasks
from a2amesh.mcp_server.workflow_servers import WorkflowServers
from a2amesh.store.artifacts import ArtifactStore
from a2amesh.store.executions import ExecutionStore

log = get_logger("mcp")

SERVER_NAME = "a2amesh"
INSTRUCTIONS = (
    "Each agent and workflow of the a2amesh mesh is a tool named after it; its input and output schemas are "
    "the tool's. Long calls report progress; a run paused for a human review asks you through elicitation, "
    "or returns its id so that resume_run can answer it later. Clients of protocol 2025-11-25 may run an agent "
    "or workflow tool as an MCP task (tasks/get, tasks/result, tasks/cancel). get_run, cancel_run and "
    "list_agents manage runs; "
    "list_workflows, get_workflow, create_workflow, update_workflow, execute_workflow and list_runs manage "
    "stored workflows and their executions."
)
RESOURCE_NOT_FOUND = -32002
WATCH_POLL = 1.0
"""Seconds between looks at the registry when no card changed: cards also age out without a KV event."""

RUN_SCOPE = "run"
READ_SCOPE = "read"
REVIEW_SCOPE = "review"


class _Server(Server[Any]):
    """The SDK server announcing ``tools.listChanged`` on every transport (the HTTP session manager asks for
    the initialization options without notification options), and the tasks utility it serves."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )
        options.capabilities.tasks = TASKS_CAPABILITY
        return options


class MeshMcpServer:
    """The MCP server of a mesh, over a started :class:`~a2amesh.client.Client`.

    Args:
        client: the mesh client (registry, calls); not closed here.
        settings: which cards are tools, naming, call limits.
        artifacts: reads ``artifact://`` resources (None: resource links cannot be read).
        executions: finds a workflow execution's workflow for the run tools (None: they need ``agent``).
        details: reads execution records for ``get_run`` (trail, output; None: A2A GetTask only).
        providers: more tools (the management tools plug in here).
    """

    def __init__(
        self,
        client: Client,
        settings: McpSettings,
        *,
        artifacts: ArtifactStore | None = None,
        executions: ExecutionStore | None = None,
        details: Executions | None = None,
        providers: Sequence[ToolProvider] = (),
    ) -> None:
        self.client = client
        self.settings = settings
        self.resources = ResourceReader(artifacts)
        self.caller = MeshCaller(client, self.resources)
        self.tasks = McpTasks(self.caller)
        self.provided: dict[str, ProvidedTool] = {}
        for provider in [RunTools(client, self.caller, settings, executions, details), *providers]:
            for tool in provider.tools():
                if tool.tool.name in self.provided:
                    raise ValueError(f"two tool providers define the tool {tool.tool.name!r}")
                self.provided[tool.tool.name] = tool
        self.workflows = WorkflowServers(self.catalog, lambda: {card.name: card for card in client.cards()})
        self.subscriptions = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.subscriptions)
        self._sessions: dict[int, ServerSession] = {}
        self.server = _Server(
            SERVER_NAME,
            version="1",
            title="a2amesh",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscriptions_listen=self._listen,
        )
        self.server.add_notification_handler("notifications/initialized", types.NotificationParams, self._initialized)
        # The SDK keeps the 2025-11-25 tasks utility as types only: its methods are served here, and a
        # task-augmented tools/call is answered before the SDK shapes the result as a CallToolResult.
        self.server.middleware.append(self._task_calls)
        self.server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get_task)
        self.server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._task_result)
        self.server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel_task)
        self.server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list_tasks)

    def scope_of(self, tool: str) -> str:
        """The key scope calling ``tool`` needs: a provided tool's own, ``run`` for the mesh's."""
        provided = self.provided.get(tool)
        return provided.scope if provided is not None else RUN_SCOPE

    def catalog(self) -> Catalog:
        """The mesh tools of the live cards."""
        return Catalog(self.client.cards(), self.settings, reserved=frozenset(self.provided))

    # --- tools ---------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        access = access_of(ctx.request)
        workflow = workflow_of(ctx.request)
        if workflow is not None:
            return types.ListToolsResult(tools=self._workflow_tools(workflow, access))
        tools = [p.tool for p in self.provided.values() if access.has_scope(p.scope)]
        if access.has_scope(RUN_SCOPE):
            tools += [t.tool for t in self.catalog().tools.values() if access.allows(t.agent)]
        return types.ListToolsResult(tools=tools)

    def _workflow_tools(self, workflow: str, access: Access) -> list[types.Tool]:
        """The tools of ``workflow``'s own server the caller may see."""
        server = self.workflows.get(workflow)
        if server is None or not access.has_scope(RUN_SCOPE):
            return []
        catalog = self.catalog()
        return [t for t in server.tools if t.name in catalog.tools and access.allows(catalog.tools[t.name].agent)]

    def _scope(self, ctx: ServerRequestContext[Any, Any], access: Access) -> CallScope:
        return CallScope(
            ctx,
            {h.USER: access.key_id} if access.key_id else {},
            self.settings.call_timeout or self.client.settings.call_timeout,
            self.settings.elicitation,
            may_review=access.has_scope(REVIEW_SCOPE),
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        access = access_of(ctx.request)
        arguments = dict(params.arguments or {})
        scope = self._scope(ctx, access)
        try:
            provided = self.provided.get(params.name)
            if provided is not None and workflow_of(ctx.request) is None:
                return await self._call_provided(provided, arguments, access, scope)
            tool = self._mesh_tool(ctx, params.name, access)
            if isinstance(tool, str):
                return error_result(tool)
            if params.request_state is not None:
                return await self.caller.answer(tool, params.request_state, params.input_responses, scope)
            return await self.caller.call(tool, arguments, scope)
        except Exception as e:  # the outer edge of a tool call: one log line, a tool error, the server serves on
            log.exception("mcp.tool_failed", tool=params.name)
            return error_result(f"tool {params.name!r} failed: {type(e).__name__}: {e}")

    async def _call_provided(
        self, provided: ProvidedTool, arguments: dict[str, Any], access: Access, scope: CallScope
    ) -> ToolOutcome:
        name = provided.tool.name
        if not access.has_scope(provided.scope):
            return error_result(f"API key {access.key_id!r} lacks the {provided.scope!r} scope tool {name!r} needs")
        issues = validate(arguments, provided.tool.input_schema)
        if issues:
            return error_result(issues_text(name, issues))
        return await provided.handler(arguments, ToolRequest(access, scope))

    def _mesh_tool(self, ctx: ServerRequestContext[Any, Any], name: str, access: Access) -> MeshTool | str:
        """The agent or workflow tool ``name`` the caller may call at this path, or why not."""
        workflow = workflow_of(ctx.request)
        if workflow is not None:
            server = self.workflows.get(workflow)
            if server is None or name not in server.names:
                known = sorted(server.names) if server is not None else []
                return (
                    f"unknown tool {name!r} at /mcp/{workflow}{did_you_mean(name, known)}; "
                    f"its tools: {', '.join(known) or 'none'}"
                )
        catalog = self.catalog()
        tool = catalog.tools.get(name)
        if tool is None:
            known = [*self.provided, *catalog.tools]
            return f"unknown tool {name!r}{did_you_mean(name, known)}; see tools/list"
        if not access.has_scope(RUN_SCOPE):
            return f"API key {access.key_id!r} lacks the {RUN_SCOPE!r} scope calling a tool needs"
        if not access.allows(tool.agent):
            return f"API key {access.key_id!r} is not allowed to call {tool.agent!r}"
        return tool

    # --- tasks (2025-11-25) ----------------------------------------------------------------------

    async def _task_calls(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Answer a task-augmented ``tools/call`` with its task (the rest goes on down the SDK's chain)."""
        raw = ctx.params
        if (
            ctx.method != "tools/call"
            or ctx.request_id is None
            or ctx.protocol_version not in TASK_VERSIONS
            or not isinstance(raw, Mapping)
            or raw.get("task") is None
        ):
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError as e:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"invalid tools/call params: {e.errors()[0]['msg']}"
            ) from e
        access = access_of(ctx.request)
        tool = self._mesh_tool(ctx, params.name, access)
        if isinstance(tool, str):
            if params.name in self.provided:
                tool = f"tool {params.name!r} does not run as a task (no execution.taskSupport): call it without 'task'"
            raise MCPError(code=types.METHOD_NOT_FOUND, message=tool)
        assert params.task is not None
        created = await self.tasks.start(
            tool, dict(params.arguments or {}), self._scope(ctx, access), owner=access.key_id, ttl=params.task.ttl
        )
        return created.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _get_task(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> HandlerResult:
        task = await self.tasks.status(params.task_id, access_of(ctx.request).key_id)
        return task.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _task_result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> HandlerResult:
        return await self.tasks.result(params.task_id, access_of(ctx.request).key_id)

    async def _cancel_task(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> HandlerResult:
        access = access_of(ctx.request)
        if not access.has_scope(RUN_SCOPE):
            raise MCPError(code=types.INVALID_REQUEST, message=f"API key {access.key_id!r} lacks the 'run' scope")
        headers = {h.USER: access.key_id} if access.key_id else {}
        task = await self.tasks.cancel(params.task_id, access.key_id, headers)
        return task.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _list_tasks(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListTasksResult:
        return self.tasks.list(access_of(ctx.request).key_id, params.cursor)

    # --- resources -----------------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        if not access_of(ctx.request).has_scope(READ_SCOPE):
            return types.ListResourcesResult(resources=[])
        return types.ListResourcesResult(resources=self.resources.recent())

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        access = access_of(ctx.request)
        if not access.has_scope(READ_SCOPE):
            raise MCPError(code=types.INVALID_REQUEST, message=f"API key {access.key_id!r} lacks the 'read' scope")
        try:
            return await self.resources.read(str(params.uri), user=access.key_id)
        except ResourceError as e:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=str(e), data={"uri": str(params.uri)}) from e

    # --- list_changed --------------------------------------------------------------------------

    async def _initialized(self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams) -> None:
        """Remember a handshake-era session, to tell it when the tools change, until its connection closes."""
        session = ctx.session
        # The SDK gives handlers no Connection yet (its Context rework is pending); the session holds it.
        connection = session._connection
        key = id(connection)
        self._sessions[key] = session
        connection.exit_stack.callback(self._sessions.pop, key, None)

    async def tools_changed(self) -> None:
        """Tell every session that the tool list changed."""
        log.info("mcp.tools_changed", sessions=len(self._sessions))
        await self.subscriptions.publish(ToolsListChanged())
        for key, session in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
            except Exception as e:  # a connection going away: forget it
                log.debug("mcp.notify_failed", error=str(e) or type(e).__name__)
                self._sessions.pop(key, None)

    async def watch(self) -> None:
        """Compare the tool list with the last one whenever a card changes (and every second, for expiries),
        and regenerate the per-workflow servers whose tools changed."""
        registry = self.client.registry
        last = self.catalog().fingerprint
        self.workflows.refresh()
        while True:
            async with registry.changed:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_POLL):
                        await registry.changed.wait()
            now = self.catalog().fingerprint
            regenerated = self.workflows.refresh()
            if regenerated:
                log.info("mcp.workflow_servers_regenerated", workflows=regenerated)
            if now != last or regenerated:
                last = now
                await self.tools_changed()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[MeshMcpServer]:
        """Watch the registry while the context is open; close listen streams on exit."""
        async with side_task(self.watch(), name="mcp-registry-watch"):
            try:
                yield self
            finally:
                self._listen.close()
                await self.tasks.close()

    async def serve_stdio(self) -> None:
        """Serve one session over this process's stdin and stdout until the client closes stdin."""
        async with self.running(), stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
