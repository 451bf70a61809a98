"""The agent node catalogue of seed 004 (``docs/nodes.md``): prompt, llm, tools, tool_loop, embed, memory.

``prompt`` is rendered by the engine; every other type is a call to a built-in agent (:data:`BUILTIN_AGENTS`,
served by ``a2amesh builtins``), with an input the engine builds from the node and the workflow's
``agent_config``.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from a2amesh.durations import Duration
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag.node_base import NodeBase, RetryStrategy
from a2amesh.workflow.dag.spellings import DefinitionModel, also_accepts, field_problem

__all__ = [
    "BUILTIN_AGENTS",
    "AgentConfig",
    "BuiltinNode",
    "EmbedNode",
    "ImageNode",
    "RagNode",
    "LlmNode",
    "McpServerRef",
    "MemoryConfig",
    "MemoryNodeBase",
    "MemoryReadNode",
    "MemoryWriteNode",
    "PromptNode",
    "ToolLoopNode",
    "ToolRef",
    "ToolsNode",
    "tool_refs",
]

BUILTIN_AGENTS = {
    "llm": "builtin-llm",
    "tools": "builtin-tools",
    "tool_loop": "builtin-tool-loop",
    "embed": "builtin-embed",
    "memory_read": "builtin-memory",
    "memory_write": "builtin-memory",
    "rag": "builtin-rag",
    "image": "builtin-image",
}
"""Node type → the built-in agent (served by ``a2amesh builtins``) that runs nodes of that type."""


class McpServerRef(DefinitionModel):
    """An MCP server whose tools are offered to the model, by ``url`` (streamable HTTP) or ``command`` (stdio)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9-]{1,24}$",
        description="Short name; its tools reach the model as {name}__{tool}.",
    )
    url: str | None = Field(None, description="The streamable HTTP endpoint, http(s)://host[:port]/path.")
    headers: dict[str, str] | None = Field(
        None,
        repr=False,
        description="HTTP headers of every request (url only); ${VAR} is replaced from the builtins' environment.",
    )
    command: list[str] | None = Field(
        None, description="The stdio server's command line, e.g. [python, -m, my_server]; started per tool call."
    )
    env: dict[str, str] | None = Field(
        None, repr=False, description="Extra environment of the command (command only); ${VAR} expanded as above."
    )

    @field_validator("command", mode="before")
    @classmethod
    def _command_text(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerRef:
        if (self.url is None) == (self.command is None):
            found = "both" if self.url is not None else "neither"
            raise field_problem("url", f"give exactly one of url (streamable HTTP) or command (stdio); found {found}")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise field_problem(
                    "url", f"{self.url!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000/mcp"
                )
            if self.env is not None:
                raise field_problem("env", "env is for a command; an HTTP server takes headers")
        if self.command is not None:
            if not self.command or not self.command[0].strip():
                raise field_problem("command", "the command is empty; give the program and its arguments")
            for index, arg in enumerate(self.command):
                if "\x00" in arg:
                    raise field_problem("command", f"argument {index} holds a NUL character")
            if self.headers is not None:
                raise field_problem("headers", "headers are for a url; a command takes env")
        return self

    def to_wire(self) -> dict[str, JsonValue]:
        """The reference as the built-in agent receives it."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def merge_mcp_servers(*layers: list[McpServerRef] | None) -> list[McpServerRef]:
    """The servers of every layer (agent_config, then the node); a later layer's server replaces a same-named one."""
    merged: dict[str, McpServerRef] = {}
    for layer in layers:
        for server in layer or []:
            merged[server.name] = server
    return list(merged.values())


def _unique_servers(value: list[McpServerRef] | None) -> list[McpServerRef] | None:
    seen: set[str] = set()
    for server in value or []:
        if server.name in seen:
            raise ValueError(f"two MCP servers are named {server.name!r}; names must differ")
        seen.add(server.name)
    return value


class AgentConfig(DefinitionModel):
    """Model settings for LLM nodes: the workflow's ``agent_config`` defaults, a node's own fields override it."""

    model: str | None = Field(None, description="Model name; the builtins' A2AMESH_LLM_MODEL when omitted.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens the model may produce per call.")
    system: str | None = Field(None, description="Default system prompt (templates allowed) of nodes without one.")
    embedding_model: str | None = Field(
        None, description="Embedding model of embed and memory nodes; the builtins' default when omitted."
    )
    mcp_servers: list[McpServerRef] | None = Field(
        None, description="External MCP servers whose tools every llm, tool_loop and tools node offers."
    )

    _unique = field_validator("mcp_servers")(_unique_servers)


class MemoryConfig(DefinitionModel):
    """How the workflow's memory nodes work (seed 004's ``memoryConfig``); a node's own fields override it."""

    enabled: bool = Field(
        True, description="false: memory_read finds nothing and memory_write stores nothing, without a call."
    )
    agent: str | None = Field(None, min_length=1, description="Whose memory (default: the workflow's name).")
    top_k: int | None = Field(None, ge=1, le=100, description="Entries memory_read returns (default 5).")
    min_score: float | None = Field(None, ge=-1, le=1, description="Least similarity memory_read keeps.")


class ToolRef(DefinitionModel):
    """One tool offered to the model: exactly one of ``agent``, ``workflow`` or ``python``."""

    agent: str | None = Field(None, min_length=1, description="A mesh agent, called with its input schema.")
    workflow: str | None = Field(None, min_length=1, description="A workflow, called with its input schema.")
    python: str | None = Field(
        None, min_length=3, description="A Python function module:function, importable by the builtins process."
    )
    name: str | None = Field(None, description="The tool's name for the model (default: the agent/function name).")

    @model_validator(mode="after")
    def _one_target(self) -> ToolRef:
        given = [name for name in ("agent", "workflow", "python") if getattr(self, name) is not None]
        if len(given) != 1:
            found = f"found {', '.join(given)}" if given else "found none"
            raise field_problem("agent", f"give exactly one of agent, workflow, python ({found})")
        if self.python is not None and ":" not in self.python:
            raise field_problem("python", f"{self.python!r} must be module:function")
        return self

    def to_wire(self) -> dict[str, JsonValue]:
        """The reference as the built-in agent receives it."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


def tool_refs(value: Any) -> Any:
    """``"module:function"`` → ``{python: ...}``, a plain name → ``{agent: name}``; objects as they are."""
    if not isinstance(value, list):
        return value
    return [({"python": v} if ":" in v else {"agent": v}) if isinstance(v, str) else v for v in value]


_TOOL_SHORTHAND = also_accepts({"type": "array", "items": {"type": "string"}})


class BuiltinNode(NodeBase):
    """A node run by a built-in agent of the mesh: durable, retried and timed out like an agent node."""

    retry_strategy: RetryStrategy | None = Field(None, description="Retries of this node (over the workflow's).")
    timeout: Duration | None = Field(None, description="Per-attempt timeout, counting time in the queue.")

    @property
    def builtin_agent(self) -> str:
        """The built-in agent that runs this node."""
        return BUILTIN_AGENTS[str(getattr(self, "type"))]  # noqa: B009 - every subclass has a Literal type

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        """The input sent to the built-in agent (templates still in it), with the workflow's defaults applied."""
        raise NotImplementedError


class _ModelNodeBase(BuiltinNode):
    messages: JsonValue = Field(
        None,
        description="The conversation: a list of chat messages, one text (a user message), or a template. "
        "Omitted: the workflow input (its `messages` list, its `text`, or the whole input as JSON).",
    )
    system: str | None = Field(
        None, description="The system prompt: inline text with templates, or {{a_prompt_node.output.text}}."
    )
    tools: list[ToolRef] = Field(
        default_factory=list,
        description="Tools the model may call (a string: module:function, or an agent name).",
        json_schema_extra=_TOOL_SHORTHAND,
    )

    mcp_servers: list[McpServerRef] | None = Field(
        None, description="External MCP servers whose tools the model may call (over agent_config.mcp_servers)."
    )

    _unique = field_validator("mcp_servers")(_unique_servers)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_shorthand(cls, value: Any) -> Any:
        return tool_refs(value)

    output_schema: dict[str, JsonValue] | None = Field(
        None, description="JSON Schema of a structured answer (sent as response_format json_schema)."
    )
    model: str | None = Field(None, description="Model name (over agent_config.model).")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature (over agent_config).")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens per model call (over agent_config).")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = []
        if self.messages is not None:
            fields.append(("messages", self.messages))
        if self.system is not None:
            fields.append(("system", self.system))
        return fields

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        config = config or AgentConfig()
        system = self.system if self.system is not None else config.system
        return {
            "messages": "{{workflow.input}}" if self.messages is None else self.messages,
            "system": system,
            "tools": [t.to_wire() for t in self.tools],
            "mcp_servers": [m.to_wire() for m in merge_mcp_servers(config.mcp_servers, self.mcp_servers)],
            "output_schema": self.output_schema,
            "model": self.model or config.model,
            "temperature": self.temperature if self.temperature is not None else config.temperature,
            "max_tokens": self.max_tokens or config.max_tokens,
        }


