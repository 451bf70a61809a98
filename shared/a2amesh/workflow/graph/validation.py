"""Reading and load-time checks of graph workflow documents (SPEC §6) into :class:`GraphDefinition`.

Both formats of :mod:`a2amesh.workflow.graph.definition` are read here: the seed-000 graph format and the
seed-003 simple format (``config.agentId``, ``from``/``to``, an inferred entry node). Every field is
accepted in camelCase and snake_case.

Errors (the definition is refused), each naming node and field: unknown node types, a missing or
wrong entry node, duplicate node or edge ids, AGENT nodes without an agent, CONDITIONAL edges without
a value, two edges of one node on the same value, two ALWAYS edges of one node, bad guards, bad
``onLimit``, bad schedules, bad branches. Warnings: edges whose source or target is not a node (the
seed's own 2nChat points at an undefined ``node-uuid-6``; taking such an edge fails the run),
unknown fields (with a did-you-mean; the format maps database rows, which may carry more columns),
unknown agents, and conversational agents that have no END edge.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from a2amesh.diagnostics import did_you_mean, field_path
from a2amesh.errors import ScheduleError
from a2amesh.ids import NAME_RE
from a2amesh.schedules import MAIN_BRANCH, OneTime, parse_schedule
from a2amesh.workflow.dag.validation import Issue, Severity, ValidationReport
from a2amesh.workflow.graph.definition import (
    END,
    GUARDS,
    LIMIT_ACTIONS,
    NODE_TYPES,
    GraphDefinition,
    GraphEdge,
    GraphNode,
    ToolSpec,
)

__all__ = ["check_graph", "parse_graph", "sanitize_agent_name"]


def sanitize_agent_name(agent_id: str) -> str:
    """An agentId as a mesh agent name: characters outside ``[A-Za-z0-9_-]`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", agent_id)


def _spellings(model: type[BaseModel], aliases: Mapping[str, str] | None = None) -> dict[str, str]:
    table: dict[str, str] = {}
    for field in model.model_fields:
        table[field] = field
        table.setdefault(to_camel(field), field)
    for alias, field in (aliases or {}).items():
        table[alias] = field
    return table


_TOP = _spellings(GraphDefinition, {"entrypoint": "entrypoint_node_id", "entryPoint": "entrypoint_node_id"})
_NODE = _spellings(GraphNode, {"type": "node_type", "name": "node_name"})
_EDGE = _spellings(
    GraphEdge,
    {"from": "source_node_id", "to": "target_node_id", "source": "source_node_id", "target": "target_node_id"},
)
_TOOL = _spellings(ToolSpec)
_INHERITED = ("agents", "tools", "is_conversational", "step_limit", "timeout", "on_limit")
_SIMPLE_NODE_KEYS = frozenset({"config"})
_SIMPLE_EDGE_KEYS = frozenset({"from", "to"})
_GRAPH_NODE_KEYS = frozenset({"nodeType", "node_type"})
_GRAPH_EDGE_KEYS = frozenset({"sourceNodeId", "source_node_id"})


def _camel(field: str) -> str:
    return to_camel(field)


def _suggest(key: str, spellings: Iterable[str]) -> str:
    return did_you_mean(key, [s for s in spellings if "_" not in s])


def _node_type(value: str) -> str:
    """``toolExecutor`` / ``tool-executor`` / ``agent`` → ``TOOL_EXECUTOR`` / ``AGENT``."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", value.strip())
    return re.sub(r"[\s-]+", "_", snake).upper()


def _text_id(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value else None


class _Reader:
    """Turns one graph document (or branch) into canonical data, collecting issues."""

    def __init__(self, known_agents: Collection[str] | None, prefix: str = "") -> None:
        self.known_agents = known_agents
        self.prefix = prefix
        self.issues: list[Issue] = []
        self.dropped: set[str] = set()
        """Ids of nodes left out for their errors (references to them are not reported again)."""
        self.branch_dropped: dict[str, set[str]] = {}

    # --- issues ---

    def issue(self, severity: Severity, node_id: str, field: str, problem: str) -> None:
        if self.prefix:
            inner = ".".join(p for p in (f"nodes[{node_id}]" if node_id else "", field) if p)
            self.issues.append(Issue(severity, "", f"{self.prefix}{inner}".rstrip("."), problem))
        else:
            self.issues.append(Issue(severity, node_id, field, problem))

    def error(self, node_id: str, field: str, problem: str) -> None:
        self.issue("error", node_id, field, problem)

    def warn(self, node_id: str, field: str, problem: str) -> None:
        self.issue("warning", node_id, field, problem)

    def keys(self, raw: Mapping[Any, Any], spellings: Mapping[str, str], node_id: str, where: str) -> dict[str, Any]:
        """Map each key to its field; unknown keys are warned about and dropped."""
        out: dict[str, Any] = {}
        given_as: dict[str, str] = {}
        for key, value in raw.items():
            field = spellings.get(str(key))
            if field is None:
                hint = _suggest(str(key), spellings)
                self.warn(node_id, f"{where}{key}", f"unknown field{hint}; ignored")
                continue
            if field in given_as:
                self.error(node_id, f"{where}{key}", f"given twice, as {given_as[field]!r} and {str(key)!r}")
                continue
            given_as[field] = str(key)
            out[field] = value
        return out

    # --- the document ---

    def read(self, raw: Mapping[Any, Any], inherited: Mapping[str, Any] | None = None) -> dict[str, Any]:
        data = self.keys(raw, _TOP, "", "")
        if inherited is not None:
            self._inherit(data, inherited)
        raw_nodes = self._list(data, "nodes")
        raw_edges = self._list(data, "edges")
        if "format" not in data:
            data["format"] = self._format(raw, raw_nodes, raw_edges)
        if isinstance(data.get("on_limit"), Mapping):
            data["on_limit"] = {_camel(str(k)): v for k, v in data["on_limit"].items()}
        agents = self._agents(data.get("agents"))
        data["agents"] = agents
        data["tools"] = self._tools(data.get("tools"))
        data["nodes"] = []
        for index, item in enumerate(raw_nodes):
            node = self._node(index, item, agents)
            if node is not None:
                data["nodes"].append(node)
            elif isinstance(item, Mapping) and (dropped := _text_id(item.get("id"))) is not None:
                self.dropped.add(dropped)
        data["edges"] = [e for i, item in enumerate(raw_edges) if (e := self._edge(i, item)) is not None]
        self._mode(data)
        if inherited is None:
            data["branches"] = self._branches(data.get("branches"), data)
        if not raw_nodes and not data.get("branches"):
            self.error("", "nodes", "a graph workflow needs at least one node (or branches)")
        return data

    def _inherit(self, data: dict[str, Any], inherited: Mapping[str, Any]) -> None:
        """A branch takes the workflow's agents, tools, conversation flag, guards and onLimit unless it sets them."""
        if "branches" in data:
            self.error("", "branches", "a branch cannot have branches of its own")
            data.pop("branches")
        for field in _INHERITED:
            if field in inherited and field not in data:
                data[field] = inherited[field]
        for table in ("agents", "tools"):
            if isinstance(inherited.get(table), dict) and isinstance(data.get(table), dict):
                data[table] = {**inherited[table], **data[table]}

    def _list(self, data: Mapping[str, Any], field: str) -> list[Any]:
        value = data.get(field, [])
        if value is None:
            return []
        if not isinstance(value, list):
            self.error("", field, f"expected a list of {field}, got {type(value).__name__}")
            return []
        return value

    def _format(self, raw: Mapping[Any, Any], nodes: list[Any], edges: list[Any]) -> str:
        """Simple (seed 003) unless any node, edge or the document uses a seed-000 key."""
        if "entrypointNodeId" in raw or "entrypoint_node_id" in raw:
            return "graph"
        graph = any(isinstance(n, Mapping) and _GRAPH_NODE_KEYS & set(n) for n in nodes) or any(
            isinstance(e, Mapping) and _GRAPH_EDGE_KEYS & set(e) for e in edges
        )
        simple = any(isinstance(n, Mapping) and _SIMPLE_NODE_KEYS & set(n) for n in nodes) or any(
            isinstance(e, Mapping) and _SIMPLE_EDGE_KEYS & set(e) for e in edges
        )
        return "simple" if simple and not graph else "graph"

    def _mapping(self, raw: Any, field: str, of: str) -> Mapping[Any, Any]:
        """A top-level table: absent is empty; anything but a mapping is reported, then read as empty."""
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.error("", field, f"expected a mapping of {of}, got {type(raw).__name__}")
            return {}
        return raw

    def _agents(self, raw: Any) -> dict[str, str]:
        table: dict[str, str] = {}
        for key, value in self._mapping(raw, "agents", "agentId to agent name").items():
            if not isinstance(value, str) or not NAME_RE.match(value):
                self.error("", f"agents.{key}", f"agent name {value!r} must match [A-Za-z0-9_-]+")
                continue
            table[str(key)] = value
        return table

    def _tools(self, raw: Any) -> dict[str, Any]:
        tools: dict[str, Any] = {}
        for name, spec in self._mapping(raw, "tools", "tool name to tool").items():
            if spec is None:
                spec = {}
            if not isinstance(spec, Mapping):
                self.error(
                    "",
                    f"tools.{name}",
                    f"expected a mapping (description, parameters, agent, handler), got {type(spec).__name__}",
                )
                continue
            tools[str(name)] = self.keys(spec, _TOOL, "", f"tools.{name}.")
        return tools

    def _node(self, index: int, raw: Any, agents: Mapping[str, str]) -> dict[str, Any] | None:
        if not isinstance(raw, Mapping):
            self.error(f"#{index}", "", f"a node is a mapping with id and nodeType, got {type(raw).__name__}")
            return None
        node_id = _text_id(raw.get("id")) or f"#{index}"
        data = self.keys(raw, _NODE, node_id, "")
        if _text_id(data.get("id")) is None:
            self.error(node_id, "id", "is required (a non-empty string)")
            return None
        data["id"] = node_id
        config = data.get("config")
        if config is not None:
            if not isinstance(config, Mapping):
                self.error(node_id, "config", f"expected a mapping, got {type(config).__name__}")
                data.pop("config")
            else:
                rest = dict(config)
                for key in ("agentId", "agent_id"):
                    if key in rest:
                        value = rest.pop(key)
                        data.setdefault("agent_id", value)
                data["config"] = rest or None
        kind = data.get("node_type")
        if kind is None:
            if "agent_id" not in data and "agent" not in data:
                self.error(node_id, "nodeType", f"is required; expected one of: {', '.join(NODE_TYPES)}")
                return None
            kind = "AGENT"
        if not isinstance(kind, str) or _node_type(kind) not in NODE_TYPES:
            hint = did_you_mean(_node_type(str(kind)), NODE_TYPES, cutoff=0.5)
            self.error(
                node_id, "nodeType", f"unknown node type {kind!r}{hint}; expected one of: {', '.join(NODE_TYPES)}"
            )
            return None
        data["node_type"] = _node_type(kind)
        agent_id = data.get("agent_id")
        if agent_id is not None and _text_id(agent_id) is None:
            self.error(node_id, "agentId", f"expected a non-empty string, got {agent_id!r}")
            return None
        if agent_id is not None:
            data["agent_id"] = _text_id(agent_id)
        if data["node_type"] == "AGENT" and not self._resolve_agent(node_id, data, agents):
            return None
        if isinstance(data.get("tools"), str):
            data["tools"] = [data["tools"]]
        elif data.get("tools") is None:
            data.pop("tools", None)
        return data

    def _resolve_agent(self, node_id: str, data: dict[str, Any], agents: Mapping[str, str]) -> bool:
        explicit = data.get("agent")
        if explicit is not None:
            if not isinstance(explicit, str) or not NAME_RE.match(explicit):
                self.error(node_id, "agent", f"agent name {explicit!r} must match [A-Za-z0-9_-]+")
                return False
            name = explicit
        else:
            agent_id = data.get("agent_id")
            if agent_id is None:
                self.error(node_id, "agentId", "an AGENT node needs agentId (or agent)")
                return False
            name = agents.get(agent_id) or sanitize_agent_name(agent_id)
            data["agent"] = name
        if self.known_agents is not None and name not in self.known_agents:
            self.warn(node_id, "agentId", f"unknown agent {name!r} (it may start later)")
        return True

    def _edge(self, index: int, raw: Any) -> dict[str, Any] | None:
        label = f"edges[#{index}]"
        if not isinstance(raw, Mapping):
            self.error("", label, f"an edge is a mapping with sourceNodeId and targetNodeId, got {type(raw).__name__}")
            return None
        edge_id = _text_id(raw.get("id")) or f"#{index}"
        where = f"edges[{edge_id}]."
        data = self.keys(raw, _EDGE, "", where)
        data["id"] = edge_id
        source = _text_id(data.get("source_node_id"))
        if source is None:
            self.error("", f"{where}sourceNodeId", "is required (the node the edge leaves)")
            return None
        data["source_node_id"] = source
        target = data.get("target_node_id")
        if target is not None and _text_id(target) is None:
            self.error("", f"{where}targetNodeId", f"expected a node id or null (END), got {target!r}")
            return None
        data["target_node_id"] = _text_id(target)
        kind = data.get("condition_type")
        value = data.get("condition_value")
        if kind is None:
            kind = "ALWAYS" if value is None else "CONDITIONAL"
        if not isinstance(kind, str) or kind.strip().upper() not in ("CONDITIONAL", "ALWAYS"):
            self.error("", f"{where}conditionType", f"unknown condition type {kind!r}; expected CONDITIONAL or ALWAYS")
            return None
        data["condition_type"] = kind.strip().upper()
        if value is not None and not isinstance(value, str):
            self.error("", f"{where}conditionValue", f"expected a string, got {value!r}")
            return None
        if data["condition_type"] == "CONDITIONAL" and not value:
            self.error("", f"{where}conditionValue", "a CONDITIONAL edge needs a conditionValue")
            return None
        if data["condition_type"] == "ALWAYS" and value:
            self.warn("", f"{where}conditionValue", f"ignored on an ALWAYS edge (got {value!r})")
        return data

    def _mode(self, data: dict[str, Any]) -> None:
        mode, schedule = data.get("execution_mode"), data.get("schedule")
        if mode is None and schedule is None:
            return
        try:
            spec = parse_schedule(mode, schedule)
        except ScheduleError as exc:
            self.error("", exc.field, f"{exc.value!r}: {exc.reason}")
            data.pop("execution_mode", None)
            data.pop("schedule", None)
            return
        if isinstance(spec, OneTime) and schedule is not None:
            self.warn("", "schedule", "ignored: a one_time workflow runs only when called")
        data["execution_mode"] = spec.mode
        data["schedule"] = spec.text

    def _branches(self, raw: Any, parent: Mapping[str, Any]) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.error("", "branches", f"expected a list of branches, got {type(raw).__name__}")
            return []
        branches: list[dict[str, Any]] = []
        seen: set[str] = set()
        for index, item in enumerate(raw):
            if not isinstance(item, Mapping):
                self.error("", f"branches[#{index}]", f"a branch is a mapping, got {type(item).__name__}")
                continue
            branch_id = _text_id(item.get("id"))
            if branch_id is None or not NAME_RE.match(branch_id):
                self.error(
                    "",
                    f"branches[#{index}].id",
                    f"a branch needs an id matching [A-Za-z0-9_-]+, got {item.get('id')!r}",
                )
                continue
            if branch_id == MAIN_BRANCH:
                self.error("", f"branches[{branch_id}].id", f"{MAIN_BRANCH!r} is reserved for the workflow's own graph")
                continue
            if branch_id in seen:
                self.error("", f"branches[{branch_id}].id", "duplicate branch id")
                continue
            seen.add(branch_id)
            reader = _Reader(self.known_agents, prefix=f"branches[{branch_id}].")
            data = reader.read(item, inherited=parent)
            data["id"] = branch_id
            self.issues.extend(reader.issues)
            self.branch_dropped[branch_id] = reader.dropped
            branches.append(data)
        return branches


class _Checker:
    """Graph checks on a built definition (edges, entry, guards)."""

    def __init__(self, definition: GraphDefinition, reader: _Reader) -> None:
        self.definition = definition
        self.reader = reader

    def run(self) -> None:
        d = self.definition
        self._duplicates()
        self._edges()
        if d.nodes:
            self._entry()
        self._on_limit()
        if d.is_conversational:
            for node in d.nodes:
                if node.node_type == "AGENT" and d.conditional_edge(node.id, END) is None:
                    self.reader.warn(node.id, "edges", "no END edge: the end tool cannot end the conversation here")

    def _duplicates(self) -> None:
        seen: set[str] = set()
        for node in self.definition.nodes:
            if node.id in seen:
                self.reader.error(node.id, "id", f"duplicate node id {node.id!r}")
            seen.add(node.id)
        edges: set[str] = set()
        for edge in self.definition.edges:
            if edge.id in edges:
                self.reader.error("", f"edges[{edge.id}].id", f"duplicate edge id {edge.id!r}")
            edges.add(edge.id)

    def _edges(self) -> None:
        d = self.definition
        taken: dict[tuple[str, str], str] = {}
        always: dict[str, str] = {}
        dropped = self.reader.dropped
        undefined: dict[str, list[str]] = {}  # a node id no node has → the edges that name it
        for edge in d.edges:
            where = f"edges[{edge.id}]"
            for end in (edge.source_node_id, edge.target_node_id):
                if end is not None and not d.has_node(end) and end not in dropped:
                    undefined.setdefault(end, []).append(edge.id)
            if edge.condition_type == "ALWAYS":
                if edge.source_node_id in always:
                    self.reader.error(
                        "",
                        f"{where}.conditionType",
                        f"node {edge.source_node_id!r} already has an ALWAYS edge ({always[edge.source_node_id]})",
                    )
                always.setdefault(edge.source_node_id, edge.id)
            elif edge.condition_value is not None:
                key = (edge.source_node_id, edge.condition_value)
                if key in taken:
                    self.reader.error(
                        "",
                        f"{where}.conditionValue",
                        f"node {edge.source_node_id!r} already has an edge on {edge.condition_value!r} ({taken[key]})",
                    )
                taken.setdefault(key, edge.id)
        for node_id, edge_ids in undefined.items():
            # one line per missing node, not per edge: agents are never offered a way to it (allowed_next)
            self.reader.warn(
                "",
                f"edges[{edge_ids[0]}]",
                f"node {node_id!r} is not among the nodes; edges {', '.join(edge_ids)} name it: agents are not "
                "offered them, and taking one anyway (a tool of that edge's name, an ALWAYS edge) fails the run",
            )

    def _entry(self) -> None:
        d = self.definition
        entry = d.entrypoint_node_id
        if entry is None:
            self.reader.error("", "entrypointNodeId", "is required (the node the execution starts at)")
        elif entry in self.reader.dropped:
            return
        elif not d.has_node(entry):
            self.reader.error("", "entrypointNodeId", f"{entry!r} is not among the nodes")
        elif d.node(entry).node_type != "AGENT":
            self.reader.error(
                "", "entrypointNodeId", f"the entry node {entry!r} must be an AGENT node, not {d.node(entry).node_type}"
            )

    def _on_limit(self) -> None:
        d = self.definition
        raw = d.on_limit
        if raw is None:
            return
        pairs = [("", raw)] if isinstance(raw, str) else list(raw.items())
        for guard, action in pairs:
            field = f"onLimit.{guard}" if guard else "onLimit"
            if guard and guard not in GUARDS:
                self.reader.error("", field, f"unknown guard {guard!r}; expected one of: {', '.join(GUARDS)}")
            elif action in LIMIT_ACTIONS:
                continue
            elif not d.has_node(action):
                self.reader.error("", field, f"{action!r} is not a node; expected a HUMAN_HANDOFF node, fail or end")
            elif d.node(action).node_type != "HUMAN_HANDOFF":
                self.reader.error(
                    "",
                    field,
                    f"{action!r} is a {d.node(action).node_type} node; expected a HUMAN_HANDOFF node, fail or end",
                )


def _infer_entry(data: dict[str, Any]) -> None:
    """Simple format: the first node no edge enters, else the first node."""
    if data.get("entrypoint_node_id") is not None or not data["nodes"]:
        return
    ids = [node["id"] for node in data["nodes"]]
    entered = {e["target_node_id"] for e in data["edges"] if e["source_node_id"] in ids}
    data["entrypoint_node_id"] = next((i for i in ids if i not in entered), ids[0])


def _prepare(data: dict[str, Any]) -> None:
    if data.get("format") == "simple":
        _infer_entry(data)
    for branch in data.get("branches", []):
        _prepare(branch)


def _pydantic_issues(error: ValidationError, data: Mapping[str, Any], reader: _Reader) -> None:
    for item in error.errors():
        loc = list(item["loc"])
        prefix, node_id = "", ""
        scope: Any = data
        while len(loc) >= 2 and loc[0] == "branches" and isinstance(loc[1], int):
            branches = scope.get("branches", [])
            scope = branches[loc[1]] if loc[1] < len(branches) else {}
            prefix += f"branches[{scope.get('id', loc[1])}]."
            loc = loc[2:]
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            nodes = scope.get("nodes", [])
            node_id = str(nodes[loc[1]].get("id")) if loc[1] < len(nodes) else f"#{loc[1]}"
            loc = loc[2:]
        elif len(loc) >= 2 and loc[0] == "edges" and isinstance(loc[1], int):
            edges = scope.get("edges", [])
            prefix += f"edges[{edges[loc[1]].get('id') if loc[1] < len(edges) else loc[1]}]."
            loc = loc[2:]
        field = field_path(loc, key=_camel)
        message = "is required" if item["type"] == "missing" else str(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        if (
            item["type"] != "missing"
            and "invalid duration" not in message
            and isinstance(value, str | int | float | bool)
        ):
            message += f" (got {value!r})"
        if prefix and node_id:
            reader.error("", f"{prefix}nodes[{node_id}].{field}".rstrip("."), message)
        elif prefix:
            reader.error("", f"{prefix}{field}".rstrip("."), message)
        else:
            reader.error(node_id, field, message)


def check_graph(
    data: Any, *, known_agents: Collection[str] | None = None
) -> tuple[GraphDefinition | None, ValidationReport]:
    """Parse and check a graph workflow document, collecting every problem.

    Args:
        data: the document (the seed-000 format or the seed-003 simple format), as parsed JSON/YAML.
        known_agents: mesh agent names known to exist; others are warned about (``None``: no check).

    Returns:
        The definition (``None`` when it has errors) and the report, errors first.
    """
    if not isinstance(data, Mapping):
        problem = f"a graph workflow is a mapping, got {type(data).__name__}"
        return None, ValidationReport((Issue("error", "", "", problem),))
    reader = _Reader(known_agents)
    canonical = reader.read(data)
    _prepare(canonical)
    definition: GraphDefinition | None = None
    try:
        definition = GraphDefinition.model_validate(canonical)
    except ValidationError as exc:
        _pydantic_issues(exc, canonical, reader)
    if definition is not None:
        _Checker(definition, reader).run()
        for branch in definition.branches:
            branch_reader = _Reader(known_agents, prefix=f"branches[{branch.id}].")
            branch_reader.dropped = reader.branch_dropped.get(branch.id or "", set())
            _Checker(branch, branch_reader).run()
            reader.issues.extend(branch_reader.issues)
    issues = sorted(reader.issues, key=lambda i: i.severity != "error")
    report = ValidationReport(tuple(issues))
    return (definition if report.ok else None), report


def parse_graph(
    data: Any, *, source: str = "<graph>", known_agents: Collection[str] | None = None
) -> tuple[GraphDefinition, ValidationReport]:
    """Parse and check a graph workflow document, raising on any error.

    Returns:
        The definition and its report (warnings only).

    Raises:
        InvalidDefinition: at least one error (a :class:`~a2amesh.errors.DefinitionError`; all are in
            ``issues``).
    """
    definition, report = check_graph(data, known_agents=known_agents)
    report.raise_for_errors(source)
    assert definition is not None
    return definition, report
