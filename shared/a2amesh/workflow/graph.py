"""Graph workflows (SPEC §6): the models, the loader and the load-time checks of the nodes-and-edges formats.

Two spellings load into one :class:`GraphDefinition`:

- the **graph format** of seed 000 (the "2nChat" example): ``entrypointNodeId``; ``nodes`` with
  ``id``, ``nodeType`` (``AGENT`` / ``TOOL_EXECUTOR`` / ``HUMAN_HANDOFF``), ``nodeName``,
  ``agentId``; ``edges`` with ``id``, ``sourceNodeId``, ``targetNodeId`` (``null`` = END),
  ``conditionType`` (``CONDITIONAL`` / ``ALWAYS``) and ``conditionValue``. The database columns
  ``id`` and ``workflowId`` are accepted and kept, so the seed's JSON loads unchanged;
- the **simple format** of seed 003: ``nodes[].config.agentId`` (``type: agent``),
  ``edges[].from/to`` (unconditional), ``maxRounds``, and ``branches`` (disconnected graphs, each
  with its own ``nodes``, ``edges``, ``maxRounds``, ``executionMode`` and ``schedule``). Each
  agent gets the previous agent's output; the entry node, when not given, is the first node that
  no edge enters (else the first node).

Both accept every field in camelCase (the seeds' spelling, used by :meth:`GraphDefinition.to_data`)
and in snake_case. Additions of ours: ``agents`` (agentId → mesh agent name; without an entry the
agentId itself is the agent name, with characters outside ``[A-Za-z0-9_-]`` replaced by ``_``),
``tools`` (descriptions of the tools agents may ask for), node ``tools`` / ``instruction`` /
``agent``, the guards ``stepLimit`` (default 15), ``timeout`` (default 90 s) and ``maxRounds``,
``onLimit`` (where a tripped guard goes), HUMAN_HANDOFF ``prompt`` / ``editSchema``,
``executionMode`` and ``schedule``.

Load-time checks: errors (the definition is refused) for unknown node types, a missing or wrong
entry node, duplicate node or edge ids, AGENT nodes without an agent, CONDITIONAL edges without a
value, two edges of one node on the same value, two ALWAYS edges of one node, bad guards, bad
``onLimit`` and bad schedules; warnings for edges whose source or target is not a node (the seed's
own 2nChat points at an undefined ``node-uuid-6``; taking such an edge fails the run), unknown
fields, unknown agents, and conversational agents that have no END edge.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic.alias_generators import to_camel

from a2amesh.errors import ScheduleError
from a2amesh.ids import NAME_RE
from a2amesh.workflow.durations import Duration
from a2amesh.workflow.templates import JsonValue
from a2amesh.workflow.validation import Issue, Severity, ValidationReport

if TYPE_CHECKING:
    from a2amesh.executor.schedules import ScheduleSpec

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "DEFAULT_TIMEOUT",
    "END",
    "END_TOOL",
    "GUARDS",
    "ConditionType",
    "GraphDefinition",
    "GraphEdge",
    "GraphNode",
    "Guard",
    "NodeType",
    "ToolSpec",
    "check_graph",
    "graph_to_mermaid",
    "is_graph_document",
    "parse_graph",
    "sanitize_agent_name",
]

NodeType: TypeAlias = Literal["AGENT", "TOOL_EXECUTOR", "HUMAN_HANDOFF"]
ConditionType: TypeAlias = Literal["CONDITIONAL", "ALWAYS"]
Guard: TypeAlias = Literal["stepLimit", "timeout", "maxRounds"]
GUARDS: tuple[Guard, ...] = ("stepLimit", "timeout", "maxRounds")
NODE_TYPES: tuple[NodeType, ...] = ("AGENT", "TOOL_EXECUTOR", "HUMAN_HANDOFF")
DEFAULT_STEP_LIMIT = 15
DEFAULT_TIMEOUT = 90.0
END = "END"
"""The ``next`` value (and ``conditionValue``) of an edge that ends the execution."""
END_TOOL = "end"
"""The tool every agent of a conversational workflow gets; calling it sets ``next`` to END."""
LIMIT_ACTIONS = ("fail", "end")


class _GraphModel(BaseModel):
    """Base of the graph models: frozen, camelCase on the wire, snake_case accepted too."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ToolSpec(_GraphModel):
    """A tool agents of the workflow may ask for (run by the TOOL_EXECUTOR node)."""

    description: str = Field("", description="What the tool does (shown to the agent).")
    parameters: dict[str, JsonValue] | None = Field(None, description="JSON Schema of the tool's arguments.")
    agent: str | None = Field(None, description="Mesh agent or workflow that runs the tool (default: the tool name).")
    handler: str | None = Field(None, description="Python tool 'module:function' that runs the tool.")


