"""Tools of an LLM agent: Python functions, the artifact tools, and mesh peers (agents and workflows) as tools.

Every tool has a JSON Schema for its arguments. :func:`invoke_tool` validates the model's arguments
against it before running anything and turns every problem — bad JSON, schema errors, a raising tool, a
failed peer call — into an error message for the model instead of an exception.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from a2amesh import tracing
from a2amesh.agent.context import TaskContext
from a2amesh.client import make_message
from a2amesh.diagnostics import format_issues, validate
from a2amesh.errors import A2AMeshError, ArtifactError, ConfigError, RpcError, ToolError, TransportError
from a2amesh.protocol import AgentCard, Message, Task, TaskState
from a2amesh.store.artifacts import StoredArtifact
from a2amesh.worker.results import url_part

__all__ = [
    "MAX_RESULT_CHARS",
    "Tool",
    "ToolOutcome",
    "artifact_tools",
    "invoke_tool",
    "peer_tool",
    "peer_tools",
    "tool_from_function",
]

MAX_RESULT_CHARS = 100_000
"""Longest tool result given back to the model; longer results are cut with a note."""

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolHandler = Callable[[dict[str, Any], TaskContext], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    """A function the model may call.

    Attributes:
        name: the name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
        description: what it does, for the model.
        parameters: JSON Schema of the arguments object (validated before the handler runs).
        handler: ``async (arguments, ctx) -> result``; raise :class:`~a2amesh.errors.ToolError` to report a problem.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call gave back: the text for the model, and whether it is an error."""

    content: str
    ok: bool


async def invoke_tool(
    tool: Tool, raw_arguments: str | None, ctx: TaskContext, *, call_id: str | None = None
) -> ToolOutcome:
    """Validate the model's arguments, run the tool, and render its result; never raises (but for cancellation).
    ``call_id``: the model's id of the call (on its span)."""
    if not tracing.enabled:
        return await _invoke(tool, raw_arguments, ctx)
    with tracing.tool_span(tool.name, call_id) as span:
        outcome = await _invoke(tool, raw_arguments, ctx)
        if not outcome.ok:
            tracing.set_attributes(span, None, error=outcome.content)
        return outcome


async def _invoke(tool: Tool, raw_arguments: str | None, ctx: TaskContext) -> ToolOutcome:
    try:
        args = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as e:
        return _error(
            f"the arguments of {tool.name} are not valid JSON ({e.msg} at column {e.colno}); send a JSON object"
        )
    if not isinstance(args, dict):
        return _error(f"the arguments of {tool.name} must be a JSON object, got {type(args).__name__}")
    issues = validate(args, tool.parameters)
    if issues:
        return _error(f"invalid arguments for {tool.name}:\n{format_issues(issues)}")
    try:
        result = await tool.handler(args, ctx)
    except asyncio.CancelledError:
        raise
    except ToolError as e:
        return _error(str(e))
    except Exception as e:
        return _error(f"{tool.name} raised {type(e).__name__}: {e}")
    return ToolOutcome(_render(result), ok=True)


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(f"error: {message}", ok=False)


def _render(result: Any) -> str:
    text = result if isinstance(result, str) else json.dumps(to_jsonable_python(result), ensure_ascii=False)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n…(cut: {len(text)} characters in all)"
    return text


# Python tools
_ARG_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary paragraph and the ``Args:`` descriptions of a Google-style docstring."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section, current = "args", None
            continue
        if stripped.endswith(":") and not line.startswith(" ") and stripped[:-1].isalpha():
            section, current = "other", None
            continue
        if section == "summary":
            if not stripped and summary_lines:
                section = "body"
            elif stripped:
                summary_lines.append(stripped)
        elif section == "args":
            m = _ARG_LINE.match(line)
            if m:
                current = m.group(1).lstrip("*")
                args[current] = m.group(2).strip()
            elif current and stripped:
                args[current] += " " + stripped
    return " ".join(summary_lines), args


