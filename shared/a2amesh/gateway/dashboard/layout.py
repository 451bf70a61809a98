"""A layered (Sugiyama-style) layout of a directed graph, for the dashboard's SVG of a workflow.

Pure and deterministic: the same nodes and edges always give the same picture. The steps:

1. cycles are broken by reversing the back edges a depth-first search finds (graph workflows loop);
2. each node goes on the layer one below its deepest predecessor (longest path from the sources);
3. an edge spanning several layers passes through a hidden point on each layer in between, so it is
   routed around the nodes instead of through them;
4. the order within each layer comes from a few sweeps of the barycentre heuristic (each node moves to the
   mean position of its neighbours on the layer above, then below), which removes most crossings;
5. layers are centred on the widest one.

Edges come back as polylines from the bottom of the source to the top of the target (a reversed edge from
the bottom of its target to the top of its source, flagged ``back`` so it can be drawn differently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Box", "Edge", "Layout", "Route", "layout"]

NODE_HEIGHT = 44
LAYER_GAP = 56
NODE_GAP = 28
MARGIN = 16
CHAR_WIDTH = 7.2
MIN_WIDTH = 96
MAX_WIDTH = 300
SWEEPS = 4


@dataclass(frozen=True)
class Edge:
    """An edge to lay out: ``source`` → ``target``, with an optional label and a dashed style."""

    source: str
    target: str
    label: str = ""
    dashed: bool = False


@dataclass(frozen=True)
class Box:
    """Where a node is drawn: top-left corner, width and height."""

    x: float
    y: float
    width: float
    height: float

    @property
    def cx(self) -> float:
        """The horizontal centre."""
        return self.x + self.width / 2


@dataclass(frozen=True)
class Route:
    """An edge's polyline (at least two points) and whether it points against the layering (a cycle)."""

    edge: Edge
    points: tuple[tuple[float, float], ...]
    back: bool = False


@dataclass
class Layout:
    """The laid-out graph: a box per node, a route per edge, and the picture's size."""

    width: float
    height: float
    boxes: dict[str, Box] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    layers: list[list[str]] = field(default_factory=list)


def node_width(label: str) -> float:
    """The width of a node whose longest line is ``label``."""
    return min(MAX_WIDTH, max(MIN_WIDTH, len(label) * CHAR_WIDTH + 24))


def _back_edges(nodes: Sequence[str], succ: dict[str, list[str]]) -> set[tuple[str, str]]:
    """Edges closing a cycle in a depth-first search started from each node in order (iterative)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    back: set[tuple[str, str]] = set()
    for root in nodes:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            if i < len(succ[node]):
                stack[-1] = (node, i + 1)
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                stack.pop()
    return back


def _layers(nodes: Sequence[str], forward: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layering of an acyclic edge list (Kahn's order, ties in the nodes' order)."""
    indegree = dict.fromkeys(nodes, 0)
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for s, t in forward:
        succ[s].append(t)
        indegree[t] += 1
    layer = dict.fromkeys(nodes, 0)
    ready = [n for n in nodes if indegree[n] == 0]
    while ready:
        node = ready.pop(0)
        for t in succ[node]:
            layer[t] = max(layer[t], layer[node] + 1)
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    return layer


def _order(rows: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]], sweeps: int) -> list[list[str]]:
    """Reorder each layer by the barycentre of its neighbours, sweeping down then up ``sweeps`` times."""

    def reorder(row: list[str], neighbours: dict[str, list[str]], where: dict[str, int]) -> list[str]:
        def key(item: tuple[int, str]) -> tuple[float, int]:
            index, node = item
            near = [where[n] for n in neighbours.get(node, []) if n in where]
            return (sum(near) / len(near) if near else float(index), index)

        return [node for _, node in sorted(enumerate(row), key=key)]

    for _ in range(sweeps):
        for i in range(1, len(rows)):
            where = {n: p for p, n in enumerate(rows[i - 1])}
            rows[i] = reorder(rows[i], up, where)
        for i in range(len(rows) - 2, -1, -1):
            where = {n: p for p, n in enumerate(rows[i + 1])}
            rows[i] = reorder(rows[i], down, where)
    return rows


