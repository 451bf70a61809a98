"""Load-time validation of workflow definitions (SPEC §5.4): errors and warnings, each naming node and field.

Errors: unknown dependencies, cycles, duplicate or malformed ids, branch/map/loop/exit targets
that do not exist or are misplaced, switch/conditional/review targets that do not depend on their
router, bad templates, bad conditions, and (from :mod:`a2amesh.workflow.dag.definition`) unknown node
types and unknown fields. Warnings: unknown agents (they may start later), references to nodes that
are not upstream, quoted numbers compared with numbers, and similar likely mistakes.

SAM semantics followed here: the target of a map or loop is an *inner* node, run by its container
(per item / per iteration) and never scheduled by the DAG, so it has no ``depends_on`` and nothing
depends on it; the targets of a switch, a conditional and a review's ``on_reject`` list their
router in ``depends_on``; exit handlers have no ``depends_on`` and run only after the DAG.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from a2amesh.diagnostics import did_you_mean
from a2amesh.errors import DefinitionError
from a2amesh.jsontext import JsonValue
from a2amesh.workflow.conditions import ConditionError, compile_condition
from a2amesh.workflow.dag.definition import WorkflowDefinition, problems_from_error
from a2amesh.workflow.dag.nodes import (
    AgentNode,
    BuiltinNode,
    ConditionalNode,
    ForkNode,
    JoinNode,
    LoopNode,
    MapNode,
    Node,
    SwitchNode,
    ToolsNode,
    WorkflowNode,
)
from a2amesh.workflow.templates import (
    Reference,
    RefKind,
    TemplateError,
    check,
    find_templates,
    iter_templates,
    operator_of,
    parse_reference,
)

__all__ = [
    "NODE_ID_PATTERN",
    "RESERVED_IDS",
    "InvalidDefinition",
    "Issue",
    "Severity",
    "ValidationReport",
    "check_data",
    "validate",
    "validate_data",
]

Severity = Literal["error", "warning"]
NODE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
RESERVED_IDS = frozenset({"workflow", "_map_item", "_map_index", "_loop_iteration"})
_ROUTERS = (SwitchNode, ConditionalNode, JoinNode)


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in a definition.

    Attributes:
        severity: ``"error"`` (the definition is refused) or ``"warning"``.
        node_id: the node at fault, or ``""`` for the workflow itself.
        field: the field path within the node (``cases[0].node``) or the workflow (``on_exit.always``).
        problem: what is wrong, in one line.
    """

    severity: Severity
    node_id: str
    field: str
    problem: str

    @property
    def location(self) -> str:
        """``nodes[id].field``, as in :class:`~a2amesh.errors.DefinitionError`."""
        return ".".join(p for p in (f"nodes[{self.node_id}]" if self.node_id else "", self.field) if p)

    def __str__(self) -> str:
        return (
            f"{self.severity}: {self.location}: {self.problem}" if self.location else f"{self.severity}: {self.problem}"
        )


@dataclass(frozen=True)
class ValidationReport:
    """Everything validation found, errors first."""

    issues: tuple[Issue, ...] = ()

    @property
    def errors(self) -> tuple[Issue, ...]:
        """The issues that make the definition unusable."""
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def warnings(self) -> tuple[Issue, ...]:
        """The issues that do not stop the definition from loading."""
        return tuple(i for i in self.issues if i.severity == "warning")

    @property
    def ok(self) -> bool:
        """True when there is no error."""
        return not self.errors

    def raise_for_errors(self, source: str) -> None:
        """Raise :class:`InvalidDefinition` listing every error, if there is any."""
        if self.errors:
            raise InvalidDefinition(source, self.errors)


class InvalidDefinition(DefinitionError):
    """A workflow definition has one or more errors.

    The message names the first; all of them are in ``issues``.

    Attributes:
        issues: every error found.
    """

    def __init__(self, source: str, issues: Sequence[Issue]) -> None:
        self.issues = tuple(issues)
        first = issues[0]
        more = f" (and {len(issues) - 1} more error(s))" if len(issues) > 1 else ""
        super().__init__(source, first.node_id, first.field, first.problem + more)


