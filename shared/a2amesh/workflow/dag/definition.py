"""Pydantic models of the DAG workflow definition format (SPEC §5.1).

Every field is accepted in snake_case and in camelCase, and Solace Agent Mesh / Argo spellings are
accepted too (``dependencies`` for ``depends_on``, ``withItems``, ``withParam``, ``retryStrategy``,
``when``/``then`` in switch cases, ``agent_persona``). Unknown fields are refused with a
did-you-mean. The models hold the definition only: :mod:`a2amesh.workflow.dag.validation` checks the
graph (dependencies, cycles, targets, templates, conditions) and :mod:`a2amesh.workflow.loader`
reads files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from a2amesh.diagnostics import did_you_mean
from a2amesh.durations import Duration
from a2amesh.errors import DefinitionError, ScheduleError
from a2amesh.schedules import parse_schedule
from a2amesh.workflow.templates import JsonValue, TemplateScope

__all__ = [
    "NODE_TYPES",
    "AgentNode",
    "Backoff",
    "CallNode",
    "ConditionalNode",
    "DefinitionProblem",
    "ExitHandlers",
    "ForkBranch",
    "ForkNode",
    "HumanReviewNode",
    "JoinNode",
    "LoopNode",
    "MapNode",
    "Node",
    "RetryPolicy",
    "RetryStrategy",
    "Skill",
    "SwitchCase",
    "SwitchNode",
    "WorkflowDefinition",
    "WorkflowNode",
    "camel_case",
    "node_type_name",
    "parse_definition",
    "problems_from_error",
]

RetryPolicy: TypeAlias = Literal["OnFailure", "OnError", "Always"]


def camel_case(name: str) -> str:
    """``input_schema_override`` → ``inputSchemaOverride``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_SPELLINGS: dict[type[BaseModel], dict[str, str]] = {}


def _field_problem(field: str, problem: str) -> PydanticCustomError:
    """An error about one field, raised from a model-level check (the field lands in ``ctx``)."""
    return PydanticCustomError("definition_field", "{field}: {problem}", {"field": field, "problem": problem})


