"""The picture of a workflow definition: its nodes and edges, laid out, each node with its live state.

A DAG workflow draws every node (containers' targets included), its dependencies, the labelled branches out of
routers and reviews, and the dotted "runs" edges from a map or loop to its target. A graph workflow (seed 000)
draws START, its nodes, END and every edge with its condition, cycles included. Pure: it takes the definition's
data and the node records, and gives what the template draws.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from a2amesh.gateway.dashboard.layout import Edge, Layout, layout, node_width
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.nodes import ConditionalNode, HumanReviewNode, LoopNode, MapNode, SwitchNode
from a2amesh.workflow.formats import by_format
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.loader import load_data

__all__ = ["EdgeLabel", "GraphNode", "GraphView", "Shape", "definition_shape", "graph_view", "node_states"]

START = "START"
END = "END"
MISSING = "missing"
"""The kind of a node an edge names that the definition does not have."""
_LABEL = 40
LABEL_CHAR = 7.0
"""Width of a character of an edge label (11 px): generous, so a box never comes out narrower than the text."""


@dataclass(frozen=True)
class Shape:
    """A definition as a graph: node ids in order, their kind, detail line and name, and the edges."""

    nodes: list[str]
    kinds: dict[str, str]
    details: dict[str, str]
    edges: list[Edge]
    names: dict[str, str] = field(default_factory=dict)
    """What a node is called where that is not its id (a graph node's ``nodeName``)."""


@dataclass(frozen=True)
class GraphNode:
    """A drawn node: where, its id, name, kind and detail, and its live state (``not run`` before it starts)."""

    id: str
    name: str
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
class EdgeLabel:
    """Where an edge's label is drawn: its box (the text starts at ``x`` and its baseline is ``y + 11``)."""

    text: str
    x: float
    y: float
    width: float
    height: float = 15.0

    def hits(self, other: tuple[float, float, float, float]) -> bool:
        """Whether this box overlaps ``(x, y, width, height)`` (with a pixel to spare)."""
        x, y, w, h = other
        across = self.x < x + w + 1 and x < self.x + self.width + 1
        return across and self.y < y + h + 1 and y < self.y + self.height + 1


@dataclass(frozen=True)
class GraphView:
    """What the template draws: the size, the nodes and the edges (SVG path data)."""

    width: float
    height: float
    nodes: list[GraphNode]
    edges: list[tuple[str, EdgeLabel | None, bool, bool, bool]]
    """(path data, label, dashed, back, dangling: to or from a node the definition does not have)"""
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
    return _with_missing(Shape(nodes, kinds, details, edges))


def _graph_shape(d: GraphDefinition) -> Shape:
    nodes = [START]
    kinds = {START: "start", END: "end"}
    details = {START: "start", END: "END"}
    names: dict[str, str] = {}
    for node in d.nodes:
        nodes.append(node.id)
        kinds[node.id] = node.node_type.lower()
        details[node.id] = _short(f"agent → {node.agent}" if node.agent else node.node_type.lower().replace("_", " "))
        if node.name and node.name != node.id:
            names[node.id] = node.name
    nodes.append(END)
    edges = [Edge(START, d.entry)] if d.entry else []
    for e in d.edges:
        label = "always" if e.condition_type == "ALWAYS" else (e.condition_value or "")
        edges.append(Edge(e.source_node_id, e.target_node_id or END, _short(label)))
    return _with_missing(Shape(nodes, kinds, details, edges, names))


def _with_missing(shape: Shape) -> Shape:
    """``shape`` with a marked node for each id an edge names that the definition does not have, so such an
    edge is drawn (dangling, dashed) instead of left out."""
    known = set(shape.nodes)
    missing = [n for e in shape.edges for n in (e.source, e.target) if n not in known]
    if not missing:
        return shape
    nodes, kinds, details = list(shape.nodes), dict(shape.kinds), dict(shape.details)
    for node_id in dict.fromkeys(missing):
        nodes.append(node_id)
        kinds[node_id] = MISSING
        details[node_id] = "not defined"
    edges = [
        Edge(e.source, e.target, e.label, dashed=True) if e.source not in known or e.target not in known else e
        for e in shape.edges
    ]
    return Shape(nodes, kinds, details, edges, shape.names)


def definition_shape(data: Mapping[str, Any], name: str | None = None) -> Shape:
    """The graph of a definition's data (as a workflow card or a snapshot holds it).

    Raises:
        ConfigError: the data is not a workflow definition.
    """
    [loaded] = load_data(dict(data), name=name)[:1]
    definition = loaded.definition
    return by_format(definition, dag=_dag_shape, graph=_graph_shape)


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
    ``completed``. Edge labels are placed where they overlap no other label and no node; the picture is as
    large as everything drawn (a loop's hook, a label past the last node).
    """
    live = states is not None
    states = states or {}
    # the first line is the name; the second reads "{state} · {detail}": room for the longest state word
    widths = {
        n: node_width(max(shape.names.get(n, n), "cancelled · " + shape.details.get(n, ""), key=len))
        for n in shape.nodes
    }
    drawn: Layout = layout(shape.nodes, shape.edges, widths)
    nodes: list[GraphNode] = []
    for node_id in shape.nodes:
        box = drawn.boxes[node_id]
        kind = shape.kinds.get(node_id, "")
        state, attempts, count = states.get(node_id, ("", 0, 0))
        if kind == MISSING:
            state = MISSING
        elif not state:
            state = "completed" if (kind == "start" and states) or (kind == "end" and finished) else "not run"
        name = shape.names.get(node_id, node_id)
        nodes.append(
            GraphNode(
                node_id, name, box.x, box.y, box.width, box.height, kind, shape.details.get(node_id, ""), state,
                attempts, count,
            )
        )  # fmt: skip
    missing = {n for n in shape.nodes if shape.kinds.get(n) == MISSING}
    taken: list[tuple[float, float, float, float]] = [(b.x, b.y, b.width, b.height) for b in drawn.boxes.values()]
    edges: list[tuple[str, EdgeLabel | None, bool, bool, bool]] = []
    for route in drawn.routes:
        label = _place_label(route.edge.label, route.points, taken) if route.edge.label else None
        if label is not None:
            taken.append((label.x, label.y, label.width, label.height))
        dangling = route.edge.source in missing or route.edge.target in missing
        edges.append((_path(route.points), label, route.edge.dashed, route.back, dangling))
    right = max([drawn.width, *(x + w for x, _, w, _ in taken), *(x for r in drawn.routes for x, _ in r.points)])
    bottom = max([drawn.height, *(y + h for _, y, _, h in taken), *(y for r in drawn.routes for _, y in r.points)])
    return GraphView(right + 16, bottom + 16, nodes, edges, live)


def _along(points: tuple[tuple[float, float], ...], fraction: float) -> tuple[float, float]:
    """The point ``fraction`` of the way along a polyline."""
    lengths = [((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5 for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False)]
    goal = sum(lengths) * fraction
    for (x1, y1), (x2, y2), length in zip(points, points[1:], lengths, strict=False):
        if goal <= length and length > 0:
            t = goal / length
            return x1 + (x2 - x1) * t, y1 + (y2 - y1) * t
        goal -= length
    return points[-1]


def _place_label(
    text: str, points: tuple[tuple[float, float], ...], taken: list[tuple[float, float, float, float]]
) -> EdgeLabel:
    """A box for an edge's label beside its line that overlaps nothing in ``taken``: the middle of the line
    first, then other points along it, then further out to either side; failing all, below everything."""
    width = len(text) * LABEL_CHAR + 6
    for fraction in (0.5, 0.35, 0.65, 0.2, 0.8, 0.42, 0.58, 0.28, 0.72):
        x, y = _along(points, fraction)
        for dx in (4.0, -width - 4, 24.0, -width - 24, 48.0, -width - 48):
            for dy in (-8.0, -22.0, 6.0):
                label = EdgeLabel(text, x + dx, y + dy, width)
                if label.x >= 0 and label.y >= 0 and not any(label.hits(box) for box in taken):
                    return label
    x, y = _along(points, 0.5)
    lowest = max((by + bh for _, by, _, bh in taken), default=0.0)
    return EdgeLabel(text, max(x, 0.0), lowest + 4, width)