def validate_data(
    data: Any, *, known_agents: Collection[str] | None = None
) -> tuple[WorkflowDefinition | None, ValidationReport]:
    """Parse and validate a workflow block (plain data), collecting every problem.

    Args:
        data: the workflow block, as read from YAML/JSON.
        known_agents: names of the agents and workflows known to exist; others are warned about.
            ``None`` skips that check.

    Returns:
        The definition (``None`` when its structure is too broken to build) and the report.
    """
    if not isinstance(data, dict):
        problem = f"a workflow definition is a mapping, got {type(data).__name__}"
        return None, ValidationReport((Issue("error", "", "", problem),))
    try:
        definition = WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        issues = tuple(Issue("error", p.node_id, p.field, p.problem) for p in problems_from_error(exc, data))
        return None, ValidationReport(issues)
    return definition, validate(definition, known_agents=known_agents)


def check_data(
    data: Any, *, source: str, known_agents: Collection[str] | None = None
) -> tuple[WorkflowDefinition, ValidationReport]:
    """Parse and validate a workflow block, raising on any error.

    Returns:
        The definition and its report (warnings only).

    Raises:
        InvalidDefinition: at least one error; all are in ``issues``.
    """
    definition, report = validate_data(data, known_agents=known_agents)
    report.raise_for_errors(source)
    assert definition is not None
    return definition, report


def validate(definition: WorkflowDefinition, *, known_agents: Collection[str] | None = None) -> ValidationReport:
    """Check the graph, targets, templates and conditions of a parsed definition.

    Args:
        definition: a definition whose structure pydantic already accepted.
        known_agents: names of the agents and workflows known to exist; ``None`` skips the check.

    Returns:
        Every error and warning, errors first.
    """
    issues = _Checker(definition, known_agents).run()
    issues.sort(key=lambda i: i.severity != "error")
    return ValidationReport(tuple(issues))