def _schema_aliases(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Add each accepted alias to a model's JSON Schema, so editors accept SAM/Argo spellings too."""
    if not issubclass(model, _Model):
        return
    properties: dict[str, Any] = schema.get("properties", {})
    spellings = model.spellings()
    for spelling, field in spellings.items():
        if spelling != field and field in properties:
            described = {k: v for k, v in properties[field].items() if k not in ("title", "description")}
            properties[spelling] = {"description": f"Alias of `{field}`.", **described}
    required: list[str] = schema.get("required", [])
    alternatives = []
    for field in list(required):
        names = [field, *(s for s, f in spellings.items() if f == field and s != field)]
        if len(names) > 1:
            required.remove(field)
            alternatives.append({"anyOf": [{"required": [name]} for name in names]})
    if not required:
        schema.pop("required", None)
    if alternatives:
        schema.setdefault("allOf", []).extend(alternatives)


class _Model(BaseModel):
    """Base of every definition model: frozen, strict about fields, lenient about spellings."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_schema_aliases)

    field_aliases: ClassVar[Mapping[str, str]] = {}
    """Spellings accepted besides snake_case and camelCase, mapped to the field they mean."""

    @classmethod
    def spellings(cls) -> dict[str, str]:
        """Every accepted key of this model, mapped to the field it sets."""
        cached = _SPELLINGS.get(cls)
        if cached is None:
            cached = {}
            for name in cls.model_fields:
                cached[name] = name
                cached.setdefault(camel_case(name), name)
            for alias, name in cls.field_aliases.items():
                cached[alias] = name
                cached.setdefault(camel_case(alias), name)
            _SPELLINGS[cls] = cached
        return cached

    @model_validator(mode="before")
    @classmethod
    def _accept_spellings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        spellings = cls.spellings()
        normalized: dict[str, Any] = {}
        given_as: dict[str, str] = {}
        unknown: list[tuple[str, str]] = []
        for key, value in data.items():
            name = spellings.get(str(key))
            if name is None:
                unknown.append((str(key), _suggest(str(key), spellings)))
                continue
            if name in given_as:
                raise _field_problem(name, f"given twice, as {given_as[name]!r} and {str(key)!r}")
            given_as[name] = str(key)
            normalized[name] = value
        if unknown:
            listed = ", ".join(repr(key) + hint for key, hint in unknown)
            raise PydanticCustomError(
                "unknown_field", "unknown field(s): {fields}", {"fields": listed, "unknown": unknown}
            )
        return cls._prepare(normalized)

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Hook for subclasses: adjust the normalized input before field validation."""
        return data


def _suggest(key: str, spellings: Mapping[str, str]) -> str:
    hint = did_you_mean(key, spellings)
    if not hint:
        lowered = {s.lower().replace("_", ""): s for s in spellings}
        match = lowered.get(key.lower().replace("_", "").replace("-", ""))
        hint = f" (did you mean {match!r}?)" if match else ""
    return hint


def _also_accepts(*alternatives: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A field ``json_schema_extra`` adding the shorthand forms a before-validator accepts."""

    def extend(schema: dict[str, Any]) -> None:
        if "anyOf" not in schema:
            core = {key: schema.pop(key) for key in list(schema) if key not in ("title", "description", "default")}
            schema["anyOf"] = [core]
        schema["anyOf"][:0] = alternatives

    return extend


def _as_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


# --- shared parts ----------------------------------------------------------------------------


class Backoff(_Model):
    """Exponential backoff between retries (Argo ``retryStrategy.backoff``)."""

    duration: Duration = Field(1.0, description="Delay before the first retry (seconds or 30s, 5m, 1h, 1d).")
    factor: float = Field(2.0, ge=1, description="Multiplier applied to the delay after each retry.")
    max_duration: Duration | None = Field(None, description="Upper bound of any single delay.")


class RetryStrategy(_Model):
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


class ExitHandlers(_Model):
    """Nodes run after the DAG, by outcome. A plain node id in ``on_exit`` means ``always``."""

    always: str | None = Field(None, description="Node run after every outcome (after the outcome's own handler).")
    on_success: str | None = Field(None, description="Node run when the execution succeeded.")
    on_failure: str | None = Field(None, description="Node run when the execution failed.")
    on_cancel: str | None = Field(None, description="Node run when the execution was cancelled.")

    def handlers_for(self, outcome: Literal["success", "failure", "cancel"]) -> list[str]:
        """The handler node ids to run for an outcome, in order (outcome handler, then ``always``)."""
        specific = {"success": self.on_success, "failure": self.on_failure, "cancel": self.on_cancel}[outcome]
        return [node_id for node_id in (specific, self.always) if node_id]

    def items(self) -> list[tuple[str, str]]:
        """``(field, node id)`` for every handler that is set."""
        return [(name, value) for name in type(self).model_fields if (value := getattr(self, name))]


class Skill(_Model):
    """A skill advertised on the workflow's agent card (A2A ``AgentSkill``)."""

    id: str = Field(description="Unique skill id.")
    name: str = Field(description="Human-readable name.")
    description: str = Field("", description="What the skill does.")
    tags: list[str] = Field(default_factory=list, description="Keywords for discovery.")
    examples: list[str] | None = Field(None, description="Example requests.")
    input_modes: list[str] | None = Field(None, description="Media types the skill accepts.")
    output_modes: list[str] | None = Field(None, description="Media types the skill produces.")


# --- nodes -----------------------------------------------------------------------------------


class _NodeBase(_Model):
    field_aliases: ClassVar[Mapping[str, str]] = {"dependencies": "depends_on"}

    id: str = Field(min_length=1, description="Unique node id; templates read its output as {{id.output.field}}.")
    depends_on: list[str] = Field(
        default_factory=list,
        description="Nodes that must finish first (alias: dependencies). A node whose dependencies were all "
        "skipped is skipped.",
        json_schema_extra=_also_accepts({"type": "string"}),
    )
    when: str | None = Field(None, description="Condition (SPEC §5.3); when false the node is skipped.")

    @field_validator("depends_on", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return _as_list(value)

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


class _CallNodeBase(_NodeBase):
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


class AgentNode(_CallNodeBase):
    """Calls an agent over the mesh and waits for its result."""

    field_aliases: ClassVar[Mapping[str, str]] = {"dependencies": "depends_on", "agent_persona": "agent_name"}

    type: Literal["agent"] = Field("agent", description="Node type.")
    agent_name: str = Field(min_length=1, description="Name of the agent to call.")


class WorkflowNode(_CallNodeBase):
    """Calls another workflow over the mesh, exactly like an agent."""

    type: Literal["workflow"] = Field("workflow", description="Node type.")
    workflow_name: str = Field(min_length=1, description="Name of the workflow to call.")


class SwitchCase(_Model):
    """One case of a switch: the first case whose condition holds picks its node."""

    field_aliases: ClassVar[Mapping[str, str]] = {"when": "condition", "then": "node"}

    condition: str = Field(description="Condition (alias: when).")
    node: str = Field(min_length=1, description="Node to run when the condition holds (alias: then).")


class SwitchNode(_NodeBase):
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


class ConditionalNode(_NodeBase):
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


class MapNode(_NodeBase):
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
            raise _field_problem("items", f"give exactly one of items, with_items, with_param ({found})")
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


class ForkBranch(_Model):
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


class ForkNode(_NodeBase):
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


class JoinNode(_NodeBase):
    """Waits for nodes by strategy; output ``{"results": {id: output|null}, "completed": [ids]}``."""

    type: Literal["join"] = Field("join", description="Node type.")
    wait_for: list[str] = Field(
        min_length=1,
        description="The nodes to wait for (they are dependencies too).",
        json_schema_extra=_also_accepts({"type": "string"}),
    )
    strategy: Literal["all", "any", "n_of_m"] = Field(
        "all", description="all: every node; any: the first success; n_of_m: the n-th success."
    )
    n: int | None = Field(None, ge=1, description="Successes needed with strategy n_of_m.")

    @field_validator("wait_for", mode="before")
    @classmethod
    def _one_or_many_wait(cls, value: Any) -> Any:
        return _as_list(value)

    @model_validator(mode="after")
    def _quorum(self) -> JoinNode:
        if self.strategy == "n_of_m":
            if self.n is None:
                raise _field_problem("n", "strategy n_of_m needs n")
            if self.n > len(self.wait_for):
                raise _field_problem("n", f"n is {self.n} but wait_for lists {len(self.wait_for)} node(s)")
        elif self.n is not None:
            raise _field_problem("n", f"n is only used with strategy n_of_m (strategy is {self.strategy})")
        return self

    @property
    def dependencies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.depends_on, *self.wait_for]))

    @property
    def quorum(self) -> int:
        """How many of ``wait_for`` must succeed."""
        return {"all": len(self.wait_for), "any": 1}.get(self.strategy, self.n or 1)


