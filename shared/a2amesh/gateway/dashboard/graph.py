"""The picture of a workflow definition: its nodes and edges, laid out, each node with its live state.

A DAG workflow draws every node (containers' targets included), its dependencies, the labelled branches out of
routers and reviews, and the dotted "runs" edges from a map or loop to its target. A graph workflow (seed 000)
draws START, its nodes, END and every edge with its condition, cycles included. Pure: it takes the definition's
data and the node records, and gives what the template draws.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2amesh.gateway.dashboard.layout import Edge, Layout, layout, node_width
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.nodes import ConditionalNode, HumanReviewNode, LoopNode, MapNode, SwitchNode
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.loader import load_data

__all__ = ["GraphNode", "GraphView", "Shape", "definition_shape", "graph_view", "node_states"]

START = "START"
END = "END"
_LABEL = 40


@dataclass(frozen=True)
class Shape:
    """A definition as a graph: node ids in order, their kind and detail line, and the edges."""

    nodes: list[str]
    kinds: dict[str, str]
    details: dict[str, str]
    edges: list[Edge]


@dataclass(frozen=True)
class GraphNode:
    """A drawn node: where, its id, kind and detail, and its live state (``not run`` before it starts)."""

    id: str
    x: float
    y: float
    width: float
    height: float
    kind: str
    detail: str
    state: str
    attempts: int
    instances: int


@dataclass(frozen=True)
class GraphView:
    """What the template draws: the size, the nodes and the edges (SVG path data)."""

    width: float
    height: float
    nodes: list[GraphNode]
    edges: list[tuple[str, str, bool, bool, float, float]]
    """(path data, label, dashed, back, label x, label y)"""
    live: bool = True
    """The nodes carry an execution's states (False: the definition alone)."""


def _short(text: str) -> str:
    return text if len(text) <= _LABEL else text[: _LABEL - 1] + "…"


def _dag_shape(d: WorkflowDefinition) -> Shape:
    nodes: list[str] = []
    kinds: dict[str, str] = {}
    details: dict[str, str] = {}
    edges: list[Edge] = []
    labelled: set[tuple[str, str]] = set()
    for node in d.nodes:
        if node.id in kinds:
            continue
        nodes.append(node.id)
        kinds[node.id] = node.type
        agent = getattr(node, "agent_name", None) or getattr(node, "workflow_name", None)
        details[node.id] = _short(f"{node.type} → {agent}" if agent else node.type)
    for node in d.nodes:
        branches: list[tuple[str, str]] = []
        if isinstance(node, SwitchNode):
            branches = [(c.node, _short(c.condition)) for c in node.cases]
            if node.default is not None:
                branches.append((node.default, "default"))
        elif isinstance(node, ConditionalNode):
            branches = [(node.true_branch, "true")]
            if node.false_branch is not None:
                branches.append((node.false_branch, "false"))
        elif isinstance(node, HumanReviewNode) and node.on_reject != "fail":
            branches = [(node.on_reject, "rejected")]
        for target, label in branches:
            edges.append(Edge(node.id, target, label))
            labelled.add((node.id, target))
    for node in d.nodes:
        edges.extend(Edge(dep, node.id) for dep in node.dependencies if (dep, node.id) not in labelled)
        if isinstance(node, MapNode | LoopNode):
            edges.append(Edge(node.id, node.node, "each item" if isinstance(node, MapNode) else "repeat", dashed=True))
    handlers = [(name, target) for name, target in d.exit_handlers.items() if target]
    if handlers:
        nodes.append(END)
        kinds[END] = "end"
        details[END] = "end of the DAG"
        dag = d.dag_node_ids()
        depended = {dep for node_id in dag for dep in d.node(node_id).dependencies}
        edges.extend(Edge(n, END, dashed=True) for n in dag if n not in depended)
        edges.extend(Edge(END, target, name, dashed=True) for name, target in handlers)
    return Shape(nodes, kinds, details, edges)