@dataclass
class _Checker:
    definition: WorkflowDefinition
    known_agents: Collection[str] | None
    issues: list[Issue] = field(default_factory=list)
    ids: frozenset[str] = frozenset()
    containers: dict[str, str] = field(default_factory=dict)
    """inner node id → the map/loop that runs it."""

    def error(self, node_id: str, field_path: str, problem: str) -> None:
        self.issues.append(Issue("error", node_id, field_path, problem))

    def warn(self, node_id: str, field_path: str, problem: str) -> None:
        self.issues.append(Issue("warning", node_id, field_path, problem))

    def run(self) -> list[Issue]:
        self.ids = frozenset(self.definition.node_ids)
        self._check_ids()
        self._check_containers()
        self._check_exit_handlers()
        self._check_dependencies()
        self._check_cycles()
        self._check_branches()
        for node in self.definition.nodes:
            self._check_node(node)
        self._check_templates()
        self._check_conditions()
        self._check_agents()
        if self.definition.execution_mode == "one_time" and self.definition.schedule is not None:
            self.warn("", "schedule", "ignored: a one_time workflow runs only when called")
        return self.issues

    # --- structure ---

    def _check_ids(self) -> None:
        seen: dict[str, int] = {}
        for index, node in enumerate(self.definition.nodes):
            if node.id in seen:
                self.error(node.id, "id", f"duplicate node id (nodes #{seen[node.id]} and #{index} both use it)")
                continue
            seen[node.id] = index
            if node.id in RESERVED_IDS:
                self.error(node.id, "id", f"{node.id!r} is reserved for templates; choose another id")
            elif not re.match(NODE_ID_PATTERN, node.id):
                self.error(
                    node.id,
                    "id",
                    "node ids use letters, digits, _ and -, and start with a letter or _ "
                    "(templates refer to them as {{id.output…}})",
                )

    def _known(self, node_id: str, field_path: str, target: str) -> bool:
        if target in self.ids:
            return True
        self.error(node_id, field_path, f"unknown node {target!r}{did_you_mean(target, self.ids)}")
        return False

    def _check_containers(self) -> None:
        for node in self.definition.nodes:
            target = node.inner_target
            if target is None or not self._known(node.id, "node", target):
                continue
            kind = node.type
            if target == node.id:
                self.error(node.id, "node", f"a {kind} cannot run itself")
                continue
            if target in self.containers:
                self.error(node.id, "node", f"{target!r} is already run by {self.containers[target]!r}")
                continue
            inner = self.definition.node(target)
            if isinstance(inner, _ROUTERS):
                self.error(
                    node.id,
                    "node",
                    f"{target!r} is a {inner.type} node; a {kind} runs a node that produces a "
                    "result (agent, workflow, fork, map, loop, human_review)",
                )
            self.containers[target] = node.id
            if inner.depends_on:
                self.error(
                    target,
                    "depends_on",
                    f"runs inside {kind} {node.id!r} (once per "
                    f"{'item' if kind == 'map' else 'iteration'}) and must not have depends_on; "
                    f"put the dependencies on {node.id!r}",
                )
        for inner_id, container in self.containers.items():
            if self._container_chain(inner_id) is None:
                self.error(container, "node", f"maps/loops run each other in a circle through {inner_id!r}")

    def _container_chain(self, node_id: str) -> list[str] | None:
        """The maps/loops enclosing a node, innermost first; ``None`` if they nest in a circle."""
        chain: list[str] = []
        current = node_id
        while current in self.containers:
            current = self.containers[current]
            if current in chain or current == node_id:
                return None
            chain.append(current)
        return chain

    def _check_exit_handlers(self) -> None:
        for handler_field, handler in self.definition.exit_handlers.items():
            path = f"on_exit.{handler_field}"
            if not self._known("", path, handler):
                continue
            node = self.definition.node(handler)
            if isinstance(node, _ROUTERS):
                self.error("", path, f"{handler!r} is a {node.type} node and cannot be an exit handler")
            if handler in self.containers:
                self.error(
                    "", path, f"{handler!r} runs inside {self.containers[handler]!r} and cannot be an exit handler"
                )
            if node.depends_on:
                self.error(
                    handler,
                    "depends_on",
                    f"is an exit handler ({path}); exit handlers run after the DAG and must not have depends_on",
                )

    def _dependency_field(self, node: Node, dependency: str) -> str:
        return "depends_on" if dependency in node.depends_on else "wait_for"

    def _check_dependencies(self) -> None:
        exit_ids = self.definition.exit_handler_ids()
        for node in self.definition.nodes:
            listed = [*node.depends_on, *(node.wait_for if isinstance(node, JoinNode) else [])]
            for dep in {d for d in listed if listed.count(d) > 1}:
                self.warn(node.id, self._dependency_field(node, dep), f"{dep!r} is listed more than once")
            for dep in node.dependencies:
                where = self._dependency_field(node, dep)
                if dep == node.id:
                    self.error(node.id, where, "a node cannot depend on itself")
                elif not self._known(node.id, where, dep):
                    continue
                elif dep in self.containers:
                    self.error(
                        node.id,
                        where,
                        f"{dep!r} runs inside {self.containers[dep]!r}; depend on {self.containers[dep]!r} instead",
                    )
                elif dep in exit_ids:
                    self.error(
                        node.id, where, f"{dep!r} is an exit handler, it runs after the DAG; nothing can depend on it"
                    )

    def _check_cycles(self) -> None:
        graph = {n.id: [d for d in n.dependencies if d in self.ids and d != n.id] for n in self.definition.nodes}
        for component in _strongly_connected(graph):
            if len(component) < 2:
                continue
            members = set(component)
            cycle = _cycle_in(component[0], graph, members)
            first = min(cycle[:-1], key=self.definition.node_ids.index)
            self.error(first, "depends_on", f"dependency cycle: {' → '.join(cycle)} (→ means 'depends on')")

    def _check_branches(self) -> None:
        exit_ids = self.definition.exit_handler_ids()
        for node in self.definition.nodes:
            for path, target in node.branch_targets():
                if not self._known(node.id, path, target):
                    continue
                if target == node.id:
                    self.error(node.id, path, f"a {node.type} cannot route to itself")
                elif target in self.containers:
                    self.error(
                        node.id,
                        path,
                        f"{target!r} runs inside {self.containers[target]!r} and cannot be a branch target",
                    )
                elif target in exit_ids:
                    self.error(node.id, path, f"{target!r} is an exit handler and cannot be a branch target")
                elif node.id not in self.definition.node(target).dependencies:
                    self.error(
                        node.id,
                        path,
                        f"target {target!r} does not depend on {node.id!r}: add {node.id!r} to the "
                        f"depends_on of {target!r} so that it runs only when chosen",
                    )

    def _check_node(self, node: Node) -> None:
        if isinstance(node, WorkflowNode) and self.definition.name and node.workflow_name == self.definition.name:
            self.error(node.id, "workflow_name", "the workflow calls itself; recursion is refused")
        elif isinstance(node, ForkNode):
            self._check_fork(node)
        elif isinstance(node, MapNode):
            self._check_map(node)
        elif isinstance(node, ToolsNode):
            self._check_tools_source(node)

    def _check_tools_source(self, node: ToolsNode) -> None:
        config = self.definition.agent_config
        if not node.tools and not node.mcp_servers and not (config and config.mcp_servers):
            self.error(
                node.id, "tools", "a tools node needs tools or mcp_servers (its own or agent_config.mcp_servers)"
            )
        llm_ids = self.definition.llm_node_ids()
        if node.source is None:
            candidates = [d for d in node.depends_on if d in llm_ids]
            if len(candidates) != 1:
                found = (
                    f"it depends on {len(candidates)}: {', '.join(candidates)}" if candidates else "it depends on none"
                )
                self.error(
                    node.id,
                    "depends_on",
                    f"a tools node runs the tool calls of one llm node: depend on exactly one llm node or set "
                    f"source ({found})",
                )
            return
        if not self._known(node.id, "source", node.source):
            return
        if node.source not in llm_ids:
            kind = self.definition.node(node.source).type
            self.error(node.id, "source", f"{node.source!r} is a {kind} node; source must name an llm node")
        elif node.source not in node.depends_on:
            self.error(
                node.id,
                "source",
                f"{node.source!r} must also be in depends_on, so its tool calls exist when this node runs",
            )

    def _check_fork(self, node: ForkNode) -> None:
        ids: set[str] = set()
        keys: set[str] = set()
        for index, branch in enumerate(node.branches):
            if branch.id in ids:
                self.error(node.id, f"branches[{index}].id", f"duplicate branch id {branch.id!r}")
            if branch.key in keys:
                self.error(node.id, f"branches[{index}].output_key", f"two branches write output key {branch.key!r}")
            ids.add(branch.id)
            keys.add(branch.key)

    def _check_map(self, node: MapNode) -> None:
        source, value = node.item_source
        items: list[JsonValue] | None = None
        if isinstance(value, list):
            items = value
        elif isinstance(value, str) and not _holds_template(value):
            items = _json_list(value) if source == "with_param" else None
            if items is None:
                self.error(node.id, source, "expected a template giving a list, such as {{workflow.input.items}}")
                return
        elif not isinstance(value, str) and not (isinstance(value, dict) and operator_of(value) is not None):
            self.error(node.id, source, "expected a list, a template giving a list, or a coalesce/concat operator")
            return
        if items is not None and len(items) > node.max_items:
            self.error(node.id, "max_items", f"{source} lists {len(items)} items, above max_items ({node.max_items})")

    # --- templates and conditions ---

    def _check_templates(self) -> None:
        for node_id, path, value in self.definition.templated_fields():
            for problem in check(value, node_ids=self.ids, path=path):
                self.error(node_id, problem.path or path, f"bad template {problem.template}: {problem.problem}")
            for where, expression in _safe_templates(value, path):
                try:
                    ref = parse_reference(expression, self.ids)
                except TemplateError:
                    continue
                self._check_reference(node_id, where, ref)

    def _check_conditions(self) -> None:
        for node in self.definition.nodes:
            for path, text in node.condition_fields():
                try:
                    compiled = compile_condition(text, self.ids)
                except ConditionError as exc:
                    self.error(node.id, path, f"bad condition {text!r}: {exc.problem}")
                    continue
                for warning in compiled.warnings:
                    self.warn(node.id, path, warning)
                for ref in compiled.references:
                    self._check_reference(
                        node.id, path, ref, own_condition=isinstance(node, LoopNode) and path == "condition"
                    )

    def _check_reference(self, node_id: str, path: str, ref: Reference, *, own_condition: bool = False) -> None:
        """Context checks of one template: map/loop variables, exit-handler variables, upstream nodes."""
        chain = (self._container_chain(node_id) or []) if node_id else []
        kinds = {self.definition.node(c).type for c in chain}
        if own_condition:
            kinds.add("loop")
        if ref.kind in (RefKind.MAP_ITEM, RefKind.MAP_INDEX) and "map" not in kinds:
            self.error(node_id, path, f"{ref.template} is only defined in the node a map runs (its 'node' target)")
        elif ref.kind is RefKind.LOOP_ITERATION and "loop" not in kinds:
            self.error(node_id, path, f"{ref.template} is only defined in the node a loop runs, and in its condition")
        elif (
            ref.kind in (RefKind.STATUS, RefKind.ERROR)
            and node_id
            and node_id not in self.definition.exit_handler_ids()
        ):
            self.warn(node_id, path, f"{ref.template} is set only for exit handlers (on_exit); here it is null")
        elif ref.kind is RefKind.NODE and ref.node_id is not None:
            self._check_upstream(node_id, path, ref, chain, own_condition)

    def _check_upstream(self, node_id: str, path: str, ref: Reference, chain: list[str], own_condition: bool) -> None:
        target = ref.node_id
        assert target is not None
        container = self.containers.get(target)
        if container is not None and self.definition.node(container).type == "map" and container not in chain:
            self.warn(
                node_id,
                path,
                f"{ref.template}: {target!r} runs once per item of map {container!r}; "
                f"read {{{{{container}.output.results}}}} instead",
            )
            return
        if not node_id or node_id in self.definition.exit_handler_ids():
            return
        if target in self._available(node_id, chain, own_condition):
            return
        self.warn(
            node_id,
            path,
            f"{ref.template}: {target!r} is not upstream of {node_id!r} (not among its dependencies, "
            "direct or indirect); it is null unless it completed first",
        )

    def _available(self, node_id: str, chain: list[str], own_condition: bool) -> set[str]:
        """Nodes whose output is settled whenever ``node_id`` runs (or, for a loop condition, is evaluated)."""
        settled = self._ancestors([node_id, *chain])
        containers = settled | set(chain) | ({node_id} if own_condition else set())
        for container in containers:
            settled |= self._inner_chain(container)
        return settled

    def _ancestors(self, roots: list[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            current = stack.pop()
            for dep in self.definition.node(current).dependencies:
                if dep in self.ids and dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def _inner_chain(self, container: str) -> set[str]:
        """The node a map/loop runs, the node that one runs, and so on."""
        found: set[str] = set()
        inner = self.definition.node(container).inner_target
        while inner is not None and inner in self.ids and inner not in found:
            found.add(inner)
            inner = self.definition.node(inner).inner_target
        return found

    def _check_agents(self) -> None:
        if self.known_agents is None:
            return
        known = self.known_agents
        for node in self.definition.nodes:
            if isinstance(node, AgentNode) and node.agent_name not in known:
                self.warn(
                    node.id,
                    "agent_name",
                    f"no agent {node.agent_name!r} is known yet{did_you_mean(node.agent_name, known)}",
                )
            elif isinstance(node, WorkflowNode) and node.workflow_name not in known:
                self.warn(
                    node.id,
                    "workflow_name",
                    f"no workflow {node.workflow_name!r} is known yet{did_you_mean(node.workflow_name, known)}",
                )
            elif isinstance(node, BuiltinNode):
                for index, ref in enumerate(getattr(node, "tools", [])):
                    name = ref.agent or ref.workflow
                    if name is not None and name not in known:
                        kind = "agent" if ref.agent else "workflow"
                        self.warn(
                            node.id,
                            f"tools[{index}].{kind}",
                            f"no {kind} {name!r} is known yet{did_you_mean(name, known)}",
                        )
            elif isinstance(node, ForkNode):
                for index, branch in enumerate(node.branches):
                    if branch.agent_name not in known:
                        self.warn(
                            node.id,
                            f"branches[{index}].agent_name",
                            f"no agent {branch.agent_name!r} is known yet{did_you_mean(branch.agent_name, known)}",
                        )


def _holds_template(text: str) -> bool:
    """Whether a string holds a template (a malformed one counts)."""
    try:
        return bool(find_templates(text))
    except TemplateError:
        return True


def _json_list(text: str) -> list[JsonValue] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _safe_templates(value: JsonValue, path: str) -> Iterable[tuple[str, str]]:
    try:
        return list(iter_templates(value, path))
    except TemplateError:
        return []


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (definitions may be large)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = graph[node]
            if position < len(successors):
                work.append((node, position + 1))
                succ = successors[position]
                if succ not in index:
                    work.append((succ, 0))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component[::-1])
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return result


def _cycle_in(start: str, graph: dict[str, list[str]], members: set[str]) -> list[str]:
    """A closed path ``[a, b, …, a]`` through ``start`` inside one strongly connected component."""
    path = [start]
    seen = {start: 0}
    current = start
    while True:
        current = next(d for d in graph[current] if d in members)
        if current in seen:
            cycle = path[seen[current] :]
            return [*cycle, current]
        seen[current] = len(path)
        path.append(current)