class LoopNode(_NodeBase):
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


class HumanReviewNode(_NodeBase):
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


NODE_TYPES: dict[str, type[_NodeBase]] = {
    "agent": AgentNode,
    "workflow": WorkflowNode,
    "switch": SwitchNode,
    "conditional": ConditionalNode,
    "map": MapNode,
    "fork": ForkNode,
    "join": JoinNode,
    "loop": LoopNode,
    "human_review": HumanReviewNode,
}
"""Node type name → model."""


def node_type_name(value: str) -> str:
    """Normalize a node type as written (``humanReview``, ``Human-Review``) to its name (``human_review``)."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value.strip()).replace("-", "_")
    return snake.lower()


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
    | Annotated[HumanReviewNode, Tag("human_review")],
    Discriminator(_node_tag),
]
"""Any node, discriminated by ``type``."""

CallNode: TypeAlias = AgentNode | WorkflowNode
"""A node that calls one agent or workflow."""


# --- the definition --------------------------------------------------------------------------


class WorkflowDefinition(_Model):
    """A DAG workflow definition (SPEC §5)."""

    name: str | None = Field(None, description="Workflow name ([A-Za-z0-9_-]); also its agent name on the mesh.")
    description: str = Field("", description="What the workflow does (shown on its agent card).")
    version: str | None = Field(
        None,
        description="Version of this definition, free text such as 1.2.0.",
        json_schema_extra=_also_accepts({"type": "number"}),
    )
    input_schema: dict[str, JsonValue] | None = Field(None, description="JSON Schema the input must match.")
    output_schema: dict[str, JsonValue] | None = Field(None, description="JSON Schema the output must match.")
    nodes: list[Node] = Field(min_length=1, description="The nodes of the DAG.")
    output_mapping: JsonValue = Field(
        None,
        description="The workflow output, built with templates. Omitted: {node id: output} of the DAG's last "
        "nodes (those nothing depends on) that completed.",
    )
    on_exit: ExitHandlers | None = Field(
        None,
        description="Exit handlers: one node id (run always), or {always, on_success, on_failure, on_cancel}.",
        json_schema_extra=_also_accepts({"type": "string", "description": "The node run after every outcome."}),
    )
    fail_fast: bool = Field(
        True, description="The first unrecoverable node failure cancels running siblings and fails the execution."
    )
    retry_strategy: RetryStrategy | None = Field(None, description="Default retries of every calling node.")
    timeout: Duration | None = Field(None, description="Timeout of the whole execution (time paused excluded).")
    max_call_depth: int = Field(10, ge=1, description="Deepest chain of nested workflow calls allowed.")
    skills: list[Skill] = Field(default_factory=list, description="Skills for the workflow's agent card.")
    execution_mode: Literal["one_time", "interval", "continuous"] = Field(
        "one_time",
        description="one_time (only when called), interval (on the schedule) or continuous (again after each run).",
    )
    schedule: str | None = Field(
        None,
        description="interval: seconds, daily@HH:mm or weekly@d1,d2,…@HH:mm (0 = Sunday); continuous: seconds of "
        "delay between runs (default 5). See docs/schedules.md.",
        json_schema_extra=_also_accepts({"type": "number"}),
    )
    schedule_input: JsonValue = Field(None, description="The input of every scheduled run. Omitted: an empty object.")

    _by_id: dict[str, Node] = PrivateAttr(default_factory=dict)
    _ids: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @field_validator("on_exit", mode="before")
    @classmethod
    def _single_handler(cls, value: Any) -> Any:
        return {"always": value} if isinstance(value, str) else value

    @field_validator("skills", mode="before")
    @classmethod
    def _no_skills(cls, value: Any) -> Any:
        return [] if value is None else value

    @classmethod
    def _prepare(cls, data: dict[str, Any]) -> dict[str, Any]:
        mode, schedule = data.get("execution_mode"), data.get("schedule")
        if mode is None and schedule is None:
            return data
        try:
            spec = parse_schedule(mode, schedule, mode_field="execution_mode")
        except ScheduleError as exc:
            raise _field_problem(exc.field, f"{exc.value!r}: {exc.reason}") from None
        # one_time keeps its (ignored) schedule text so validation can warn about it
        text = spec.text if spec.text is not None or schedule is None else str(schedule)
        return {**data, "execution_mode": spec.mode, "schedule": text}

    def model_post_init(self, context: Any, /) -> None:
        for node in self.nodes:
            self._by_id.setdefault(node.id, node)
        self._ids = frozenset(self._by_id)

    @classmethod
    def parse(cls, data: Any, *, source: str = "<definition>") -> WorkflowDefinition:
        """Build a definition from plain data, raising one :class:`DefinitionError` on bad structure.

        This checks fields and types only; use :func:`a2amesh.workflow.dag.validation.validate` for the
        graph, templates and conditions.
        """
        return parse_definition(data, source=source)

    # --- lookups for the engine ---

    @property
    def node_ids(self) -> tuple[str, ...]:
        """Every node id, in definition order."""
        return tuple(node.id for node in self.nodes)

    def has_node(self, node_id: str) -> bool:
        """Whether a node has this id."""
        return node_id in self.__pydantic_private__["_by_id"]  # type: ignore[index]

    def node(self, node_id: str) -> Node:
        """The node with this id.

        Raises:
            KeyError: no node has this id.
        """
        try:
            # the private dict directly: ``self._by_id`` goes through BaseModel.__getattr__ (a hot path)
            return self.__pydantic_private__["_by_id"][node_id]  # type: ignore[index,no-any-return]
        except KeyError:
            raise KeyError(f"workflow {self.name or ''} has no node {node_id!r}") from None

    def inner_node_ids(self) -> frozenset[str]:
        """Nodes run by a map or loop (per item / iteration), never by the DAG itself."""
        return frozenset(t for node in self.nodes if (t := node.inner_target) is not None and t in self._by_id)

    def container_of(self, node_id: str) -> MapNode | LoopNode | None:
        """The map or loop that runs this node, if any."""
        for node in self.nodes:
            if isinstance(node, MapNode | LoopNode) and node.node == node_id:
                return node
        return None

    @property
    def exit_handlers(self) -> ExitHandlers:
        """The exit handlers (empty when ``on_exit`` is not set)."""
        return self.on_exit or ExitHandlers()

    def exit_handler_ids(self) -> frozenset[str]:
        """Nodes that run only as exit handlers, after the DAG."""
        return frozenset(node_id for _, node_id in self.exit_handlers.items())

    def dag_node_ids(self) -> tuple[str, ...]:
        """Nodes the DAG schedules itself: all but map/loop targets and exit handlers, in definition order."""
        excluded = self.inner_node_ids() | self.exit_handler_ids()
        return tuple(node_id for node_id in self._by_id if node_id not in excluded)

    def dependents_of(self, node_id: str) -> tuple[str, ...]:
        """DAG nodes that list ``node_id`` among their dependencies."""
        return tuple(n.id for n in self.nodes if node_id in n.dependencies)

    def routers_of(self, node_id: str) -> tuple[str, ...]:
        """Nodes (switch, conditional, human review) that may route to ``node_id``."""
        return tuple(n.id for n in self.nodes if any(t == node_id for _, t in n.branch_targets()))

    def topological_order(self) -> list[str]:
        """DAG node ids, every node after its dependencies (definition order among equals).

        Raises:
            ValueError: the dependencies form a cycle (validation reports which).
        """
        dag = self.dag_node_ids()
        members = set(dag)
        pending = {i: {d for d in self.node(i).dependencies if d in members} for i in dag}
        order: list[str] = []
        while pending:
            ready = [i for i in dag if i in pending and not pending[i]]
            if not ready:
                raise ValueError(f"dependency cycle among {sorted(pending)}")
            for node_id in ready:
                order.append(node_id)
                del pending[node_id]
            for deps in pending.values():
                deps.difference_update(ready)
        return order

    def retry_strategy_for(self, node_id: str) -> RetryStrategy | None:
        """The retry strategy that applies to a node: its own, else the workflow's."""
        own = getattr(self.node(node_id), "retry_strategy", None)
        return own if isinstance(own, RetryStrategy) else self.retry_strategy

    def templated_fields(self) -> Iterator[tuple[str, str, JsonValue]]:
        """``(node id or "", field path, value)`` of every templated value, ``output_mapping`` included."""
        for node in self.nodes:
            for path, value in node.templated_fields():
                yield node.id, path, value
        if self.output_mapping is not None:
            yield "", "output_mapping", self.output_mapping

    def scope(self, workflow_input: JsonValue, outputs: Mapping[str, JsonValue] | None = None) -> TemplateScope:
        """A template scope for one execution of this definition.

        Args:
            workflow_input: the execution's input.
            outputs: the outputs of the nodes that completed so far, by node id.
        """
        ids: frozenset[str] = self.__pydantic_private__["_ids"]  # type: ignore[index]
        return TemplateScope(workflow_input=workflow_input, outputs=outputs or {}, node_ids=ids)

    def to_data(self) -> dict[str, JsonValue]:
        """The definition as canonical plain data (snake_case, durations in seconds, nulls left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON form: equal for definitions that mean the same.

        Spellings (camelCase, aliases), key order and duration units do not change it.
        """
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


