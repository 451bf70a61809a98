"""Pydantic models of the DAG format's nodes (SPEC §5.1): one class per node type, and retry strategies.

Spellings as in :mod:`a2amesh.workflow.dag.spellings`; the workflow definition that holds the nodes is
:mod:`a2amesh.workflow.dag.definition`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from a2amesh.durations import Duration
from a2amesh.workflow.dag.spellings import DefinitionModel, also_accepts, as_list, field_problem
from a2amesh.workflow.templates import JsonValue

__all__ = [
    "NODE_TYPES",
    "BUILTIN_AGENTS",
    "AgentConfig",
    "AgentNode",
    "Backoff",
    "BuiltinNode",
    "EmbedNode",
    "MemoryReadNode",
    "MemoryWriteNode",
    "CallNode",
    "CallNodeBase",
    "ConditionalNode",
    "ForkBranch",
    "ForkNode",
    "HumanReviewNode",
    "JoinNode",
    "LoopNode",
    "MapNode",
    "LlmNode",
    "Node",
    "NodeBase",
    "PromptNode",
    "RetryPolicy",
    "RetryStrategy",
    "Skill",
    "SwitchCase",
    "SwitchNode",
    "ToolLoopNode",
    "ToolRef",
    "ToolsNode",
    "WorkflowNode",
    "node_type_name",
]

RetryPolicy: TypeAlias = Literal["OnFailure", "OnError", "Always"]


class Backoff(DefinitionModel):
    """Exponential backoff between retries (Argo ``retryStrategy.backoff``)."""

    duration: Duration = Field(1.0, description="Delay before the first retry (seconds or 30s, 5m, 1h, 1d).")
    factor: float = Field(2.0, ge=1, description="Multiplier applied to the delay after each retry.")
    max_duration: Duration | None = Field(None, description="Upper bound of any single delay.")


class RetryStrategy(DefinitionModel):
    """When and how often a node is retried (node level over workflow level)."""

    limit: int = Field(3, ge=0, description="Retries after the first attempt (0 = no retry).")
    retry_policy: RetryPolicy = Field(
        "OnFailure",
        description="OnFailure: retry when the callee reported failure; OnError: when the call itself failed "
        "(timeout, transport, JSON-RPC error, redelivery limit); Always: both.",
    )
    backoff: Backoff | None = Field(None, description="Delay between attempts; none means retry at once.")

    def retries_on(self, outcome: Literal["failure", "error"]) -> bool:
        """Whether this policy retries a callee failure (``"failure"``) or a failed call (``"error"``)."""
        if self.retry_policy == "Always":
            return True
        return (self.retry_policy == "OnFailure") == (outcome == "failure")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        if self.backoff is None:
            return 0.0
        seconds = self.backoff.duration * self.backoff.factor ** max(retry - 1, 0)
        if self.backoff.max_duration is not None:
            seconds = min(seconds, self.backoff.max_duration)
        return float(seconds)


class Skill(DefinitionModel):
    """A skill advertised on the workflow's agent card (A2A ``AgentSkill``)."""

    id: str = Field(description="Unique skill id.")
    name: str = Field(description="Human-readable name.")
    description: str = Field("", description="What the skill does.")
    tags: list[str] = Field(default_factory=list, description="Keywords for discovery.")
    examples: list[str] | None = Field(None, description="Example requests.")
    input_modes: list[str] | None = Field(None, description="Media types the skill accepts.")
    output_modes: list[str] | None = Field(None, description="Media types the skill produces.")


