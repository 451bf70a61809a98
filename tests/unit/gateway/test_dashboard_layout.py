"""The dashboard's layered layout and the picture of a definition (pure: no servers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from a2amesh.gateway.dashboard.graph import definition_shape, graph_view, node_states
from a2amesh.gateway.dashboard.layout import Box, Edge, layout


def _overlap(a: Box, b: Box) -> bool:
    return a.x < b.x + b.width and b.x < a.x + a.width and a.y < b.y + b.height and b.y < a.y + a.height


def _crosses(points: tuple[tuple[float, float], ...], box: Box) -> bool:
    """Whether a vertical-ish polyline passes through the inside of ``box`` (sampled)."""
    for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False):
        for i in range(1, 20):
            x, y = x1 + (x2 - x1) * i / 20, y1 + (y2 - y1) * i / 20
            if box.x + 1 < x < box.x + box.width - 1 and box.y + 1 < y < box.y + box.height - 1:
                return True
    return False


def test_chain_is_laid_out_top_to_bottom() -> None:
    """Each node sits one layer below its predecessor; an edge runs from the source's bottom to the target's top."""
    out = layout(["a", "b", "c"], [Edge("a", "b"), Edge("b", "c")])
    assert out.layers == [["a"], ["b"], ["c"]]
    a, b = out.boxes["a"], out.boxes["b"]
    assert a.y < b.y < out.boxes["c"].y
    assert out.routes[0].points == ((a.cx, a.y + a.height), (b.cx, b.y))
    assert out.height >= out.boxes["c"].y + out.boxes["c"].height


def test_diamond_puts_parallel_nodes_side_by_side_without_overlap() -> None:
    """Siblings share a layer and never overlap; the picture is wide enough for them."""
    out = layout(["a", "b", "c", "d"], [Edge("a", "b"), Edge("a", "c"), Edge("b", "d"), Edge("c", "d")])
    assert out.layers[1] in (["b", "c"], ["c", "b"])
    assert not _overlap(out.boxes["b"], out.boxes["c"])
    assert out.boxes["b"].y == out.boxes["c"].y
    assert max(box.x + box.width for box in out.boxes.values()) <= out.width


def test_long_edge_bends_around_the_node_in_between() -> None:
    """An edge skipping a layer passes a point of its own on that layer instead of crossing the node there."""
    out = layout(["a", "b", "c"], [Edge("a", "b"), Edge("b", "c"), Edge("a", "c")])
    skip = next(r for r in out.routes if r.edge == Edge("a", "c"))
    assert len(skip.points) == 3
    assert not _crosses(skip.points, out.boxes["b"])


def test_ordering_removes_a_crossing() -> None:
    """The barycentre sweeps order the second layer after the first, so the two edges do not cross."""
    out = layout(["a1", "a2", "b1", "b2"], [Edge("a1", "b2"), Edge("a2", "b1")])
    assert (out.boxes["a1"].x < out.boxes["a2"].x) == (out.boxes["b2"].x < out.boxes["b1"].x)


def test_cycles_and_self_loops_are_drawn_as_back_edges() -> None:
    """A graph workflow's loop: layering still terminates; the edge closing the cycle is flagged ``back``."""
    out = layout(
        ["s", "agent", "tools", "end"],
        [
            Edge("s", "agent"),
            Edge("agent", "tools"),
            Edge("tools", "agent"),
            Edge("agent", "end"),
            Edge("tools", "tools"),
        ],
    )
    back = [r.edge for r in out.routes if r.back]
    assert Edge("tools", "agent") in back
    assert Edge("tools", "tools") in back
    assert out.boxes["agent"].y < out.boxes["tools"].y
    loop = next(r for r in out.routes if r.edge == Edge("tools", "agent"))
    assert loop.points[0][1] < loop.points[-1][1] or loop.points[0] != loop.points[-1]


def test_unknown_nodes_are_left_out_and_the_layout_is_deterministic() -> None:
    """An edge naming a node not listed is dropped; the same input always gives the same picture."""
    edges = [Edge("a", "b"), Edge("a", "ghost"), Edge("b", "c"), Edge("a", "c")]
    first = layout(["a", "b", "c"], edges)
    assert [r.edge.target for r in first.routes] == ["b", "c", "c"]
    assert layout(["a", "b", "c"], edges) == first


REFUND = """
name: refund
nodes:
  - {id: propose, type: agent, agent_name: propose, input: {amount: "{{workflow.input.amount}}"}}
  - id: review
    type: human_review
    depends_on: [propose]
    prompt: "ok?"
    on_reject: apologise
  - {id: pay, type: agent, agent_name: pay, depends_on: [review], input: {}}
  - {id: apologise, type: agent, agent_name: pay, depends_on: [review], input: {}}
  - id: route
    type: switch
    depends_on: [pay]
    cases:
      - {condition: "'{{pay.output.ok}}' == 'True'", node: done}
    default: other
  - {id: done, type: agent, agent_name: pay, depends_on: [route], input: {}}
  - {id: other, type: agent, agent_name: pay, depends_on: [route], input: {}}
"""


def test_dag_shape_has_every_node_and_labelled_branches() -> None:
    """Every node of a DAG is drawn; router and review branches carry their labels; dependencies are plain."""
    shape = definition_shape(yaml.safe_load(REFUND))
    assert shape.nodes == ["propose", "review", "pay", "apologise", "route", "done", "other"]
    labels = {(e.source, e.target): e.label for e in shape.edges}
    assert labels[("review", "apologise")] == "rejected"
    assert labels[("route", "other")] == "default"
    assert labels[("route", "done")] == "'{{pay.output.ok}}' == 'True'"
    assert labels[("propose", "review")] == ""
    assert shape.details["pay"] == "agent → pay"