class GraphNode(_GraphModel):
    """One node of a graph workflow."""

    id: str = Field(min_length=1, description="Unique node id.")
    node_type: NodeType = Field(description="AGENT, TOOL_EXECUTOR or HUMAN_HANDOFF.")
    node_name: str | None = Field(None, description="Display name; agents usually route to a node by its name.")
    agent_id: str | None = Field(None, description="The agent's id (seed format); mapped to a mesh agent.")
    agent: str | None = Field(None, description="The mesh agent this AGENT node calls (resolved at load).")
    workflow_id: str | None = Field(None, description="The owning workflow's id (database column; kept as is).")
    description: str | None = Field(None, description="What the node is for.")
    instruction: str | None = Field(None, description="Extra guidance given to the agent with every request.")
    tools: list[str] = Field(default_factory=list, description="Names of the tools this agent may ask for.")
    prompt: str | None = Field(None, description="HUMAN_HANDOFF: what the reviewer is asked.")
    edit_schema: dict[str, JsonValue] | None = Field(
        None, description="HUMAN_HANDOFF: JSON Schema an edited answer must match."
    )
    config: dict[str, JsonValue] | None = Field(None, description="Simple format: the node's config, agentId aside.")

    @property
    def name(self) -> str:
        """The node's name (``nodeName``, else its id)."""
        return self.node_name or self.id


class GraphEdge(_GraphModel):
    """One edge: taken from its source when the source's ``next`` (or a tool name) matches, or always."""

    id: str = Field(min_length=1, description="Unique edge id.")
    workflow_id: str | None = Field(None, description="The owning workflow's id (database column; kept as is).")
    source_node_id: str = Field(min_length=1, description="The node the edge leaves.")
    target_node_id: str | None = Field(None, description="The node the edge enters; null ends the execution.")
    condition_type: ConditionType = Field(
        "ALWAYS", description="CONDITIONAL: taken when the value matches; ALWAYS: the fallback."
    )
    condition_value: str | None = Field(
        None,
        description="AGENT source: matched against the agent's next; TOOL_EXECUTOR source: against the name of a "
        "tool that ran; HUMAN_HANDOFF source: against the decision (approve, edit, reject).",
    )

    @property
    def ends(self) -> bool:
        """Whether taking this edge ends the execution (``targetNodeId: null``)."""
        return self.target_node_id is None

    def describe(self) -> str:
        """``edge-uuid-15 (node-uuid-1 → node-uuid-6 on 'externalSearchCaller')``."""
        target = self.target_node_id or END
        on = f" on {self.condition_value!r}" if self.condition_type == "CONDITIONAL" else " always"
        return f"edge {self.id} ({self.source_node_id} → {target}{on})"


