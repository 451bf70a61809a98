"""Pydantic model of a DAG workflow definition (SPEC §5.1), and parsing one with precise problems.

The node models are in :mod:`a2amesh.workflow.dag.nodes`, their spellings in
:mod:`a2amesh.workflow.dag.spellings`.

Every field is accepted in snake_case and in camelCase, and Solace Agent Mesh / Argo spellings are
accepted too (``dependencies`` for ``depends_on``, ``withItems``, ``withParam``, ``retryStrategy``,
``when``/``then`` in switch cases, ``agent_persona``). Unknown fields are refused with a
did-you-mean. The models hold the definition only: :mod:`a2amesh.workflow.dag.validation` checks the
graph (dependencies, cycles, targets, templates, conditions) and :mod:`a2amesh.workflow.loader`
reads files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from pydantic import Field, PrivateAttr, ValidationError, field_validator

from a2amesh.diagnostics import did_you_mean, field_path
from a2amesh.durations import Duration
from a2amesh.errors import DefinitionError, ScheduleError
from a2amesh.jsontext import JsonValue, content_digest
from a2amesh.schedules import ScheduleSpec, parse_schedule
from a2amesh.workflow.dag.nodes import (
    NODE_TYPES,
    AgentConfig,
    LlmNode,
    LoopNode,
    MapNode,
    MemoryConfig,
    Node,
    RetryStrategy,
    Skill,
)
from a2amesh.workflow.dag.spellings import DefinitionModel, also_accepts, field_problem
from a2amesh.workflow.templates import TemplateScope

__all__ = ["DefinitionProblem", "ExitHandlers", "WorkflowDefinition", "parse_definition", "problems_from_error"]


class ExitHandlers(DefinitionModel):
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


class WorkflowDefinition(DefinitionModel):
    """A DAG workflow definition (SPEC §5)."""

    name: str | None = Field(None, description="Workflow name ([A-Za-z0-9_-]); also its agent name on the mesh.")
    description: str = Field("", description="What the workflow does (shown on its agent card).")
    version: str | None = Field(
        None,
        description="Version of this definition, free text such as 1.2.0.",
        json_schema_extra=also_accepts({"type": "number"}),
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
        json_schema_extra=also_accepts({"type": "string", "description": "The node run after every outcome."}),
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
        json_schema_extra=also_accepts({"type": "number"}),
    )
    schedule_input: JsonValue = Field(None, description="The input of every scheduled run. Omitted: an empty object.")
    agent_config: AgentConfig | None = Field(
        None, description="Defaults of the model nodes (model, temperature, max_tokens, system, embedding_model)."
    )
    memory_config: MemoryConfig | None = Field(
        None, description="Defaults of the memory nodes (enabled, agent, top_k, min_score)."
    )
    max_tool_iterations: int = Field(10, ge=1, description="Most model rounds of a tool_loop node (seed 004).")
    streaming_enabled: bool = Field(
        False, description="Ask the built-in agents to stream model answers (token deltas to streaming callers)."
    )

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
            raise field_problem(exc.field, f"{exc.value!r}: {exc.reason}") from None
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

    def llm_node_ids(self) -> set[str]:
        """The ids of the llm nodes (a tools node reads the tool calls of one)."""
        return {node.id for node in self.nodes if isinstance(node, LlmNode)}

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

    def schedules(self) -> list[tuple[str | None, ScheduleSpec, JsonValue]]:
        """``(None, schedule, input)`` when the workflow runs on a schedule (mode other than one_time)."""
        if self.execution_mode == "one_time":
            return []
        value = {} if self.schedule_input is None else self.schedule_input
        return [(None, parse_schedule(self.execution_mode, self.schedule), value)]

    @property
    def format(self) -> Literal["dag"]:
        """The format's name (see :mod:`a2amesh.workflow.formats`)."""
        return "dag"

    def to_data(self) -> dict[str, JsonValue]:
        """The definition as canonical plain data (snake_case, durations in seconds, nulls left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON form: equal for definitions that mean the same.

        Spellings (camelCase, aliases), key order and duration units do not change it.
        """
        return content_digest(self.model_dump(mode="json"))


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
    return node_id, field_path(rest)


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
