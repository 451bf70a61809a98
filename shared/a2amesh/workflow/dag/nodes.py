"""Pydantic models of the DAG format's nodes (SPEC §5.1): one class per node type, and the ``Node`` union.

The orchestration nodes are here; the agent nodes of seed 004 are in :mod:`a2amesh.workflow.dag.agent_nodes`
and the base class and retry strategies in :mod:`a2amesh.workflow.dag.node_base` (all re-exported here).
Spellings as in :mod:`a2amesh.workflow.dag.spellings`; the workflow definition that holds the nodes is
:mod:`a2amesh.workflow.dag.definition`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from a2amesh.durations import Duration
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.dag.agent_nodes import (
    BUILTIN_AGENTS,
    AgentConfig,
    BuiltinNode,
    EmbedNode,
    ImageNode,
    LlmNode,
    MemoryConfig,
    MemoryNodeBase,
    MemoryReadNode,
    MemoryWriteNode,
    PromptNode,
    RagNode,
    ToolLoopNode,
    ToolRef,
    ToolsNode,
)
from a2amesh.workflow.dag.node_base import Backoff, NodeBase, RetryPolicy, RetryStrategy, node_type_name
from a2amesh.workflow.dag.spellings import DefinitionModel, also_accepts, as_list, field_problem

__all__ = [
    "NODE_TYPES",
    "BUILTIN_AGENTS",
    "AgentConfig",
    "AgentNode",
    "Backoff",
    "BuiltinNode",
    "EmbedNode",
    "ImageNode",
    "RagNode",
    "MemoryConfig",
    "MemoryNodeBase",
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


class Skill(DefinitionModel):
    """A skill advertised on the workflow's agent card (A2A ``AgentSkill``)."""

    id: str = Field(description="Unique skill id.")
    name: str = Field(description="Human-readable name.")
    description: str = Field("", description="What the skill does.")
    tags: list[str] = Field(default_factory=list, description="Keywords for discovery.")
    examples: list[str] | None = Field(None, description="Example requests.")
    input_modes: list[str] | None = Field(None, description="Media types the skill accepts.")
    output_modes: list[str] | None = Field(None, description="Media types the skill produces.")


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
    "rag": RagNode,
    "image": ImageNode,
}
"""Node type name → model."""


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
    | Annotated[MemoryWriteNode, Tag("memory_write")]
    | Annotated[RagNode, Tag("rag")]
    | Annotated[ImageNode, Tag("image")],
    Discriminator(_node_tag),
]
"""Any node, discriminated by ``type``."""

CallNode: TypeAlias = AgentNode | WorkflowNode
"""A node that calls one agent or workflow."""