class GraphDefinition(_GraphModel):
    """A graph workflow: the seed-000 format and the seed-003 simple format, normalised (SPEC §6)."""

    id: str | None = Field(None, description="The workflow's id (seed format).")
    name: str | None = Field(None, description="Workflow name ([A-Za-z0-9_-]); also its agent name on the mesh.")
    description: str = Field("", description="What the workflow does (shown on its agent card).")
    version: str | None = Field(None, description="Version of this definition, free text.")
    format: Literal["graph", "simple"] = Field(
        "graph",
        description="graph: agents get the conversation and return {next, message, tool_calls?}; simple (seed "
        "003): each agent gets the previous output.",
    )
    is_conversational: bool = Field(
        False, description="Agents get an 'end' tool; the state is kept per contextId across turns."
    )
    entrypoint_node_id: str | None = Field(None, description="The entry node (an AGENT node).")
    nodes: list[GraphNode] = Field(default_factory=list, description="The nodes.")
    edges: list[GraphEdge] = Field(default_factory=list, description="The edges.")
    agents: dict[str, str] = Field(default_factory=dict, description="agentId → mesh agent name.")
    tools: dict[str, ToolSpec] = Field(default_factory=dict, description="Tools agents may ask for, by name.")
    step_limit: int | None = Field(
        None,
        ge=1,
        description="Most node runs per execution. Default 15, or maxRounds × nodes when that is larger.",
    )
    timeout: Duration = Field(DEFAULT_TIMEOUT, gt=0, description="Time limit of one execution (paused time excluded).")
    max_rounds: int | None = Field(None, ge=1, description="Most returns to the entry node per execution.")
    on_limit: str | dict[str, str] | None = Field(
        None,
        description="Where a tripped guard goes: a HUMAN_HANDOFF node id, 'fail' or 'end', or one of these per "
        "guard ({stepLimit, timeout, maxRounds}). Default: the first HUMAN_HANDOFF node, else 'fail' ('end' for "
        "maxRounds in the simple format).",
    )
    execution_mode: Literal["one_time", "interval", "continuous"] = Field(
        "one_time", description="one_time (when called), interval (on schedule) or continuous."
    )
    schedule: str | None = Field(
        None, description="Seconds, daily@HH:mm or weekly@d1,d2,…@HH:mm (interval); delay seconds (continuous)."
    )
    input_schema: dict[str, JsonValue] | None = Field(None, description="JSON Schema the input must match.")
    output_schema: dict[str, JsonValue] | None = Field(None, description="JSON Schema the output must match.")
    branches: list[GraphDefinition] = Field(
        default_factory=list, description="Disconnected graphs (seed 003), each run and scheduled on its own."
    )

    _by_id: dict[str, GraphNode] = PrivateAttr(default_factory=dict)
    _out: dict[str, list[GraphEdge]] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        for node in self.nodes:
            self._by_id.setdefault(node.id, node)
        for edge in self.edges:
            self._out.setdefault(edge.source_node_id, []).append(edge)

    # --- lookups ---

    @property
    def node_ids(self) -> tuple[str, ...]:
        """Every node id, in definition order."""
        return tuple(node.id for node in self.nodes)

    @property
    def entry(self) -> str | None:
        """The entry node id (``None`` only for a workflow made of branches alone)."""
        return self.entrypoint_node_id

    def has_node(self, node_id: str | None) -> bool:
        """Whether a node has this id."""
        return node_id is not None and node_id in self._by_id

    def node(self, node_id: str) -> GraphNode:
        """The node with this id.

        Raises:
            KeyError: no node has this id.
        """
        try:
            return self._by_id[node_id]
        except KeyError:
            raise KeyError(f"graph workflow {self.name or ''} has no node {node_id!r}") from None

    def edges_from(self, node_id: str) -> tuple[GraphEdge, ...]:
        """The edges leaving a node, in definition order."""
        return tuple(self._out.get(node_id, ()))

    def allowed_next(self, node_id: str) -> list[str]:
        """The ``conditionValue`` of every CONDITIONAL edge leaving a node (what its agent may choose)."""
        values = (e.condition_value for e in self.edges_from(node_id) if e.condition_type == "CONDITIONAL")
        return list(dict.fromkeys(v for v in values if v is not None))

    def conditional_edge(self, node_id: str, value: str) -> GraphEdge | None:
        """The CONDITIONAL edge leaving a node on a value, if any."""
        for edge in self.edges_from(node_id):
            if edge.condition_type == "CONDITIONAL" and edge.condition_value == value:
                return edge
        return None

    def always_edge(self, node_id: str) -> GraphEdge | None:
        """The ALWAYS edge leaving a node, if any."""
        return next((e for e in self.edges_from(node_id) if e.condition_type == "ALWAYS"), None)

    def handoff_node_ids(self) -> tuple[str, ...]:
        """The HUMAN_HANDOFF nodes, in definition order."""
        return tuple(n.id for n in self.nodes if n.node_type == "HUMAN_HANDOFF")

    @property
    def effective_step_limit(self) -> int:
        """``stepLimit``; unset: 15, or ``maxRounds`` × the number of nodes when that is larger."""
        if self.step_limit is not None:
            return self.step_limit
        if self.max_rounds is not None:
            return max(DEFAULT_STEP_LIMIT, self.max_rounds * len(self.nodes))
        return DEFAULT_STEP_LIMIT

    def limit_action(self, guard: Guard) -> str:
        """Where a tripped guard goes: a HUMAN_HANDOFF node id, ``"fail"`` or ``"end"``."""
        if isinstance(self.on_limit, str):
            return self.on_limit
        if isinstance(self.on_limit, dict) and guard in self.on_limit:
            return self.on_limit[guard]
        handoffs = self.handoff_node_ids()
        if handoffs:
            return handoffs[0]
        # Seed 003: maxRounds is how a simple loop stops ("stops after this many full cycles").
        return "end" if guard == "maxRounds" and self.format == "simple" else "fail"

    def tool_descriptors(self, node_id: str) -> list[dict[str, JsonValue]]:
        """The tools offered to an AGENT node: its ``tools``, plus ``end`` when conversational."""
        descriptors: list[dict[str, JsonValue]] = []
        for name in self.node(node_id).tools:
            spec = self.tools.get(name)
            item: dict[str, JsonValue] = {"name": name}
            if spec is not None:
                item["description"] = spec.description
                if spec.parameters is not None:
                    item["parameters"] = spec.parameters
            descriptors.append(item)
        if self.is_conversational:
            descriptors.append(
                {
                    "name": END_TOOL,
                    "description": "Call this when the conversation is over; it ends the workflow's turn.",
                    "parameters": {
                        "type": "object",
                        "properties": {"message": {"type": "string", "description": "Your last words to the user."}},
                    },
                }
            )
        return descriptors

    def branch(self, branch_id: str) -> GraphDefinition:
        """One of the ``branches``.

        Raises:
            KeyError: no branch has this id.
        """
        for branch in self.branches:
            if branch.id == branch_id:
                return branch
        known = ", ".join(b.id or "" for b in self.branches) or "none"
        raise KeyError(f"graph workflow {self.name or ''} has no branch {branch_id!r} (branches: {known})")

    def graph_for(self, branch_id: str | None) -> GraphDefinition:
        """The graph one execution runs: a branch, or the workflow's own graph for ``None``."""
        return self if branch_id is None else self.branch(branch_id)

    def schedule_spec(self) -> ScheduleSpec:
        """The parsed ``executionMode`` + ``schedule`` (checked at load)."""
        # Imported here: the executor package builds on the workflow package, not the reverse.
        from a2amesh.executor.schedules import parse_schedule

        return parse_schedule(self.execution_mode, self.schedule)

    def scheduled(self) -> list[tuple[str | None, GraphDefinition]]:
        """``(branch id or None, graph)`` of every graph that runs on its own (mode other than one_time)."""
        graphs: list[tuple[str | None, GraphDefinition]] = []
        if self.nodes and self.execution_mode != "one_time":
            graphs.append((None, self))
        graphs.extend((b.id, b) for b in self.branches if b.execution_mode != "one_time")
        return graphs

    # --- serialisation ---

    def to_data(self) -> dict[str, JsonValue]:
        """The definition as canonical plain data in the seed's camelCase format (loads back unchanged)."""
        return cast(dict[str, JsonValue], self.model_dump(mode="json", by_alias=True))

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON form: spellings and key order do not change it."""
        canonical = json.dumps(self.to_data(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


# --- reading ---------------------------------------------------------------------------------

_GRAPH_KEYS = frozenset({"edges", "entrypointNodeId", "entrypoint_node_id", "branches"})


def is_graph_document(data: Any) -> bool:
    """Whether parsed data is a graph workflow (it has ``edges``, ``entrypointNodeId`` or ``branches``)."""
    return isinstance(data, Mapping) and "apps" not in data and any(key in data for key in _GRAPH_KEYS)


def sanitize_agent_name(agent_id: str) -> str:
    """An agentId as a mesh agent name: characters outside ``[A-Za-z0-9_-]`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", agent_id)


def _spellings(model: type[BaseModel], aliases: Mapping[str, str] = {}) -> dict[str, str]:  # noqa: B006
    table: dict[str, str] = {}
    for field in model.model_fields:
        table[field] = field
        table.setdefault(to_camel(field), field)
    for alias, field in aliases.items():
        table[alias] = field
    return table


_TOP = _spellings(GraphDefinition, {"entrypoint": "entrypoint_node_id", "entryPoint": "entrypoint_node_id"})
_NODE = _spellings(GraphNode, {"type": "node_type", "name": "node_name"})
_EDGE = _spellings(
    GraphEdge, {"from": "source_node_id", "to": "target_node_id", "source": "source_node_id", "target": "target_node_id"}
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
    camel = [s for s in spellings if "_" not in s]
    close = difflib.get_close_matches(key, camel, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
            if "branches" in data:
                self.error("", "branches", "a branch cannot have branches of its own")
                data.pop("branches")
            for field in _INHERITED:
                if field in inherited and field not in data:
                    data[field] = inherited[field]
            if isinstance(inherited.get("agents"), dict) and isinstance(data.get("agents"), dict):
                data["agents"] = {**inherited["agents"], **data["agents"]}
            if isinstance(inherited.get("tools"), dict) and isinstance(data.get("tools"), dict):
                data["tools"] = {**inherited["tools"], **data["tools"]}
        raw_nodes = data.get("nodes", [])
        raw_edges = data.get("edges", [])
        if not isinstance(raw_nodes, list):
            self.error("", "nodes", f"expected a list of nodes, got {type(raw_nodes).__name__}")
            raw_nodes = []
        if not isinstance(raw_edges, list):
            self.error("", "edges", f"expected a list of edges, got {type(raw_edges).__name__}")
            raw_edges = []
        if "format" not in data:
            data["format"] = self._format(raw, raw_nodes, raw_edges)
        if isinstance(data.get("on_limit"), Mapping):
            data["on_limit"] = {_camel(str(k)): v for k, v in data["on_limit"].items()}
        agents = self._agents(data.get("agents"))
        data["agents"] = agents
        data["tools"] = self._tools(data.get("tools"))
        data["nodes"] = [n for i, item in enumerate(raw_nodes) if (n := self._node(i, item, agents)) is not None]
        data["edges"] = [e for i, item in enumerate(raw_edges) if (e := self._edge(i, item)) is not None]
        self._mode(data)
        if inherited is None:
            data["branches"] = self._branches(data.get("branches"), data)
        if not data["nodes"] and not data.get("branches"):
            self.error("", "nodes", "a graph workflow needs at least one node (or branches)")
        return data

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

    def _agents(self, raw: Any) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.error("", "agents", f"expected a mapping of agentId to agent name, got {type(raw).__name__}")
            return {}
        table: dict[str, str] = {}
        for key, value in raw.items():
            if not isinstance(value, str) or not NAME_RE.match(value):
                self.error("", f"agents.{key}", f"agent name {value!r} must match [A-Za-z0-9_-]+")
                continue
            table[str(key)] = value
        return table

    def _tools(self, raw: Any) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.error("", "tools", f"expected a mapping of tool name to tool, got {type(raw).__name__}")
            return {}
        tools: dict[str, Any] = {}
        for name, spec in raw.items():
            if spec is None:
                spec = {}
            if not isinstance(spec, Mapping):
                self.error("", f"tools.{name}", f"expected a mapping (description, parameters, agent, handler), got "
                           f"{type(spec).__name__}")
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
            close = difflib.get_close_matches(_node_type(str(kind)), list(NODE_TYPES), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.error(node_id, "nodeType", f"unknown node type {kind!r}{hint}; expected one of: {', '.join(NODE_TYPES)}")
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
        from a2amesh.executor.schedules import OneTime, parse_schedule

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
        from a2amesh.executor.schedules import MAIN_BRANCH

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
                self.error("", f"branches[#{index}].id", f"a branch needs an id matching [A-Za-z0-9_-]+, got "
                           f"{item.get('id')!r}")
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
        for edge in d.edges:
            where = f"edges[{edge.id}]"
            if not d.has_node(edge.source_node_id):
                self.reader.warn(
                    "", f"{where}.sourceNodeId",
                    f"{edge.describe()}: source {edge.source_node_id!r} is not among the nodes; the edge is never "
                    "taken",
                )
            if edge.target_node_id is not None and not d.has_node(edge.target_node_id):
                self.reader.warn(
                    "", f"{where}.targetNodeId",
                    f"{edge.describe()}: target {edge.target_node_id!r} is not among the nodes; taking the edge "
                    "fails the run",
                )
            if edge.condition_type == "ALWAYS":
                if edge.source_node_id in always:
                    self.reader.error(
                        "", f"{where}.conditionType",
                        f"node {edge.source_node_id!r} already has an ALWAYS edge ({always[edge.source_node_id]})",
                    )
                always.setdefault(edge.source_node_id, edge.id)
            elif edge.condition_value is not None:
                key = (edge.source_node_id, edge.condition_value)
                if key in taken:
                    self.reader.error(
                        "", f"{where}.conditionValue",
                        f"node {edge.source_node_id!r} already has an edge on {edge.condition_value!r} ({taken[key]})",
                    )
                taken.setdefault(key, edge.id)

    def _entry(self) -> None:
        d = self.definition
        entry = d.entrypoint_node_id
        if entry is None:
            self.reader.error("", "entrypointNodeId", "is required (the node the execution starts at)")
        elif not d.has_node(entry):
            self.reader.error("", "entrypointNodeId", f"{entry!r} is not among the nodes")
        elif d.node(entry).node_type != "AGENT":
            self.reader.error("", "entrypointNodeId", f"the entry node {entry!r} must be an AGENT node, not "
                              f"{d.node(entry).node_type}")

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
                self.reader.error("", field, f"{action!r} is a {d.node(action).node_type} node; expected a "
                                  "HUMAN_HANDOFF node, fail or end")


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
        field = ".".join(_camel(str(p)) if isinstance(p, str) else f"[{p}]" for p in loc)
        message = "is required" if item["type"] == "missing" else str(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        if item["type"] != "missing" and isinstance(value, str | int | float | bool):
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


# --- Mermaid ---------------------------------------------------------------------------------

_SHAPES: dict[str, tuple[str, str]] = {
    "AGENT": ('["', '"]'),
    "TOOL_EXECUTOR": ('{{"', '"}}'),
    "HUMAN_HANDOFF": ('>"', '"]'),
}


def _mermaid_text(text: str) -> str:
    for char, code in (('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, code)
    return text.replace("\n", " ")


def _mermaid_graph(definition: GraphDefinition, tag: str, indent: str) -> list[str]:
    def mid(node_id: str) -> str:
        return f"{tag}n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)

    # "end" is a Mermaid keyword: never use it as an id.
    lines = [f'{indent}{tag}g_start(["start"])', f'{indent}{tag}g_end(["END"])']
    for node in definition.nodes:
        opening, closing = _SHAPES[node.node_type]
        detail = {"AGENT": f"agent: {node.agent}", "TOOL_EXECUTOR": "tool executor", "HUMAN_HANDOFF": "human handoff"}
        label = "<br/>".join(_mermaid_text(t) for t in (node.name, detail[node.node_type]))
        lines.append(f"{indent}{mid(node.id)}{opening}{label}{closing}")
    ends = {e.source_node_id for e in definition.edges} | {e.target_node_id for e in definition.edges}
    missing = sorted(i for i in ends if i is not None and not definition.has_node(i))
    for node_id in missing:
        lines.append(f'{indent}{mid(node_id)}["{_mermaid_text(node_id)}<br/>(not defined)"]:::missing')
    if definition.entry is not None:
        lines.append(f"{indent}{tag}g_start --> {mid(definition.entry)}")
    for edge in definition.edges:
        target = f"{tag}g_end" if edge.target_node_id is None else mid(edge.target_node_id)
        text = _mermaid_text("always" if edge.condition_type == "ALWAYS" else (edge.condition_value or ""))
        source = mid(edge.source_node_id)
        if edge.source_node_id in missing or edge.target_node_id in missing:
            lines.append(f'{indent}{source} -. "{text}" .-> {target}')
        else:
            lines.append(f'{indent}{source} -- "{text}" --> {target}')
    return lines


def graph_to_mermaid(definition: GraphDefinition, *, direction: str = "TD") -> str:
    """Render a graph workflow as Mermaid flowchart source (``a2amesh graph FILE``).

    Shapes: AGENT ``[rectangle]``, TOOL_EXECUTOR ``{{hexagon}}``, HUMAN_HANDOFF ``>flag]``; arrows
    are labelled with their ``conditionValue`` (or ``always``); a target that is not defined is
    drawn dashed. Each branch is a subgraph.

    Args:
        definition: the graph workflow.
        direction: ``TD`` (top-down, the default) or ``LR``.

    Returns:
        The Mermaid text, ending with a newline.
    """
    lines = [f"flowchart {direction}"]
    if definition.nodes:
        lines.extend(_mermaid_graph(definition, "", "    "))
    for index, branch in enumerate(definition.branches):
        tag = f"b{index}_"
        lines.append(f'    subgraph {tag}graph["branch {_mermaid_text(branch.id or str(index))}"]')
        lines.extend(_mermaid_graph(branch, tag, "        "))
        lines.append("    end")
    lines.append("    classDef missing stroke-dasharray: 5 5")
    return "\n".join(lines) + "\n"