class PromptNode(NodeBase):
    """Assembles a text from templates, in the engine itself (no agent call). Output: ``{"text": ...}``."""

    type: Literal["prompt"] = Field("prompt", description="Node type.")
    template: str = Field(min_length=1, description="The text, with {{…}} templates.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        return [("template", self.template)]


class LlmNode(_ModelNodeBase):
    """One model call. Output: ``{"text", "tool_calls", "messages", "finish_reason"}`` (+ ``output`` when
    ``output_schema`` is set); its token usage lands on the node record."""

    type: Literal["llm"] = Field("llm", description="Node type.")


class ToolLoopNode(_ModelNodeBase):
    """The ReAct loop: model ↔ tools until a final answer or ``max_tool_iterations`` rounds.

    Output: ``{"text", "messages", "rounds", "stopped_reason": "final_answer" | "max_tool_iterations"}``.
    """

    type: Literal["tool_loop"] = Field("tool_loop", description="Node type.")
    max_tool_iterations: int | None = Field(
        None, ge=1, description="Most model rounds (over the workflow's max_tool_iterations, default 10)."
    )
    parallel: bool = Field(True, description="Run the tool calls of one round in parallel.")

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        data = super().call_input(config, max_tool_iterations)
        assert isinstance(data, dict)
        return {
            **data,
            "max_tool_iterations": self.max_tool_iterations or max_tool_iterations,
            "parallel": self.parallel,
        }


class ToolsNode(BuiltinNode):
    """Runs the tool calls of an ``llm`` node. Output: ``{"results", "messages"}`` (the conversation with the
    tool results appended, ready for the next ``llm`` node)."""

    type: Literal["tools"] = Field("tools", description="Node type.")
    source: str | None = Field(
        None,
        description="The llm node whose tool calls run (default: the one llm node among depends_on).",
    )
    tools: list[ToolRef] = Field(
        default_factory=list,
        description="The tools that may be called (a string: module:function, or an agent name).",
        json_schema_extra=_TOOL_SHORTHAND,
    )
    mcp_servers: list[McpServerRef] | None = Field(
        None, description="External MCP servers whose tools may be called (over agent_config.mcp_servers)."
    )
    parallel: bool = Field(True, description="Run the calls in parallel (else in order).")

    _unique = field_validator("mcp_servers")(_unique_servers)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_shorthand(cls, value: Any) -> Any:
        return tool_refs(value)

    def source_node(self, llm_ids: set[str]) -> str | None:
        """The llm node this node reads (``source``, else the one llm node it depends on)."""
        if self.source is not None:
            return self.source
        candidates = [d for d in self.depends_on if d in llm_ids]
        return candidates[0] if len(candidates) == 1 else None

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        raise AssertionError("a tools node's input comes from its source node: use source_input()")

    def source_input(self, source: str, config: AgentConfig | None = None) -> JsonValue:
        """The input sent to the built-in agent, reading the tool calls of the llm node ``source``."""
        servers = merge_mcp_servers(config.mcp_servers if config else None, self.mcp_servers)
        return {
            "tool_calls": f"{{{{{source}.output.tool_calls}}}}",
            "messages": f"{{{{{source}.output.messages}}}}",
            "tools": [t.to_wire() for t in self.tools],
            "mcp_servers": [m.to_wire() for m in servers],
            "parallel": self.parallel,
        }


class EmbedNode(BuiltinNode):
    """Embeds a text or a list of texts. Output: ``{"embeddings": [[…]], "model", "dimensions"}``."""

    type: Literal["embed"] = Field("embed", description="Node type.")
    input: JsonValue = Field(description="A text or a list of texts, with templates.")
    model: str | None = Field(None, description="Embedding model (over agent_config.embedding_model).")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        return [("input", self.input)]

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        return {"op": "embed", "input": self.input, "model": self.model or (config.embedding_model if config else None)}


class MemoryNodeBase(BuiltinNode):
    agent: str | None = Field(
        None, description="Whose memory (default: this workflow's name). Entries are scoped per agent."
    )
    user: str | None = Field(
        None, description="The user the entries belong to, with templates (none: the agent's shared memory)."
    )
    model: str | None = Field(None, description="Embedding model (over agent_config.embedding_model).")

    def with_memory_config(self, data: dict[str, JsonValue], config: MemoryConfig | None) -> dict[str, JsonValue]:
        """The built-in agent's input with the workflow's ``memory_config`` defaults filled in."""
        config = config or MemoryConfig()
        out = {**data, "agent": data.get("agent") or config.agent}
        if isinstance(self, MemoryReadNode):
            out["top_k"] = self.top_k or config.top_k or 5
            out["min_score"] = self.min_score if self.min_score is not None else config.min_score
        return out

    def _scope(self, config: AgentConfig | None) -> dict[str, JsonValue]:
        model = self.model or (config.embedding_model if config else None)
        return {"agent": self.agent, "user": self.user, "model": model}


class MemoryWriteNode(MemoryNodeBase):
    """Stores one memory entry with its embedding (a given key replaces that key's entry).

    Output: ``{"id", "key", "agent", "user", "replaced"}``.
    """

    type: Literal["memory_write"] = Field("memory_write", description="Node type.")
    content: str = Field(min_length=1, description="What to remember, with templates (e.g. an llm node's text).")
    key: str | None = Field(None, description="A key of the entry, with templates; writing a key again replaces it.")
    metadata: JsonValue = Field(None, description="Free-form JSON object stored with the entry, with templates.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = [("content", self.content)]
        for name in ("key", "metadata", "user"):
            value = getattr(self, name)
            if value is not None:
                fields.append((name, value))
        return fields

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        data = {"op": "write", "content": self.content, "key": self.key, "metadata": self.metadata}
        return {**data, **self._scope(config)}


class MemoryReadNode(MemoryNodeBase):
    """Reads the ``top_k`` entries closest to ``query`` (cosine similarity of embeddings).

    Output: ``{"entries": [{id, key, content, metadata, score, created_at, updated_at}], "text"}``.
    """

    type: Literal["memory_read"] = Field("memory_read", description="Node type.")
    query: str = Field(min_length=1, description="What to look for, with templates.")
    top_k: int | None = Field(None, ge=1, le=100, description="Most entries returned (memory_config.top_k, else 5).")
    min_score: float | None = Field(None, ge=-1, le=1, description="Entries less similar than this are left out.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = [("query", self.query)]
        if self.user is not None:
            fields.append(("user", self.user))
        return fields

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        data = {"op": "read", "query": self.query, "top_k": self.top_k, "min_score": self.min_score}
        return {**data, **self._scope(config)}


class RagNode(BuiltinNode):
    """Retrieves the ``top_k`` chunks of a vector store closest to ``query`` (filled by ``a2amesh rag ingest``),
    and with ``answer: true`` answers the query from them with one model call.

    Output: ``{"chunks": [{content, metadata, score, …}], "context", "answer"}`` (``answer`` null unless asked).
    """

    type: Literal["rag"] = Field("rag", description="Node type.")
    store: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="The vector store's name.")
    query: str = Field(min_length=1, description="What to look for, with templates.")
    top_k: int = Field(5, ge=1, le=100, description="Most chunks returned.")
    min_score: float | None = Field(None, ge=-1, le=1, description="Chunks less similar than this are left out.")
    filter: JsonValue = Field(
        None, description="Metadata the chunks must hold, e.g. {source: guide.md}, or a template giving such an object."
    )
    answer: bool = Field(False, description="Also answer the query from the chunks with one model call.")
    system: str | None = Field(None, description="System prompt of the answer (templates allowed).")
    model: str | None = Field(None, description="Model of the answer (over agent_config.model).")
    embedding_model: str | None = Field(None, description="Embedding model (over agent_config.embedding_model).")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature of the answer.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens of the answer.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = [("query", self.query)]
        if self.filter is not None:
            fields.append(("filter", self.filter))
        if self.system is not None:
            fields.append(("system", self.system))
        return fields

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        config = config or AgentConfig()
        return {
            "store": self.store,
            "query": self.query,
            "top_k": self.top_k,
            "min_score": self.min_score,
            "filter": self.filter,
            "answer": self.answer,
            "system": self.system if self.system is not None else config.system,
            "model": self.model or config.model,
            "embedding_model": self.embedding_model or config.embedding_model,
            "temperature": self.temperature if self.temperature is not None else config.temperature,
            "max_tokens": self.max_tokens or config.max_tokens,
        }


class ImageNode(BuiltinNode):
    """Generates images through an OpenAI-compatible images endpoint; each is stored as an artifact.

    Output: ``{"images": [{uri, name, version, media_type, size}], "revised_prompt"}``.
    """

    type: Literal["image"] = Field("image", description="Node type.")
    prompt: str = Field(min_length=1, description="What to draw, with templates.")
    model: str | None = Field(None, description="Image model (default: the builtins' --image-model).")
    size: str | None = Field(None, pattern=r"^\d+x\d+$", description="Size such as 1024x1024.")
    quality: str | None = Field(None, description="Quality, as the endpoint names it (standard, hd, …).")
    style: str | None = Field(None, description="Style, as the endpoint names it (vivid, natural, …).")
    n: int = Field(1, ge=1, le=4, description="How many images.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        return [("prompt", self.prompt)]

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        return {
            "prompt": self.prompt,
            "model": self.model,
            "size": self.size,
            "quality": self.quality,
            "style": self.style,
            "n": self.n,
        }
