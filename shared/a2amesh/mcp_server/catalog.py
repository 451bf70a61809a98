"""Cards as MCP tools: which cards become tools, their names, and their input and output schemas.

MCP wants an object at the root of both schemas (and of structured content, before 2026-07-28). A card's
schema that is an object is used as it is; any other schema is wrapped in an object with one property
(``input`` for arguments, ``result`` for the output), its ``$defs`` lifted to the root so references still
resolve. A card without an input schema takes text: its tool takes ``{"text": "..."}``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import mcp_types as types

from a2amesh.diagnostics import SchemaIssue, schema_problem, validate
from a2amesh.logs import get_logger
from a2amesh.mcp_server.settings import McpSettings
from a2amesh.protocol import AgentCard, codes

log = get_logger("mcp")

INPUT_PROPERTY = "input"
RESULT_PROPERTY = "result"
TEXT_PROPERTY = "text"


class InputMode(StrEnum):
    """How a tool's arguments become the message sent to the agent."""

    OBJECT = "object"
    """The arguments are the input (a DataPart)."""
    VALUE = "value"
    """``arguments["input"]`` is the input (a DataPart)."""
    TEXT = "text"
    """``arguments["text"]`` is the input (a TextPart)."""


@dataclass(frozen=True)
class MeshTool:
    """One tool that calls an agent or workflow of the mesh.

    Attributes:
        tool: the MCP definition clients list.
        agent: the agent or workflow called.
        kind: ``"agent"`` or ``"workflow"``.
        input_mode: how arguments become the input.
        wrapped_output: whether structured content is ``{"result": output}`` rather than the output itself.
    """

    tool: types.Tool
    agent: str
    kind: str
    input_mode: InputMode
    wrapped_output: bool

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.tool.name

    def check_arguments(self, arguments: dict[str, Any]) -> list[SchemaIssue]:
        """Every way ``arguments`` break the tool's ``inputSchema``, by path."""
        return validate(arguments, self.tool.input_schema)

    def input_of(self, arguments: dict[str, Any]) -> tuple[str | None, Any]:
        """The message input as ``(text, data)``: one of them is set."""
        if self.input_mode is InputMode.TEXT:
            return str(arguments.get(TEXT_PROPERTY, "")), None
        if self.input_mode is InputMode.VALUE:
            return None, arguments.get(INPUT_PROPERTY)
        return None, arguments

    def structured(self, output: Any) -> Any:
        """The structured content of a result whose output is ``output``."""
        if self.wrapped_output:
            return {RESULT_PROPERTY: output}
        if self.tool.output_schema is None:
            return output if isinstance(output, dict) else None
        return output


def exported(card: AgentCard) -> bool:
    """Whether the card allows MCP servers to expose it (its ``mcp`` extension, default on)."""
    params = card.extension(codes.EXT_MCP) or {}
    return params.get("export", True) is not False


def _lift_defs(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    inner = dict(schema)
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(inner.get(key), dict):
            defs.update(inner.pop(key))
    inner.pop("$schema", None)
    return inner, defs


def _is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "object":
        return True
    return kind is None and "properties" in schema and not any(k in schema for k in ("anyOf", "oneOf", "allOf"))


def _wrap(schema: dict[str, Any], prop: str, description: str) -> dict[str, Any]:
    inner, defs = _lift_defs(schema)
    inner.setdefault("description", description)
    wrapped: dict[str, Any] = {"type": "object", "properties": {prop: inner}, "required": [prop]}
    if defs:
        wrapped["$defs"] = defs
    return wrapped


def input_schema(card: AgentCard) -> tuple[dict[str, Any], InputMode]:
    """The tool's ``inputSchema`` for a card, and how its arguments become the input."""
    schema = card.input_schema
    if schema is None or schema_problem(schema) is not None:
        text = {"type": "string", "description": f"the request to {card.name}"}
        return {"type": "object", "properties": {TEXT_PROPERTY: text}, "required": [TEXT_PROPERTY]}, InputMode.TEXT
    if _is_object_schema(schema):
        return ({"type": "object", **schema} if "type" not in schema else dict(schema)), InputMode.OBJECT
    return _wrap(schema, INPUT_PROPERTY, f"the input of {card.name}"), InputMode.VALUE


def output_schema(card: AgentCard) -> tuple[dict[str, Any] | None, bool]:
    """The tool's ``outputSchema`` for a card (None when it has none), and whether the output is wrapped."""
    schema = card.output_schema
    if schema is None or schema_problem(schema) is not None:
        return None, False
    if _is_object_schema(schema):
        return ({"type": "object", **schema} if "type" not in schema else dict(schema)), False
    return _wrap(schema, RESULT_PROPERTY, f"the output of {card.name}"), True


def describe(card: AgentCard, *, skill_id: str | None = None) -> str:
    """The tool's description: the card's description, then its skills (or the one skill it stands for)."""
    lines = [card.description.strip() or f"The {card.agent_type} {card.name!r} of the mesh."]
    skills = [s for s in card.skills if skill_id is None or s.id == skill_id]
    if skills:
        lines.append("")
        lines.append("Skills:")
        for s in skills:
            text = f"- {s.name}" + (f": {s.description}" if s.description else "")
            if s.examples:
                text += " (e.g. " + "; ".join(s.examples[:3]) + ")"
            lines.append(text)
    return "\n".join(lines)


def tools_of(card: AgentCard, settings: McpSettings) -> list[MeshTool]:
    """The tools one card becomes (none when excluded): one, or one per skill in ``agent_skill`` naming."""
    if not exported(card) or not settings.exposes(card.name):
        return []
    schema, mode = input_schema(card)
    out_schema, wrapped = output_schema(card)
    kind = card.agent_type
    meta = {"a2amesh/agent": card.name, "a2amesh/type": kind}
    annotations = types.ToolAnnotations(title=card.name, open_world_hint=True)
    if settings.tool_names == "agent_skill" and card.skills:
        named = [(f"{card.name}_{s.id}", describe(card, skill_id=s.id)) for s in card.skills]
    else:
        named = [(card.name, describe(card))]
    return [
        MeshTool(
            tool=types.Tool(
                name=name,
                title=card.name,
                description=description,
                input_schema=schema,
                output_schema=out_schema,
                annotations=annotations,
                execution=types.ToolExecution(task_support="optional"),
                _meta=meta,
            ),
            agent=card.name,
            kind=kind,
            input_mode=mode,
            wrapped_output=wrapped,
        )
        for name, description in named
    ]


class Catalog:
    """The mesh tools of a set of cards, with a fingerprint that changes when any tool does."""

    def __init__(self, cards: list[AgentCard], settings: McpSettings, *, reserved: frozenset[str]) -> None:
        self.tools: dict[str, MeshTool] = {}
        for card in cards:
            for tool in tools_of(card, settings):
                if tool.name in reserved or tool.name in self.tools:
                    log.warning("mcp.tool_name_taken", tool=tool.name, agent=card.name)
                    continue
                self.tools[tool.name] = tool
        body = json.dumps(
            [t.tool.model_dump(mode="json", by_alias=True, exclude_none=True) for t in self.tools.values()],
            sort_keys=True,
        )
        self.fingerprint = hashlib.sha256(body.encode()).hexdigest()
