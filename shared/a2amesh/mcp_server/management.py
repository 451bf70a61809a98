"""The management tools of seed 003 over :mod:`a2amesh.manage`: the same library calls as the management API.

``list_workflows``, ``get_workflow``, ``create_workflow``, ``update_workflow`` (stored definitions, through
:class:`~a2amesh.manage.definitions.DefinitionService`), ``execute_workflow`` and ``list_runs`` (executions,
through :class:`~a2amesh.manage.runs.Runs`). ``get_run``, ``cancel_run``, ``resume_run``, ``list_agents`` and
``get_agent`` are the run tools (:mod:`a2amesh.mcp_server.runs`), which read the execution record through the
same :class:`~a2amesh.manage.executions.Executions`. Every failure is a tool error with the API's message: an
invalid definition lists its errors one per line (``path: message (did you mean …?)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from a2amesh.errors import A2AMeshError
from a2amesh.manage.definitions import (
    DefinitionService,
    InvalidWorkflow,
    WorkflowDetail,
    WorkflowNotFound,
    WorkflowSummary,
    parse_body,
)
from a2amesh.manage.executions import MAX_LIMIT, STATUSES, ExecutionQuery
from a2amesh.manage.failures import RunsError
from a2amesh.manage.runs import ExecuteRequest, Runs
from a2amesh.mcp_server.calls import error_result, watch_task
from a2amesh.mcp_server.providers import ProvidedTool, ToolOutcome, ToolRequest

__all__ = ["ManagementTools", "invalid_text"]

_ID = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[A-Za-z0-9_-]+$"}
_DEFINITION = {
    "type": ["object", "string"],
    "description": "The workflow definition: an object (DAG, seed-000 graph or seed-003 simple workflow), or "
    "its YAML text. Top-level mcpExport: false keeps it from being an MCP tool.",
}
_MESSAGE = {"type": "string", "maxLength": 500, "description": "What this change is (kept with the version)."}


def invalid_text(e: InvalidWorkflow) -> str:
    """An invalid definition's errors, one per line, as the API's 422 lists them."""
    lines = [f"invalid workflow definition ({len(e.errors)} error{'s' if len(e.errors) != 1 else ''}):"]
    for issue in e.errors:
        where = issue.path or "(document)"
        hint = f" (did you mean {issue.suggestion}?)" if issue.suggestion else ""
        lines.append(f"{where}: {issue.message}{hint}")
    return "\n".join(lines)


def _result(data: Any) -> types.CallToolResult:
    structured = data if isinstance(data, dict) else {"items": data}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, indent=2, default=str, ensure_ascii=False))],
        structured_content=structured,
    )


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def _document(value: Any) -> Any:
    """A definition given as an object, or as YAML text (parsed with the API's limits)."""
    if isinstance(value, str):
        return parse_body(value.encode("utf-8"), "application/yaml")
    return value


def _instant(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise RunsError(f"{field}: {value!r} is not an ISO 8601 instant") from None


class ManagementTools:
    """The provider of the management tools.

    Args:
        definitions: the stored workflow definitions (writes announce their change to the executors).
        runs: starts executions, reads their records.
    """

    def __init__(self, definitions: DefinitionService, runs: Runs) -> None:
        self.definitions = definitions
        self.runs = runs

    def tools(self) -> Sequence[ProvidedTool]:
        return [
            self._tool(
                "list_workflows",
                "read",
                "List the stored workflows (id, name, description, format, version, enabled, mcpExport).",
                {"type": "object", "properties": {}},
                self.list_workflows,
                read_only=True,
            ),
            self._tool(
                "get_workflow",
                "read",
                "One stored workflow: its definition, version, ETag and settings (an older version with 'version').",
                {
                    "type": "object",
                    "properties": {"id": _ID, "version": {"type": "integer", "minimum": 1}},
                    "required": ["id"],
                },
                self.get_workflow,
                read_only=True,
            ),
            self._tool(
                "create_workflow",
                "admin",
                "Store a new workflow (its id: the definition's id, else its name); executors serve it within a "
                "second. An invalid definition is refused with every error and where it is.",
                {
                    "type": "object",
                    "properties": {"definition": _DEFINITION, "message": _MESSAGE},
                    "required": ["definition"],
                },
                self.create_workflow,
            ),
            self._tool(
                "update_workflow",
                "admin",
                "Store a new version of an existing workflow; running executions finish on their version. "
                "'if_match' (the ETag last read) refuses the write if someone wrote since.",
                {
                    "type": "object",
                    "properties": {
                        "id": _ID,
                        "definition": _DEFINITION,
                        "if_match": {"type": "string", "minLength": 1},
                        "message": _MESSAGE,
                    },
                    "required": ["id", "definition"],
                },
                self.update_workflow,
            ),
            self._tool(
                "execute_workflow",
                "run",
                "Run a workflow with an input; by default wait for it to finish or pause and return the "
                "execution (status, output, error, trail). wait: false returns its id at once.",
                {
                    "type": "object",
                    "properties": {
                        "workflow": _ID,
                        "input": {"description": "The workflow's input (JSON)."},
                        "branch": {"type": "string", "description": "A branch of a graph workflow to run alone."},
                        "wait": {"type": "boolean", "default": True},
                    },
                    "required": ["workflow"],
                },
                self.execute_workflow,
            ),
            self._tool(
                "list_runs",
                "read",
                "List workflow executions, newest first, filtered by workflow, status, start time or parent; "
                "pass next_cursor back as cursor for the next page.",
                {
                    "type": "object",
                    "properties": {
                        "workflow": _ID,
                        "status": {"type": "string", "enum": list(STATUSES)},
                        "since": {"type": "string", "format": "date-time"},
                        "until": {"type": "string", "format": "date-time"},
                        "parent": {"type": "string", "minLength": 1, "maxLength": 200},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50},
                        "cursor": {"type": "string", "maxLength": 1000, "pattern": "^[A-Za-z0-9_-]+$"},
                    },
                },
                self.list_runs,
                read_only=True,
            ),
        ]

    @staticmethod
    def _tool(
        name: str,
        scope: str,
        description: str,
        schema: dict[str, Any],
        handler: Callable[[dict[str, Any], ToolRequest], Any],
        *,
        read_only: bool = False,
    ) -> ProvidedTool:
        annotations = types.ToolAnnotations(read_only_hint=True) if read_only else None
        tool = types.Tool(name=name, description=description, input_schema=schema, annotations=annotations)
        return ProvidedTool(tool, scope, handler)

    async def list_workflows(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        heads = await self.definitions.all()
        items = [_dump(WorkflowSummary.of(h)) for h in heads if request.access.allows(h.id)]
        return _result({"workflows": items})

    async def get_workflow(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        workflow_id = str(args["id"])
        if not request.access.allows(workflow_id):
            return error_result(f"API key {request.access.key_id!r} may not use workflow {workflow_id!r}")
        try:
            stored = await self.definitions.get(workflow_id, args.get("version"))
        except WorkflowNotFound as e:
            return error_result(str(e))
        return _result(_dump(WorkflowDetail.of_stored(stored)))

    async def create_workflow(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        try:
            document = _document(args["definition"])
            result = await self.definitions.create(document, author=request.access.key_id, message=args.get("message"))
        except InvalidWorkflow as e:
            return error_result(invalid_text(e))
        except A2AMeshError as e:
            return error_result(str(e))
        return _result(_dump(result))

    async def update_workflow(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        workflow_id = str(args["id"])
        try:
            document = _document(args["definition"])
            if await self.definitions.store.head(workflow_id) is None:
                return error_result(f"workflow {workflow_id!r} not found; create it with create_workflow")
            result, _ = await self.definitions.put(
                workflow_id,
                document,
                author=request.access.key_id,
                message=args.get("message"),
                if_match=args.get("if_match"),
            )
        except InvalidWorkflow as e:
            return error_result(invalid_text(e))
        except A2AMeshError as e:
            return error_result(str(e))
        return _result(_dump(result))

    async def execute_workflow(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        workflow = str(args["workflow"])
        if not request.access.allows(workflow):
            return error_result(f"API key {request.access.key_id!r} may not call workflow {workflow!r}")
        body = ExecuteRequest(input=args.get("input"), branch=args.get("branch"))
        execution = None
        try:
            started = await self.runs.execute(workflow, body, headers=request.headers)
            if args.get("wait", True):
                # followed here rather than by Runs, for progress and so that a cancelled request cancels the run
                await watch_task(self.runs.client, workflow, started.execution_id, request.scope)
                execution = await self.runs.executions.get(started.execution_id)
        except RunsError as e:
            errors = getattr(e, "errors", None)
            lines = [f"{x['path']}: {x['message']}" for x in errors] if errors and len(errors) > 1 else []
            return error_result("\n".join([str(e), *lines]))
        except A2AMeshError as e:
            return error_result(f"workflow {workflow!r} could not be run: {e}")
        if execution is None:
            return _result({"execution_id": started.execution_id, "status": "running"})
        detail = _dump(execution)
        detail["execution_id"] = started.execution_id
        failed = execution.status in ("failed", "cancelled")
        result = _result(detail)
        result.is_error = failed
        return result

    async def list_runs(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        try:
            query = ExecutionQuery(
                workflow=args.get("workflow"),
                status=args.get("status"),
                since=_instant(args.get("since"), "since"),
                until=_instant(args.get("until"), "until"),
                parent=args.get("parent"),
                limit=int(args.get("limit", 50)),
                cursor=args.get("cursor"),
            )
            page = await self.runs.executions.list(query)
        except RunsError as e:
            return error_result(str(e))
        items = [_dump(x) for x in page.items if request.access.allows(x.workflow)]
        return _result({"items": items, "next_cursor": page.next_cursor})
