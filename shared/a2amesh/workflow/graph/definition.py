"""Graph workflows (SPEC §6): the models of the nodes-and-edges formats.

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

:mod:`a2amesh.workflow.graph.validation` reads documents into these models and checks them;
:mod:`a2amesh.workflow.graph.engine` runs them.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic.alias_generators import to_camel

from a2amesh.durations import Duration
from a2amesh.jsontext import JsonValue, content_digest
from a2amesh.schedules import ScheduleSpec, parse_schedule
from a2amesh.workflow.dag.nodes import Skill

__all__ = [
    "DEFAULT_STEP_LIMIT",
    "DEFAULT_TIMEOUT",
    "END",
    "END_TOOL",
    "GUARDS",
    "LIMIT_ACTIONS",
    "NODE_TYPES",
    "ConditionType",
    "GraphDefinition",
    "GraphEdge",
    "GraphNode",
    "Guard",
    "NodeType",
    "ToolSpec",
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
        """The ``conditionValue`` of every CONDITIONAL edge leaving a node (what its agent may choose), but for
        edges to a node the workflow does not have (taking one could only fail the run)."""
        values = (
            e.condition_value
            for e in self.edges_from(node_id)
            if e.condition_type == "CONDITIONAL" and (e.target_node_id is None or self.has_node(e.target_node_id))
        )
        return list(dict.fromkeys(v for v in values if v is not None))

    def route_kinds(self, node_id: str) -> dict[str, str]:
        """What each of :meth:`allowed_next` leads to: a node type (``AGENT``, ``TOOL_EXECUTOR``,
        ``HUMAN_HANDOFF``) or ``END``."""
        kinds: dict[str, str] = {}
        for value in self.allowed_next(node_id):
            edge = self.conditional_edge(node_id, value)
            target = None if edge is None else edge.target_node_id
            kinds[value] = "END" if target is None else self.node(target).node_type
        return kinds

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
        return parse_schedule(self.execution_mode, self.schedule)

    def scheduled(self) -> list[tuple[str | None, GraphDefinition]]:
        """``(branch id or None, graph)`` of every graph that runs on its own (mode other than one_time)."""
        graphs: list[tuple[str | None, GraphDefinition]] = []
        if self.nodes and self.execution_mode != "one_time":
            graphs.append((None, self))
        graphs.extend((b.id, b) for b in self.branches if b.execution_mode != "one_time")
        return graphs

    @property
    def skills(self) -> tuple[Skill, ...]:
        """A graph declares no skills (its card gets the default one)."""
        return ()

    def schedules(self) -> list[tuple[str | None, ScheduleSpec, JsonValue]]:
        """``(branch id or None, schedule, input)`` of every graph that runs on its own (input: ``{}``)."""
        return [(branch, part.schedule_spec(), {}) for branch, part in self.scheduled()]

    # --- serialisation ---

    def to_data(self) -> dict[str, JsonValue]:
        """The definition as canonical plain data in the seed's camelCase format (loads back unchanged)."""
        return self.model_dump(mode="json", by_alias=True)

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON form: spellings and key order do not change it."""
        return content_digest(self.to_data())