class NodeBase(DefinitionModel):
    field_aliases: ClassVar[Mapping[str, str]] = {"dependencies": "depends_on"}

    id: str = Field(min_length=1, description="Unique node id; templates read its output as {{id.output.field}}.")
    depends_on: list[str] = Field(
        default_factory=list,
        description="Nodes that must finish first (alias: dependencies). A node whose dependencies were all "
        "skipped is skipped.",
        json_schema_extra=also_accepts({"type": "string"}),
    )
    when: str | None = Field(None, description="Condition (SPEC §5.3); when false the node is skipped.")

    @field_validator("depends_on", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return as_list(value)

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        if isinstance(data.get("type"), str):
            data["type"] = node_type_name(data["type"])
        return data

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Every node this node waits for (``depends_on``, plus ``wait_for`` of a join), deduplicated."""
        return tuple(dict.fromkeys(self.depends_on))

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        """``(field path, value)`` of every field that may hold templates (conditions excluded)."""
        return []

    def condition_fields(self) -> list[tuple[str, str]]:
        """``(field path, condition)`` of every condition of this node."""
        return [("when", self.when)] if self.when is not None else []

    def branch_targets(self) -> list[tuple[str, str]]:
        """``(field path, node id)`` of the nodes this node routes to (switch, conditional, review)."""
        return []

    @property
    def inner_target(self) -> str | None:
        """The node a map or loop runs on each item/iteration, else ``None``."""
        return None


class CallNodeBase(NodeBase):
    input: JsonValue = Field(None, description="The node input: a JSON value with templates. Omitted: an empty object.")
    instruction: str | None = Field(None, description="Guidance for the callee, with templates.")
    input_schema_override: dict[str, JsonValue] | None = Field(
        None, description="JSON Schema that replaces the callee's own input schema for this node."
    )
    output_schema_override: dict[str, JsonValue] | None = Field(
        None, description="JSON Schema that replaces the callee's own output schema for this node."
    )
    retry_strategy: RetryStrategy | None = Field(None, description="Retries of this node (over the workflow's).")
    timeout: Duration | None = Field(
        None, description="Per-attempt timeout, counting time in the queue and excluding time paused for a human."
    )

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = [("input", self.input)]
        if self.instruction is not None:
            fields.append(("instruction", self.instruction))
        return fields


class AgentNode(CallNodeBase):
    """Calls an agent over the mesh and waits for its result."""

    field_aliases: ClassVar[Mapping[str, str]] = {"dependencies": "depends_on", "agent_persona": "agent_name"}

    type: Literal["agent"] = Field("agent", description="Node type.")
    agent_name: str = Field(min_length=1, description="Name of the agent to call.")


class WorkflowNode(CallNodeBase):
    """Calls another workflow over the mesh, exactly like an agent."""

    type: Literal["workflow"] = Field("workflow", description="Node type.")
    workflow_name: str = Field(min_length=1, description="Name of the workflow to call.")


class SwitchCase(DefinitionModel):
    """One case of a switch: the first case whose condition holds picks its node."""

    field_aliases: ClassVar[Mapping[str, str]] = {"when": "condition", "then": "node"}

    condition: str = Field(description="Condition (alias: when).")
    node: str = Field(min_length=1, description="Node to run when the condition holds (alias: then).")


class SwitchNode(NodeBase):
    """Multi-way branch: runs the first case whose condition holds, else ``default``; the rest are not taken."""

    type: Literal["switch"] = Field("switch", description="Node type.")
    cases: list[SwitchCase] = Field(min_length=1, description="Cases, evaluated in order.")
    default: str | None = Field(None, description="Node to run when no case holds.")

    def condition_fields(self) -> list[tuple[str, str]]:
        return [
            *super().condition_fields(),
            *((f"cases[{i}].condition", c.condition) for i, c in enumerate(self.cases)),
        ]

    def branch_targets(self) -> list[tuple[str, str]]:
        targets = [(f"cases[{i}].node", case.node) for i, case in enumerate(self.cases)]
        if self.default is not None:
            targets.append(("default", self.default))
        return targets


class ConditionalNode(NodeBase):
    """Two-way branch: runs ``true_branch`` or ``false_branch``; the other is not taken."""

    type: Literal["conditional"] = Field("conditional", description="Node type.")
    condition: str = Field(description="Condition deciding the branch.")
    true_branch: str = Field(min_length=1, description="Node to run when the condition holds.")
    false_branch: str | None = Field(None, description="Node to run when it does not.")

    def condition_fields(self) -> list[tuple[str, str]]:
        return [*super().condition_fields(), ("condition", self.condition)]

    def branch_targets(self) -> list[tuple[str, str]]:
        targets = [("true_branch", self.true_branch)]
        if self.false_branch is not None:
            targets.append(("false_branch", self.false_branch))
        return targets


class MapNode(NodeBase):
    """Runs its target node once per item, in parallel up to ``concurrency_limit``.

    Output: ``{"results": [...]}`` in item order.
    """

    type: Literal["map"] = Field("map", description="Node type.")
    items: JsonValue = Field(None, description="The list to iterate: a template such as {{workflow.input.items}}.")
    with_items: list[JsonValue] | None = Field(None, description="Argo style: a literal list of items.")
    with_param: str | None = Field(None, description="Argo style: a template giving a list (or a JSON text of a list).")
    node: str = Field(min_length=1, description="The node run per item; it reads {{_map_item}} and {{_map_index}}.")
    max_items: int = Field(100, ge=1, description="More items than this fail the node.")
    concurrency_limit: int | None = Field(None, ge=1, description="Most items in flight at once (none: no limit).")

    @model_validator(mode="after")
    def _one_source(self) -> MapNode:
        given = [name for name in ("items", "with_items", "with_param") if getattr(self, name) is not None]
        if len(given) != 1:
            found = f"found {', '.join(given)}" if given else "found none"
            raise field_problem("items", f"give exactly one of items, with_items, with_param ({found})")
        return self

    @property
    def item_source(self) -> tuple[str, JsonValue]:
        """``(field, value)`` of the field that gives the items."""
        for name in ("items", "with_items", "with_param"):
            value = getattr(self, name)
            if value is not None:
                return name, value
        raise AssertionError("validated: one item source is set")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        return [self.item_source]

    @property
    def inner_target(self) -> str | None:
        return self.node


class ForkBranch(DefinitionModel):
    """One branch of a fork: an agent call whose output lands under ``output_key``."""

    field_aliases: ClassVar[Mapping[str, str]] = {"agent_persona": "agent_name"}

    id: str = Field(min_length=1, description="Branch id, unique within the fork.")
    agent_name: str = Field(min_length=1, description="Agent to call.")
    input: JsonValue = Field(None, description="Input with templates. Omitted: an empty object.")
    instruction: str | None = Field(None, description="Guidance for the agent, with templates.")
    output_key: str | None = Field(None, description="Key of this branch's output in the fork's output (default: id).")

    @property
    def key(self) -> str:
        """The key of this branch's output in the fork's output."""
        return self.output_key or self.id


class ForkNode(NodeBase):
    """Runs its branches in parallel; output ``{output_key: branch output}``."""

    type: Literal["fork"] = Field("fork", description="Node type.")
    branches: list[ForkBranch] = Field(min_length=1, description="The parallel branches.")
    retry_strategy: RetryStrategy | None = Field(None, description="Retries of each branch call.")
    timeout: Duration | None = Field(None, description="Per-attempt timeout of each branch call.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = []
        for i, branch in enumerate(self.branches):
            fields.append((f"branches[{i}].input", branch.input))
            if branch.instruction is not None:
                fields.append((f"branches[{i}].instruction", branch.instruction))
        return fields


class JoinNode(NodeBase):
    """Waits for nodes by strategy; output ``{"results": {id: output|null}, "completed": [ids]}``."""

    type: Literal["join"] = Field("join", description="Node type.")
    wait_for: list[str] = Field(
        min_length=1,
        description="The nodes to wait for (they are dependencies too).",
        json_schema_extra=also_accepts({"type": "string"}),
    )
    strategy: Literal["all", "any", "n_of_m"] = Field(
        "all", description="all: every node; any: the first success; n_of_m: the n-th success."
    )
    n: int | None = Field(None, ge=1, description="Successes needed with strategy n_of_m.")

    @field_validator("wait_for", mode="before")
    @classmethod
    def _one_or_many_wait(cls, value: Any) -> Any:
        return as_list(value)

    @model_validator(mode="after")
    def _quorum(self) -> JoinNode:
        if self.strategy == "n_of_m":
            if self.n is None:
                raise field_problem("n", "strategy n_of_m needs n")
            if self.n > len(self.wait_for):
                raise field_problem("n", f"n is {self.n} but wait_for lists {len(self.wait_for)} node(s)")
        elif self.n is not None:
            raise field_problem("n", f"n is only used with strategy n_of_m (strategy is {self.strategy})")
        return self

    @property
    def dependencies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.depends_on, *self.wait_for]))

    @property
    def quorum(self) -> int:
        """How many of ``wait_for`` must succeed."""
        return {"all": len(self.wait_for), "any": 1}.get(self.strategy, self.n or 1)


class LoopNode(NodeBase):
    """Do-while: runs its target node, then repeats while ``condition`` holds, at most ``max_iterations`` times.

    Output: ``{"iterations_completed": n, "stopped_reason": "condition_false" | "max_iterations"}``.
    """

    type: Literal["loop"] = Field("loop", description="Node type.")
    node: str = Field(min_length=1, description="The node run each iteration; it reads {{_loop_iteration}}.")
    condition: str = Field(description="Evaluated after each iteration; the loop goes on while it holds.")
    max_iterations: int = Field(100, ge=1, description="The loop stops after this many iterations.")
    delay: Duration | None = Field(None, description="Pause between iterations.")

    def condition_fields(self) -> list[tuple[str, str]]:
        return [*super().condition_fields(), ("condition", self.condition)]

    @property
    def inner_target(self) -> str | None:
        return self.node


class HumanReviewNode(NodeBase):
    """Pauses the execution until a human approves, edits or rejects ``data``.

    Output: the approved (or edited) data. On reject: runs ``on_reject`` (a node that depends on this
    one; other dependents are not taken), or fails the node.
    """

    type: Literal["human_review"] = Field("human_review", description="Node type.")
    prompt: str = Field(description="What the reviewer is asked, with templates.")
    data: JsonValue = Field(None, description="The data to review, with templates.")
    edit_schema: dict[str, JsonValue] | None = Field(None, description="JSON Schema an edited answer must match.")
    timeout: Duration | None = Field(None, description="How long to wait for the reviewer.")
    on_timeout: Literal["approve", "reject", "fail"] = Field("fail", description="What a timeout counts as.")
    on_reject: str = Field("fail", min_length=1, description="'fail', or the node to run when rejected.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        return [("prompt", self.prompt), ("data", self.data)]

    def branch_targets(self) -> list[tuple[str, str]]:
        return [] if self.on_reject == "fail" else [("on_reject", self.on_reject)]


BUILTIN_AGENTS = {
    "llm": "builtin-llm",
    "tools": "builtin-tools",
    "tool_loop": "builtin-tool-loop",
    "embed": "builtin-embed",
    "memory_read": "builtin-memory",
    "memory_write": "builtin-memory",
}
"""Node type → the built-in agent (served by ``a2amesh builtins``) that runs nodes of that type."""


class AgentConfig(DefinitionModel):
    """Model settings for LLM nodes: the workflow's ``agent_config`` defaults, a node's own fields override it."""

    model: str | None = Field(None, description="Model name; the builtins' A2AMESH_LLM_MODEL when omitted.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens the model may produce per call.")
    system: str | None = Field(None, description="Default system prompt (templates allowed) of nodes without one.")
    embedding_model: str | None = Field(
        None, description="Embedding model of embed and memory nodes; the builtins' default when omitted."
    )


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


def _tool_refs(value: Any) -> Any:
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

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_shorthand(cls, value: Any) -> Any:
        return _tool_refs(value)

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
        min_length=1,
        description="The tools that may be called (a string: module:function, or an agent name).",
        json_schema_extra=_TOOL_SHORTHAND,
    )
    parallel: bool = Field(True, description="Run the calls in parallel (else in order).")

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_shorthand(cls, value: Any) -> Any:
        return _tool_refs(value)

    def source_node(self, llm_ids: set[str]) -> str | None:
        """The llm node this node reads (``source``, else the one llm node it depends on)."""
        if self.source is not None:
            return self.source
        candidates = [d for d in self.depends_on if d in llm_ids]
        return candidates[0] if len(candidates) == 1 else None

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        raise AssertionError("a tools node's input comes from its source node: use source_input()")

    def source_input(self, source: str) -> JsonValue:
        """The input sent to the built-in agent, reading the tool calls of the llm node ``source``."""
        return {
            "tool_calls": f"{{{{{source}.output.tool_calls}}}}",
            "messages": f"{{{{{source}.output.messages}}}}",
            "tools": [t.to_wire() for t in self.tools],
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
        return {"op": "embed", "input": self.input, "model": self.model or (config and config.embedding_model)}


class _MemoryNodeBase(BuiltinNode):
    agent: str | None = Field(
        None, description="Whose memory (default: this workflow's name). Entries are scoped per agent."
    )
    user: str | None = Field(
        None, description="The user the entries belong to, with templates (none: the agent's shared memory)."
    )
    model: str | None = Field(None, description="Embedding model (over agent_config.embedding_model).")

    def _scope(self, config: AgentConfig | None) -> dict[str, JsonValue]:
        return {"agent": self.agent, "user": self.user, "model": self.model or (config and config.embedding_model)}


class MemoryWriteNode(_MemoryNodeBase):
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


class MemoryReadNode(_MemoryNodeBase):
    """Reads the ``top_k`` entries closest to ``query`` (cosine similarity of embeddings).

    Output: ``{"entries": [{id, key, content, metadata, score, created_at, updated_at}], "text"}``.
    """

    type: Literal["memory_read"] = Field("memory_read", description="Node type.")
    query: str = Field(min_length=1, description="What to look for, with templates.")
    top_k: int = Field(5, ge=1, le=100, description="Most entries returned.")
    min_score: float | None = Field(None, ge=-1, le=1, description="Entries less similar than this are left out.")

    def templated_fields(self) -> list[tuple[str, JsonValue]]:
        fields: list[tuple[str, JsonValue]] = [("query", self.query)]
        if self.user is not None:
            fields.append(("user", self.user))
        return fields

    def call_input(self, config: AgentConfig | None, max_tool_iterations: int) -> JsonValue:
        data = {"op": "read", "query": self.query, "top_k": self.top_k, "min_score": self.min_score}
        return {**data, **self._scope(config)}


NODE_TYPES: dict[str, type[NodeBase]] = {
    "agent": AgentNode,
    "workflow": WorkflowNode,
    "switch": SwitchNode,
    "conditional": ConditionalNode,
    "map": MapNode,
    "fork": ForkNode,
    "join": JoinNode,
    "loop": LoopNode,
    "human_review": HumanReviewNode,
    "prompt": PromptNode,
    "llm": LlmNode,
    "tools": ToolsNode,
    "tool_loop": ToolLoopNode,
    "embed": EmbedNode,
    "memory_read": MemoryReadNode,
    "memory_write": MemoryWriteNode,
}
"""Node type name → model."""


_SEED_TYPES = {
    "agent.llm": "llm",
    "agent.tool_executor": "tools",
    "agent.tool_loop": "tool_loop",
    "agent.prompt": "prompt",
    "agent.embed": "embed",
    "agent.memory.read": "memory_read",
    "agent.memory.write": "memory_write",
}
"""Seed 004's spellings of the agent node types."""


def node_type_name(value: str) -> str:
    """Normalize a node type as written (``humanReview``, ``Human-Review``, ``agent.toolLoop``) to its name."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value.strip()).replace("-", "_").lower()
    return _SEED_TYPES.get(snake, snake)


def _node_tag(value: Any) -> str | None:
    if isinstance(value, Mapping):
        kind = value.get("type")
        return node_type_name(kind) if isinstance(kind, str) else None
    kind = getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


Node: TypeAlias = Annotated[
    Annotated[AgentNode, Tag("agent")]
    | Annotated[WorkflowNode, Tag("workflow")]
    | Annotated[SwitchNode, Tag("switch")]
    | Annotated[ConditionalNode, Tag("conditional")]
    | Annotated[MapNode, Tag("map")]
    | Annotated[ForkNode, Tag("fork")]
    | Annotated[JoinNode, Tag("join")]
    | Annotated[LoopNode, Tag("loop")]
    | Annotated[HumanReviewNode, Tag("human_review")]
    | Annotated[PromptNode, Tag("prompt")]
    | Annotated[LlmNode, Tag("llm")]
    | Annotated[ToolsNode, Tag("tools")]
    | Annotated[ToolLoopNode, Tag("tool_loop")]
    | Annotated[EmbedNode, Tag("embed")]
    | Annotated[MemoryReadNode, Tag("memory_read")]
    | Annotated[MemoryWriteNode, Tag("memory_write")],
    Discriminator(_node_tag),
]
"""Any node, discriminated by ``type``."""

CallNode: TypeAlias = AgentNode | WorkflowNode
"""A node that calls one agent or workflow."""