# --- errors ----------------------------------------------------------------------------------


class DefinitionProblem(NamedTuple):
    """One structural problem of a definition, located by node and field."""

    node_id: str
    field: str
    problem: str


def problems_from_error(error: ValidationError, data: Any) -> list[DefinitionProblem]:
    """Turn pydantic's errors for ``WorkflowDefinition`` into problems naming node id and field.

    Args:
        error: raised by ``WorkflowDefinition.model_validate(data)``.
        data: the data that was validated (to find node ids by position).
    """
    problems: list[DefinitionProblem] = []
    for item in error.errors():
        node_id, path = _locate(tuple(item["loc"]), data)
        kind = item["type"]
        ctx = item.get("ctx") or {}
        if kind == "unknown_field":
            for key, hint in ctx["unknown"]:
                problems.append(DefinitionProblem(node_id, _join(path, key), f"unknown field{hint}"))
        elif kind == "definition_field":
            problems.append(DefinitionProblem(node_id, _join(path, str(ctx["field"])), str(ctx["problem"])))
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            problems.append(DefinitionProblem(node_id, _join(path, "type"), _node_type_problem(item["input"])))
        else:
            problems.append(DefinitionProblem(node_id, path, _describe(item)))
    return problems


def _node_type_problem(raw: Any) -> str:
    known = ", ".join(NODE_TYPES)
    if not isinstance(raw, Mapping):
        return f"a node must be a mapping with id and type, got {type(raw).__name__}"
    kind = raw.get("type")
    if kind is None:
        return f"missing node type; expected one of: {known}"
    hint = did_you_mean(str(kind), NODE_TYPES, cutoff=0.5)
    return f"unknown node type {kind!r}{hint}; expected one of: {known}"