def _is_context(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    hint = hints.get(param.name)
    return param.name == "ctx" or (inspect.isclass(hint) and issubclass(hint, TaskContext))


def tool_from_function(fn: Callable[..., Any], *, source: str = "", name: str | None = None) -> Tool:
    """A tool from a Python function; its schema comes from the type hints (or from one pydantic-model parameter).

    A parameter named ``ctx`` (or annotated :class:`~a2amesh.agent.context.TaskContext`) receives the
    task's context and is not shown to the model. The docstring's first paragraph is the description and
    its ``Args:`` section describes the parameters. Plain functions run in a worker thread.

    Raises:
        ConfigError: the function takes ``*args``/``**kwargs``, or its hints cannot make a schema.
    """
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r}"
    if not TOOL_NAME_RE.match(tool_name):
        raise ConfigError(source, "llm.tools", f"{where}: a tool name must match [A-Za-z0-9_-]{{1,64}}")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:
        raise ConfigError(source, "llm.tools", f"{where}: cannot read its type hints: {e}") from e
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    sig = inspect.signature(fn)
    ctx_name: str | None = None
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigError(source, "llm.tools", f"{where}: *args and **kwargs cannot be described to a model")
        if _is_context(p, hints):
            ctx_name = p.name
        else:
            params.append(p)
    single = hints.get(params[0].name) if len(params) == 1 else None
    if inspect.isclass(single) and issubclass(single, BaseModel):
        model: type[BaseModel] = single
        spread = False
    else:
        fields: dict[str, Any] = {}
        for p in params:
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints.get(p.name, Any), Field(default=default, description=arg_docs.get(p.name)))
        try:
            model = create_model(
                f"{tool_name}_arguments", __config__=ConfigDict(protected_namespaces=(), extra="forbid"), **fields
            )
        except Exception as e:
            raise ConfigError(source, "llm.tools", f"{where}: cannot build an argument schema: {e}") from e
        spread = True
    try:
        parameters = model.model_json_schema()
    except Exception as e:
        raise ConfigError(source, "llm.tools", f"{where}: its argument types have no JSON Schema: {e}") from e
    parameters.pop("title", None)
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(args: dict[str, Any], ctx: TaskContext) -> Any:
        try:
            parsed = model.model_validate(args)
        except ValidationError as e:
            raise ToolError(f"invalid arguments for {tool_name}: {e.errors()[0]['msg']}") from e
        kwargs: dict[str, Any] = {p.name: getattr(parsed, p.name) for p in params} if spread else {}
        call_args: tuple[Any, ...] = () if spread else (parsed,)
        if ctx_name is not None:
            kwargs[ctx_name] = ctx
        if is_async:
            return await fn(*call_args, **kwargs)
        result = await asyncio.to_thread(fn, *call_args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    return Tool(tool_name, summary or f"The Python function {tool_name}.", parameters, handler)


# artifact tools
_ANY_JSON = {"description": "Any JSON value: an object, array, string, number, boolean or null."}


async def _save_artifact(args: dict[str, Any], ctx: TaskContext) -> Any:
    try:
        meta = await ctx.save_artifact(
            args["name"], args["content"], media_type=args.get("media_type"), metadata=args.get("metadata")
        )
    except ArtifactError as e:
        raise ToolError(str(e)) from e
    return {
        "saved": meta.name,
        "version": meta.version,
        "uri": meta.uri,
        "size": meta.size,
        "media_type": meta.media_type,
    }


async def _load_artifact(args: dict[str, Any], ctx: TaskContext) -> Any:
    ref = args.get("uri") or args.get("name")
    if not ref:
        raise ToolError("give the name of one of this task's artifacts, or an artifact:// uri")
    art = await load_artifact_ref(ctx, str(ref), args.get("version"))
    meta = art.meta
    value = art.value if not isinstance(art.content, bytes) else f"(binary content of {meta.size} bytes)"
    return {"name": meta.name, "version": meta.version, "media_type": meta.media_type, "content": value}


async def _list_artifacts(args: dict[str, Any], ctx: TaskContext) -> Any:
    try:
        metas = await ctx.list_artifacts()
    except ArtifactError as e:
        raise ToolError(str(e)) from e
    return [{"name": m.name, "latest_version": m.version, "media_type": m.media_type, "size": m.size} for m in metas]


async def load_artifact_ref(ctx: TaskContext, ref: str, version: int | None = None) -> StoredArtifact:
    """Load ``name``, ``name:N`` / ``name:vN`` (this task's artifacts) or an ``artifact://`` URI, for a tool.

    Raises:
        ToolError: nothing readable there (with the reason).
    """
    name = ref
    if not ref.startswith("artifact://") and version is None:
        m = re.fullmatch(r"(.+?):[vV]?(\d+)", ref)
        if m:
            name, version = m.group(1), int(m.group(2))
    try:
        return await ctx.load_artifact(name, version=version)
    except ArtifactError as e:
        raise ToolError(str(e)) from e


def artifact_tools() -> list[Tool]:
    """``save_artifact``, ``load_artifact`` and ``list_artifacts`` over the task's own scope (and URIs)."""
    name = {"type": "string", "description": "Artifact name: letters, digits, '_', '.', '-', e.g. 'output.json'."}
    return [
        Tool(
            "save_artifact",
            "Save content as the next version of a named artifact of this task (versions count from 0). "
            "Objects and arrays are stored as JSON; strings as text unless media_type says otherwise.",
            {
                "type": "object",
                "properties": {
                    "name": name,
                    "content": _ANY_JSON,
                    "media_type": {"type": "string", "description": "MIME type, e.g. text/markdown (optional)."},
                    "metadata": {"type": "object", "description": "Free-form metadata (optional)."},
                },
                "required": ["name", "content"],
            },
            _save_artifact,
        ),
        Tool(
            "load_artifact",
            "Load an artifact: by name (this task's artifacts; the latest version unless version is given, "
            "0 being the first) or by its artifact:// uri.",
            {
                "type": "object",
                "properties": {
                    "name": name,
                    "version": {"type": "integer", "minimum": 0},
                    "uri": {"type": "string", "description": "An artifact:// URI."},
                },
            },
            _load_artifact,
        ),
        Tool(
            "list_artifacts",
            "List this task's artifacts with their latest version.",
            {"type": "object", "properties": {}},
            _list_artifacts,
        ),
    ]


# peers
_INPUT_ARTIFACT = {
    "type": "string",
    "description": "Send a saved artifact as the input instead of parameters: its name (name or name:version, "
    "from your artifacts) or an artifact:// URI.",
}


def _is_object_schema(schema: dict[str, Any] | None) -> bool:
    return isinstance(schema, dict) and (schema.get("type") == "object" or "properties" in schema)


def peer_tool(card: AgentCard) -> Tool:
    """A tool that calls the agent or workflow of ``card`` over the mesh.

    With an object input schema the tool's parameters are that schema's properties (parameter mode);
    any peer also takes ``input_artifact`` instead (artifact mode), which sends the artifact's URI as the
    input, so the callee loads it. Peers without an input schema take a ``message`` text.
    """
    schema = card.input_schema
    kind = card.agent_type
    if _is_object_schema(schema):
        assert schema is not None
        parameters = {k: v for k, v in schema.items() if k not in ("required", "title", "$schema")}
        parameters["type"] = "object"
        parameters["properties"] = {**schema.get("properties", {}), "input_artifact": _INPUT_ARTIFACT}
        mode = "object"
    elif schema is not None:
        parameters = {"type": "object", "properties": {"input": schema, "input_artifact": _INPUT_ARTIFACT}}
        mode = "wrapped"
    else:
        text = {"type": "string", "description": f"What to ask {card.name}."}
        parameters = {"type": "object", "properties": {"message": text, "input_artifact": _INPUT_ARTIFACT}}
        mode = "text"
    skills = "; ".join(f"{s.name}: {s.description}" if s.description else s.name for s in card.skills)
    how = {
        "object": "Pass its input as the parameters",
        "wrapped": "Pass its input as `input`",
        "text": "Pass your request as `message`",
    }[mode]
    description = (
        f"Call the {kind} '{card.name}' over the mesh. {card.description}".strip()
        + (f" Skills: {skills}." if skills else "")
        + f" {how}, or pass `input_artifact` to send one of your saved artifacts as its input."
    )

    async def handler(args: dict[str, Any], ctx: TaskContext) -> Any:
        message = await _peer_message(card.name, mode, schema, args, ctx)
        try:
            task = await ctx.call(card.name, message)
        except TransportError as e:
            raise ToolError(f"{e.reason}: {e}") from e
        except RpcError as e:
            raise ToolError(f"{card.name} answered JSON-RPC error {e.code}: {e}") from e
        except A2AMeshError as e:
            raise ToolError(f"calling {card.name} failed: {e}") from e
        return _peer_result(card.name, task)

    return Tool(card.name, description, parameters, handler)


async def _peer_message(
    name: str, mode: str, schema: dict[str, Any] | None, args: dict[str, Any], ctx: TaskContext
) -> Message:
    ref = args.get("input_artifact")
    if ref is not None:
        extra = sorted(k for k in args if k != "input_artifact")
        if extra:
            raise ToolError(f"give either input_artifact or the other parameters ({', '.join(extra)}), not both")
        art = await load_artifact_ref(ctx, str(ref))
        return make_message(parts=[url_part(art.meta)], context_id=ctx.context_id)
    if mode == "text":
        text = args.get("message")
        if not isinstance(text, str) or not text:
            raise ToolError(f"give `message` (what to ask {name}) or `input_artifact`")
        return make_message(text, context_id=ctx.context_id)
    if mode == "wrapped":
        if "input" not in args:
            raise ToolError(f"give `input` (the input of {name}) or `input_artifact`")
        value = args["input"]
    else:
        value = args
    issues = validate(value, schema)
    if issues:
        raise ToolError(f"the input does not match the input schema of {name}:\n{format_issues(issues)}")
    return make_message(data=value, context_id=ctx.context_id)


def _peer_result(name: str, task: Task) -> Any:
    state = task.status.state
    if state == TaskState.COMPLETED:
        part = task.result_part()
        if part is not None and part.url is not None:
            return {
                "status": "completed",
                "output_artifact": part.url,
                "size": (part.metadata or {}).get("size"),
                "note": "the output is large; load it with load_artifact(uri=...) if you need it",
            }
        return {"status": "completed", "output": task.output()}
    why = task.status.message.text() if task.status.message is not None else ""
    raise ToolError(f"{name} ended {state.value}" + (f": {why}" if why else ""))


def peer_tools(cards: Iterable[AgentCard], patterns: list[str], *, self_name: str, taken: set[str]) -> list[Tool]:
    """Tools for every card whose name matches one of ``patterns`` (globs), but this agent and taken names."""
    out: list[Tool] = []
    for card in cards:
        if card.name == self_name or card.name in taken or not TOOL_NAME_RE.match(card.name):
            continue
        if any(fnmatch.fnmatchcase(card.name, pat) for pat in patterns):
            out.append(peer_tool(card))
    return out