def _hidden_points(
    known: list[str], forward: list[tuple[str, str]], layer: dict[str, int], width_of: dict[str, float]
) -> tuple[list[list[str]], dict[tuple[str, str], list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """The layers' rows with a hidden point for each layer a long edge crosses, each edge's chain of points,
    and who is above / below whom (``layer`` and ``width_of`` gain the hidden points)."""
    chains: dict[tuple[str, str], list[str]] = {}
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    rows: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in known:
        rows[layer[n]].append(n)
    for s, t in forward:
        chain = [s]
        for depth in range(layer[s] + 1, layer[t]):
            hidden = f"\0{s}\0{t}\0{depth}"
            rows[depth].append(hidden)
            layer[hidden] = depth
            width_of[hidden] = 8.0
            chain.append(hidden)
        chain.append(t)
        chains[(s, t)] = chain
        for a, b in zip(chain, chain[1:], strict=False):
            down.setdefault(a, []).append(b)
            up.setdefault(b, []).append(a)
    return rows, chains, up, down


def _place(rows: list[list[str]], width_of: dict[str, float]) -> tuple[dict[str, Box], float]:
    """A box per node, each layer centred on the widest; and that width."""
    row_widths = [sum(width_of[n] for n in row) + NODE_GAP * max(len(row) - 1, 0) for row in rows]
    total = max(row_widths, default=0.0)
    boxes: dict[str, Box] = {}
    for depth, row in enumerate(rows):
        x = MARGIN + (total - row_widths[depth]) / 2
        y = MARGIN + depth * (NODE_HEIGHT + LAYER_GAP)
        for n in row:
            boxes[n] = Box(x, y, width_of[n], NODE_HEIGHT)
            x += width_of[n] + NODE_GAP
    return boxes, total


def _route(
    e: Edge, boxes: dict[str, Box], chains: dict[tuple[str, str], list[str]], back: set[tuple[str, str]]
) -> Route:
    if e.source == e.target:  # a self-loop: a small hook on the right of the node
        box = boxes[e.source]
        right, mid = box.x + box.width, box.y + box.height / 2
        return Route(e, ((right, mid - 8), (right + 18, mid - 8), (right + 18, mid + 8), (right, mid + 8)), back=True)
    is_back = (e.source, e.target) in back
    chain = chains[(e.target, e.source)] if is_back else chains[(e.source, e.target)]
    points: list[tuple[float, float]] = []
    for i, n in enumerate(chain):
        box = boxes[n]
        if i == 0:
            points.append((box.cx, box.y + box.height))
        elif i == len(chain) - 1:
            points.append((box.cx, box.y))
        else:
            points.append((box.cx, box.y + box.height / 2))
    if is_back:
        points.reverse()
    return Route(e, tuple(points), back=is_back)


def layout(nodes: Sequence[str], edges: Sequence[Edge], widths: dict[str, float] | None = None) -> Layout:
    """Lay out ``nodes`` (ids, in a stable order) joined by ``edges``, top to bottom.

    Args:
        nodes: the node ids; an edge naming a node not listed is left out.
        edges: the edges (self-loops are drawn as a short back edge beside the node).
        widths: each node's width (:func:`node_width` of its id by default).

    Returns:
        The boxes, the routes (in the order of ``edges``) and the size of the picture.
    """
    known = list(dict.fromkeys(nodes))
    present = set(known)
    kept = [e for e in edges if e.source in present and e.target in present]
    width_of = {n: (widths or {}).get(n) or node_width(n) for n in known}
    succ: dict[str, list[str]] = {n: [] for n in known}
    for e in kept:
        if e.source != e.target and e.target not in succ[e.source]:
            succ[e.source].append(e.target)
    back = _back_edges(known, succ)
    forward: list[tuple[str, str]] = []
    for s, targets in succ.items():
        for t in targets:
            pair = (t, s) if (s, t) in back else (s, t)
            if pair not in forward:
                forward.append(pair)
    layer = _layers(known, forward)

    rows, chains, up, down = _hidden_points(known, forward, layer, width_of)
    rows = _order(rows, up, down, SWEEPS)
    boxes, total = _place(rows, width_of)
    routes = [_route(e, boxes, chains, back) for e in kept]
    visible_rows = [[n for n in row if not n.startswith("\0")] for row in rows]
    height = MARGIN * 2 + len(rows) * NODE_HEIGHT + max(len(rows) - 1, 0) * LAYER_GAP
    return Layout(
        width=total + MARGIN * 2, height=height, boxes={n: boxes[n] for n in known}, routes=routes, layers=visible_rows
    )