def _describe(item: Mapping[str, Any]) -> str:
    message = str(item["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if item["type"] == "missing":
        return "is required"
    value = item.get("input")
    if isinstance(value, str | int | float | bool) and "invalid duration" not in message:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "…"
        return f"{message} (got {shown})"
    return message


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _locate(loc: tuple[int | str, ...], data: Any) -> tuple[str, str]:
    """(node id, field path) for a pydantic error location."""
    node_id = ""
    rest: Sequence[int | str] = loc
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        node_id = _node_id_at(data, loc[1])
        rest = loc[2:]
        if rest and rest[0] in NODE_TYPES:
            rest = rest[1:]
    path = ""
    for part in rest:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    return node_id, path


def _node_id_at(data: Any, index: int) -> str:
    nodes = data.get("nodes") if isinstance(data, Mapping) else None
    if isinstance(nodes, list) and 0 <= index < len(nodes):
        raw = nodes[index]
        if isinstance(raw, Mapping) and isinstance(raw.get("id"), str) and raw["id"]:
            return str(raw["id"])
    return f"#{index}"


def parse_definition(data: Any, *, source: str = "<definition>") -> WorkflowDefinition:
    """Build a :class:`WorkflowDefinition` from plain data (a parsed YAML/JSON workflow block).

    Args:
        data: the workflow block.
        source: the file (or other origin) named in errors.

    Returns:
        The definition (fields and types checked; see :mod:`a2amesh.workflow.dag.validation` for the rest).

    Raises:
        DefinitionError: the first problem, naming node id and field (the message counts the others).
    """
    if not isinstance(data, Mapping):
        raise DefinitionError(source, "", "", f"a workflow definition is a mapping, got {type(data).__name__}")
    try:
        return WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        problems = problems_from_error(exc, data)
        first = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise DefinitionError(source, first.node_id, first.field, first.problem + more) from None