GRAPH: dict[str, Any] = {
    "name": "chat",
    "entrypointNodeId": "agent",
    "nodes": [
        {"id": "agent", "nodeType": "AGENT", "nodeName": "agent", "agentId": "llm"},
        {"id": "tools", "nodeType": "TOOL_EXECUTOR", "nodeName": "tools"},
    ],
    "edges": [
        {
            "id": "e1",
            "sourceNodeId": "agent",
            "targetNodeId": "tools",
            "conditionType": "CONDITIONAL",
            "conditionValue": "tool_call",
        },
        {"id": "e2", "sourceNodeId": "tools", "targetNodeId": "agent", "conditionType": "ALWAYS"},
        {
            "id": "e3",
            "sourceNodeId": "agent",
            "targetNodeId": None,
            "conditionType": "CONDITIONAL",
            "conditionValue": "done",
        },
    ],
}


def test_graph_workflow_shape_has_start_end_and_its_cycle() -> None:
    """A seed-000 graph draws START, its nodes and END, every edge with its condition, the cycle included."""
    shape = definition_shape(GRAPH)
    assert shape.nodes == ["START", "agent", "tools", "END"]
    labels = {(e.source, e.target): e.label for e in shape.edges}
    assert labels == {
        ("START", "agent"): "",
        ("agent", "tools"): "tool_call",
        ("tools", "agent"): "always",
        ("agent", "END"): "done",
    }
    view = graph_view(shape, {})
    assert any(back for _, _, _, back, _ in view.edges)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["completed", "completed"], "completed"),
        (["completed", "failed", "running"], "failed"),
        (["completed", "running"], "running"),
        (["completed", "skipped"], "completed"),
    ],
)
def test_node_state_of_many_instances_shows_what_needs_attention(statuses: list[str], expected: str) -> None:
    """Map items of one node: failed beats running beats done; the instance count is kept."""
    records = {f"m[{i}]/work": {"node_id": "work", "status": s, "attempt": i + 1} for i, s in enumerate(statuses)}
    assert node_states(records)["work"] == (expected, len(statuses), len(statuses))


def test_graph_view_marks_nodes_without_a_record_as_not_run() -> None:
    """Nodes not started yet are drawn with the state ``not run``; the others with their record's state."""
    shape = definition_shape(yaml.safe_load(REFUND))
    view = graph_view(shape, {"propose": ("completed", 1, 1), "review": ("paused", 0, 1)})
    states = {n.id: n.state for n in view.nodes}
    assert states["propose"] == "completed"
    assert states["review"] == "paused"
    assert states["done"] == "not run"
    assert all(n.width > 0 and n.x >= 0 for n in view.nodes)


SHIPPED = sorted((Path(__file__).parents[3] / "workflows").glob("*.*"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_edge_labels_overlap_no_label_and_no_node_and_fit_the_picture(path: Path) -> None:
    """Every shipped workflow: no two label boxes intersect, no label covers a node, all inside the picture."""
    data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    view = graph_view(definition_shape(data), None)
    labels = [label for _, label, _, _, _ in view.edges if label is not None]
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            assert not a.hits((b.x, b.y, b.width, b.height)), (path.name, a, b)
        for n in view.nodes:
            assert not a.hits((n.x, n.y, n.width, n.height)), (path.name, a, n.id)
        assert min(a.x, a.y) >= 0, (path.name, a)
        assert a.x + a.width <= view.width, (path.name, a)
        assert a.y + a.height <= view.height, (path.name, a)


def test_a_switch_with_three_labelled_edges_keeps_its_labels_apart() -> None:
    """The labels of a switch's three edges (each long) do not sit on top of each other."""
    switch = {
        "name": "sw",
        "nodes": [
            {"id": "pick", "type": "switch", "cases": [
                {"condition": "{{workflow.input.kind}} == 'refund request of a customer'", "node": "a"},
                {"condition": "{{workflow.input.kind}} == 'exchange request of a customer'", "node": "b"},
            ], "default": "c"},
            {"id": "a", "type": "agent", "agent_name": "x", "depends_on": ["pick"]},
            {"id": "b", "type": "agent", "agent_name": "x", "depends_on": ["pick"]},
            {"id": "c", "type": "agent", "agent_name": "x", "depends_on": ["pick"]},
        ],
    }  # fmt: skip
    view = graph_view(definition_shape(switch), None)
    labels = [label for _, label, _, _, _ in view.edges if label is not None]
    assert len(labels) == 3
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            assert not a.hits((b.x, b.y, b.width, b.height)), (a, b)


def test_graph_nodes_show_their_names_and_edges_to_a_missing_node_dangle() -> None:
    """2nChat: nodes named Router, RC2…; the undefined node-uuid-6 is drawn, marked, with its three edges."""
    data = json.loads((Path(__file__).parents[3] / "workflows" / "2nchat.json").read_text())
    view = graph_view(definition_shape(data), None)
    names = {n.id: n.name for n in view.nodes}
    assert names["node-uuid-1"] == "Router"
    assert names["node-uuid-2"] == "RC2"
    missing = [n for n in view.nodes if n.state == "missing"]
    assert [n.id for n in missing] == ["node-uuid-6"]
    dangling = [label.text for _, label, dashed, _, dangling in view.edges if dangling and label and dashed]
    assert sorted(dangling) == ["externalSearchCaller", "external_research", "tool_executor"]