def _graph_shape(d: GraphDefinition) -> Shape:
    nodes = [START]
    kinds = {START: "start", END: "end"}
    details = {START: "start", END: "END"}
    for node in d.nodes:
        nodes.append(node.id)
        kinds[node.id] = node.node_type.lower()
        details[node.id] = _short(f"agent → {node.agent}" if node.agent else node.node_type.lower().replace("_", " "))
    nodes.append(END)
    edges = [Edge(START, d.entry)] if d.entry else []
    for e in d.edges:
        label = "always" if e.condition_type == "ALWAYS" else (e.condition_value or "")
        edges.append(Edge(e.source_node_id, e.target_node_id or END, _short(label)))
    return Shape(nodes, kinds, details, edges)


def definition_shape(data: Mapping[str, Any], name: str | None = None) -> Shape:
    """The graph of a definition's data (as a workflow card or a snapshot holds it).

    Raises:
        ConfigError: the data is not a workflow definition.
    """
    [loaded] = load_data(dict(data), name=name)[:1]
    definition = loaded.definition
    if isinstance(definition, GraphDefinition):
        return _graph_shape(definition)
    return _dag_shape(definition)


_RANK = {
    "failed": 7,
    "running": 6,
    "paused": 5,
    "waiting": 4,
    "cancelled": 3,
    "completed": 2,
    "skipped": 1,
    "pending": 0,
}


def node_states(records: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, int, int]]:
    """Each definition node's state from its instances' records: (state, highest attempt, instances).

    A node run several times (map items, loop iterations) shows the state that most needs attention
    (failed over running over waiting over done).
    """
    out: dict[str, tuple[str, int, int]] = {}
    for path, record in records.items():
        node_id = str(record.get("node_id") or path.rsplit("/", 1)[-1].split("[", 1)[0])
        status = str(record.get("status") or "pending")
        attempt = int(record.get("attempt") or 0)
        seen = out.get(node_id)
        if seen is None:
            out[node_id] = (status, attempt, 1)
            continue
        best = status if _RANK.get(status, 0) > _RANK.get(seen[0], 0) else seen[0]
        out[node_id] = (best, max(attempt, seen[1]), seen[2] + 1)
    return out


def _path(points: tuple[tuple[float, float], ...]) -> str:
    head, *rest = points
    return f"M{head[0]:.1f},{head[1]:.1f} " + " ".join(f"L{x:.1f},{y:.1f}" for x, y in rest)


def graph_view(shape: Shape, states: Mapping[str, tuple[str, int, int]] | None, *, finished: bool = False) -> GraphView:
    """Lay out ``shape`` and colour it by ``states`` (a node with no record is ``not run``).

    ``states`` None: the definition alone, no execution. ``finished``: END of a completed graph workflow reads
    ``completed``.
    """
    live = states is not None
    states = states or {}
    # the second line reads "{state} · {detail}": room for the longest state word
    widths = {n: node_width(max(n, "cancelled · " + shape.details.get(n, ""), key=len)) for n in shape.nodes}
    drawn: Layout = layout(shape.nodes, shape.edges, widths)
    nodes: list[GraphNode] = []
    for node_id in shape.nodes:
        box = drawn.boxes[node_id]
        state, attempts, count = states.get(node_id, ("", 0, 0))
        if not state:
            kind = shape.kinds.get(node_id, "")
            state = (
                "completed"
                if kind == "start" and states
                else ("completed" if kind == "end" and finished else "not run")
            )
        nodes.append(
            GraphNode(
                node_id,
                box.x,
                box.y,
                box.width,
                box.height,
                shape.kinds.get(node_id, ""),
                shape.details.get(node_id, ""),
                state,
                attempts,
                count,
            )
        )
    edges = []
    for route in drawn.routes:
        pts = route.points
        mid = pts[len(pts) // 2] if len(pts) > 2 else ((pts[0][0] + pts[-1][0]) / 2, (pts[0][1] + pts[-1][1]) / 2)
        edges.append((_path(pts), route.edge.label, route.edge.dashed, route.back, mid[0], mid[1]))
    return GraphView(drawn.width, drawn.height, nodes, edges, live)
