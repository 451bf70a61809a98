"""The conversation of a built-in model call: the messages a node sends, and the inputs they are read from."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from a2amesh.workflow.dag.agent_nodes import McpServerRef, ToolRef, tool_refs

__all__ = ["BuiltinInputError", "LlmRequest", "ToolsRequest", "as_messages", "parse_input", "with_system"]

_ROLES = frozenset({"system", "user", "assistant", "tool"})


M = TypeVar("M", bound=BaseModel)


class BuiltinInputError(ValueError):
    """The input of a built-in agent is not what its node type sends (with the field and why)."""


def parse_input(model: type[M], data: Any) -> M:
    """``data`` as ``model``.

    Raises:
        BuiltinInputError: naming the first field that is wrong and why.
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p != "request") or "input"
        more = f" ({len(e.errors())} problems in all)" if len(e.errors()) > 1 else ""
        raise BuiltinInputError(f"{where}: {first['msg']}{more}") from e


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LlmRequest(_Input):
    """What the engine sends the ``llm`` and ``tool_loop`` built-in agents (from the node and agent_config)."""

    messages: Any = Field(description="Chat messages, a text, or any JSON (sent as a user message).")
    system: str | None = None
    tools: list[ToolRef] = Field(default_factory=list)
    mcp_servers: list[McpServerRef] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = False
    max_tool_iterations: int = Field(10, ge=1)
    parallel: bool = True

    @field_validator("tools", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return tool_refs(value)

    def options(self) -> dict[str, Any]:
        """Request fields over the model's defaults (None: the default)."""
        options: dict[str, Any] = {
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.output_schema is not None:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": self.output_schema, "strict": False},
            }
        return options


class ToolCallData(_Input):
    """One tool call as an ``llm`` node outputs it."""

    id: str
    name: str
    arguments: str | dict[str, Any] = "{}"

    def raw_arguments(self) -> str:
        """The arguments as the model sent them (JSON text)."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class ToolsRequest(_Input):
    """What the engine sends the ``tools`` built-in agent."""

    tool_calls: list[ToolCallData] | None = None
    messages: Any = None
    tools: list[ToolRef] = Field(default_factory=list)
    mcp_servers: list[McpServerRef] = Field(default_factory=list)
    parallel: bool = True
    stream: bool = False

    @field_validator("tools", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return tool_refs(value)


def render_value(value: Any) -> str:
    """A user message for any input: its text, or its JSON in a fenced block."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"text"} and isinstance(value["text"], str):
        return value["text"]
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n```"


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") in _ROLES


def as_messages(value: Any) -> list[dict[str, Any]]:
    """The conversation a value stands for.

    A list of chat messages is taken as it is; an object with a ``messages`` list is that list; anything
    else (a text, ``{"text": …}``, other JSON) is one user message.

    Raises:
        ValueError: a list that holds something other than chat messages (naming the first bad item).
    """
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if isinstance(value, list):
        for index, item in enumerate(value):
            if not _is_message(item):
                raise ValueError(
                    f"messages[{index}] is not a chat message (an object with role system, user, assistant or "
                    f"tool): {json.dumps(item, default=str)[:120]}"
                )
        return [dict(item) for item in value]
    return [{"role": "user", "content": render_value(value)}]


def with_system(system: str | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages sent to the model: the node's system prompt first (replacing any earlier one)."""
    if system is None or not system.strip():
        return messages
    return [{"role": "system", "content": system}, *(m for m in messages if m.get("role") != "system")]
