"""Tools over the live mesh alone: ``list_agents``, ``get_agent`` (cards), ``get_run`` (A2A GetTask),
``cancel_run`` (A2A CancelTask) and ``resume_run`` (a review's answer, or an agent's requested input).

A run is a task: its id is what a tool result's ``_meta["a2amesh/run_id"]`` says. ``agent`` names the agent
or workflow that runs it; for a workflow's execution it may be left out (it is read from the execution
record).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import mcp_types as types

from a2amesh.client import Client, make_message
from a2amesh.errors import A2AMeshError
from a2amesh.manage.executions import ExecutionDetail, Executions
from a2amesh.manage.failures import NotFound
from a2amesh.mcp_server.calls import CANCEL_TIMEOUT, MeshCaller, error_result
from a2amesh.mcp_server.catalog import exported
from a2amesh.mcp_server.providers import ProvidedTool, ToolOutcome, ToolRequest
from a2amesh.mcp_server.review import DECISIONS, review_request
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.protocol import Task, TaskState
from a2amesh.protocol.states import state_word
from a2amesh.store.executions import ExecutionStore

_RUN_ID = {"type": "string", "minLength": 1, "description": "The run's id (a tool result's a2amesh/run_id)."}
_AGENT = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_-]+$",
    "description": "The agent or workflow running it (optional for a workflow's run).",
}
_RUN_ARGS = {"type": "object", "properties": {"run_id": _RUN_ID, "agent": _AGENT}, "required": ["run_id"]}

RUN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "agent": {"type": "string"},
        "status": {"type": "string", "description": "running, paused, completed, failed or cancelled"},
        "output": {"description": "The output, once completed."},
        "error": {"type": ["string", "null"]},
        "review": {"type": ["object", "null"], "description": "The review waited for, when paused for one."},
        "trail": {"type": "array", "items": {"type": "object"}, "description": "A workflow run's event log."},
        "execution": {"type": "object", "description": "A workflow run's execution record (docs/api.md)."},
    },
    "required": ["run_id", "agent", "status"],
}


def summary(agent: str, task: Task) -> dict[str, Any]:
    """A run as ``get_run`` shows it."""
    state = task.status.state
    text = task.status.message.text() if task.status.message else ""
    out: dict[str, Any] = {"run_id": task.id, "agent": agent, "status": state_word(state)}
    if state == TaskState.COMPLETED:
        out["output"] = task.output()
    elif state in (TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED):
        out["error"] = text or None
    elif state == TaskState.INPUT_REQUIRED:
        out["review"] = review_request(task)
        if out["review"] is None:
            out["error"] = None
            out["question"] = text
    return out


def _result(data: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, indent=2, default=str, ensure_ascii=False))],
        structured_content=data,
    )


class RunTools:
    """The provider of the run tools.

    Args:
        client: the mesh client (cards, GetTask, CancelTask, calls).
        caller: follows resumed runs (progress, cancellation).
        settings: which cards are exposed as tools (``list_agents`` says so).
        executions: finds the workflow of an execution when ``agent`` is left out (None: ``agent`` is required).
        details: reads a workflow run's execution record for ``get_run`` (trail, output, error), None: A2A only.
    """

    def __init__(
        self,
        client: Client,
        caller: MeshCaller,
        settings: McpSettings,
        executions: ExecutionStore | None,
        details: Executions | None = None,
    ) -> None:
        self.client = client
        self.caller = caller
        self.settings = settings
        self.executions = executions
        self.details = details

    def tools(self) -> Sequence[ProvidedTool]:
        return [
            ProvidedTool(
                types.Tool(
                    name="list_agents",
                    description="List the live agents and workflows of the mesh (name, type, description, skills).",
                    input_schema={
                        "type": "object",
                        "properties": {"type": {"type": "string", "enum": ["agent", "workflow"]}},
                    },
                    output_schema={
                        "type": "object",
                        "properties": {"agents": {"type": "array", "items": {"type": "object"}}},
                        "required": ["agents"],
                    },
                    annotations=types.ToolAnnotations(read_only_hint=True),
                ),
                "read",
                self.list_agents,
            ),
            ProvidedTool(
                types.Tool(
                    name="get_agent",
                    description="The A2A card of one live agent or workflow (schemas, skills, definition).",
                    input_schema={"type": "object", "properties": {"name": _AGENT}, "required": ["name"]},
                    annotations=types.ToolAnnotations(read_only_hint=True),
                ),
                "read",
                self.get_agent,
            ),
            ProvidedTool(
                types.Tool(
                    name="get_run",
                    description="A run's status, output or error, and the review it waits for (A2A GetTask); "
                    "for a workflow's run also its execution record and event trail.",
                    input_schema=_RUN_ARGS,
                    output_schema=RUN_SCHEMA,
                    annotations=types.ToolAnnotations(read_only_hint=True),
                ),
                "read",
                self.get_run,
            ),
            ProvidedTool(
                types.Tool(
                    name="cancel_run",
                    description="Cancel a run, and with it every call and sub-workflow it started (A2A CancelTask).",
                    input_schema=_RUN_ARGS,
                    output_schema=RUN_SCHEMA,
                    annotations=types.ToolAnnotations(destructive_hint=True),
                ),
                "run",
                self.cancel_run,
            ),
            ProvidedTool(
                types.Tool(
                    name="resume_run",
                    description="Answer a paused run and follow it to its next outcome: a review's decision "
                    "(approve, reject, or edit with the edited data, checked against the review's edit_schema), "
                    "or the text an agent asked for.",
                    input_schema={
                        "type": "object",
                        "properties": {
                            "run_id": _RUN_ID,
                            "agent": _AGENT,
                            "decision": {"type": "string", "enum": list(DECISIONS)},
                            "data": {"description": "For 'edit': the data under review as it should be."},
                            "reason": {"type": "string", "description": "Why (kept with the decision)."},
                            "path": {"type": "string", "description": "The review to answer when several wait."},
                            "answer": {"type": "string", "description": "The input an agent (not a review) asked for."},
                        },
                        "required": ["run_id"],
                    },
                    output_schema=RUN_SCHEMA,
                ),
                "review",
                self.resume_run,
            ),
        ]

    async def list_agents(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        kind = args.get("type")
        agents = []
        for card in self.client.cards():
            if kind is not None and card.agent_type != kind:
                continue
            agents.append(
                {
                    "name": card.name,
                    "type": card.agent_type,
                    "description": card.description,
                    "skills": [{"id": s.id, "name": s.name, "description": s.description} for s in card.skills],
                    "tool": exported(card) and self.settings.exposes(card.name) and request.access.allows(card.name),
                }
            )
        return _result({"agents": agents})

    async def get_agent(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        name = str(args["name"])
        card = self.client.registry.get(name)
        if card is None:
            live = ", ".join(c.name for c in self.client.cards()) or "none"
            return error_result(f"no live agent or workflow named {name!r} (live: {live})")
        data = card.model_dump(mode="json", by_alias=True, exclude_none=True)
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(data, indent=2, ensure_ascii=False))], structured_content=data
        )

    async def _agent_of(self, args: dict[str, Any], request: ToolRequest) -> str:
        agent = args.get("agent")
        if not agent:
            record = await self.executions.record(str(args["run_id"])) if self.executions is not None else None
            if not record or not record.get("workflow"):
                raise LookupError(
                    f"run {args['run_id']!r} is no workflow execution known to this mesh; "
                    "give 'agent' (the agent or workflow running it)"
                )
            agent = record["workflow"]
        if not request.access.allows(str(agent)):
            raise PermissionError(f"API key {request.access.key_id!r} may not use {agent!r}")
        return str(agent)

    async def _detail(self, run_id: str) -> ExecutionDetail | None:
        if self.details is None:
            return None
        try:
            return await self.details.get(run_id)
        except NotFound:
            return None

    async def get_run(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        run_id = str(args["run_id"])
        try:
            detail = await self._detail(run_id)
            if detail is not None and not args.get("agent"):
                args = {**args, "agent": detail.workflow}
            agent = await self._agent_of(args, request)
        except (A2AMeshError, LookupError, PermissionError) as e:
            return error_result(str(e))
        try:
            task = await self.client.get_task(agent, run_id, history_length=0, headers=request.headers)
            out = summary(agent, task)
        except A2AMeshError as e:
            if detail is None:
                return error_result(str(e))
            # the workflow's executor is gone: the record still tells how the run went
            out = {"run_id": run_id, "agent": agent, "status": detail.status}
        if detail is not None:
            if detail.status == "completed":
                out.setdefault("output", detail.output)
            if detail.error:
                out["error"] = detail.error
            out["trail"] = detail.trail
            out["execution"] = detail.model_dump(mode="json", exclude={"trail"})
        return _result(out)

    async def cancel_run(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        try:
            agent = await self._agent_of(args, request)
            task = await self.client.cancel_task(
                agent, str(args["run_id"]), timeout=CANCEL_TIMEOUT, headers=request.headers
            )
        except (A2AMeshError, LookupError, PermissionError) as e:
            return error_result(str(e))
        return _result(summary(agent, task))

    async def resume_run(self, args: dict[str, Any], request: ToolRequest) -> ToolOutcome:
        run_id = str(args["run_id"])
        decision = args.get("decision")
        if (decision is None) == (args.get("answer") is None):
            return error_result("give exactly one of 'decision' (a review) and 'answer' (an agent's question)")
        if decision == "edit" and "data" not in args:
            return error_result("data: an 'edit' needs the edited data")
        try:
            agent = await self._agent_of(args, request)
            current = await self.client.get_task(agent, run_id, history_length=0, headers=request.headers)
            if current.status.state != TaskState.INPUT_REQUIRED:
                status = state_word(current.status.state)
                return error_result(f"run {run_id} of {agent} is {status}, not paused")
            if decision is not None:
                body = {k: args[k] for k in ("decision", "data", "reason", "path") if k in args}
                message = make_message(data=body, task_id=run_id, context_id=current.context_id)
            else:
                message = make_message(str(args["answer"]), task_id=run_id, context_id=current.context_id)
            task = await self.caller.follow(agent, message, request.scope)
        except (A2AMeshError, LookupError, PermissionError) as e:
            return error_result(str(e))
        return _result(summary(agent, task))
