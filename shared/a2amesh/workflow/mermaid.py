r"""Render a workflow definition as a Mermaid ``flowchart TD`` (``a2amesh graph FILE``).

Shapes by node type: agent ``[rectangle]``, workflow ``[[subroutine]]``, switch and conditional
``{rhombus}``, map ``[/parallelogram/]``, fork ``[\parallelogram\]``, join ``((circle))``,
loop ``{{hexagon}}``, human review ``>flag]``. Solid arrows are dependencies; arrows out of a
switch, conditional or review are labelled with the case that takes them; dotted arrows go from a
map or loop to the node it runs, and from the end of the DAG to the exit handlers.

Graph workflows (SPEC §6) render with :func:`graph_to_mermaid` (``to_mermaid`` picks it for a
:class:`~a2amesh.workflow.graph.definition.GraphDefinition`).
"""

from __future__ import annotations

import re

from a2amesh.diagnostics import shorten
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.nodes import (
    AgentNode,
    BuiltinNode,
    ConditionalNode,
    ForkNode,
    HumanReviewNode,
    JoinNode,
    LoopNode,
    MapNode,
    Node,
    SwitchNode,
    ToolLoopNode,
    WorkflowNode,
)
from a2amesh.workflow.formats import Definition, by_format
from a2amesh.workflow.graph.definition import GraphDefinition

__all__ = ["graph_to_mermaid", "to_mermaid"]

_SHAPES = {
    "agent": ('["', '"]'),
    "workflow": ('[["', '"]]'),
    "switch": ('{"', '"}'),
    "conditional": ('{"', '"}'),
    "map": ('[/"', '"/]'),
    "fork": ('[\\"', '"\\]'),
    "join": ('(("', '"))'),
    "loop": ('{{"', '"}}'),
    "human_review": ('>"', '"]'),
    "prompt": ('["', '"]'),
    "llm": ('(["', '"])'),
    "tools": ('[("', '")]'),
    "tool_loop": ('(["', '"])'),
    "embed": ('[("', '")]'),
    "memory_read": ('[("', '")]'),
    "memory_write": ('[("', '")]'),
    "rag": ('[("', '")]'),
    "image": ('(["', '"])'),
}
_LABEL_LIMIT = 60
_END = "wf_end"


def _escape(text: str) -> str:
    """Make text safe inside a quoted Mermaid label (entity codes for quotes and HTML brackets)."""
    out = text
    for char, code in (('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        out = out.replace(char, code)
    return out.replace("\n", " ")


def _short(text: str) -> str:
    return shorten(text, _LABEL_LIMIT, flat=True)


def _mermaid_ids(definition: WorkflowDefinition) -> dict[str, str]:
    ids: dict[str, str] = {}
    used: set[str] = {_END}
    for node_id in definition.node_ids:
        if node_id in ids:
            continue
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        candidate, suffix = base, 1
        while candidate in used:
            suffix += 1
            candidate = f"{base}_{suffix}"
        used.add(candidate)
        ids[node_id] = candidate
    return ids


def _detail(node: Node) -> str:
    if isinstance(node, AgentNode):
        return f"agent: {node.agent_name}"
    if isinstance(node, WorkflowNode):
        return f"workflow: {node.workflow_name}"
    if isinstance(node, ForkNode):
        return "fork: " + ", ".join(branch.id for branch in node.branches)
    if isinstance(node, JoinNode):
        return f"join {node.strategy}" + (f" {node.n}" if node.n else "")
    if isinstance(node, LoopNode):
        return f"loop ≤ {node.max_iterations}"
    if isinstance(node, MapNode):
        return "map" + (f" ≤ {node.concurrency_limit} at once" if node.concurrency_limit else "")
    if isinstance(node, HumanReviewNode):
        return "human review"
    if isinstance(node, ConditionalNode):
        return "if " + _short(node.condition)
    if isinstance(node, SwitchNode):
        return "switch"
    if isinstance(node, ToolLoopNode):
        return f"tool loop: {len(node.tools)} tool(s)"
    if isinstance(node, BuiltinNode):
        return node.type.replace("_", " ")
    return "prompt"


def _label(node: Node) -> str:
    parts = [_escape(node.id), _escape(_detail(node))]
    if node.when is not None:
        parts.append(_escape("when " + _short(node.when)))
    return "<br/>".join(parts)


def _branch_labels(node: Node) -> dict[str, list[str]]:
    """Map each target id to the labels of the edges that lead there from a router."""
    labels: dict[str, list[str]] = {}
    if isinstance(node, SwitchNode):
        for case in node.cases:
            labels.setdefault(case.node, []).append(_short(case.condition))
        if node.default is not None:
            labels.setdefault(node.default, []).append("default")
    elif isinstance(node, ConditionalNode):
        labels.setdefault(node.true_branch, []).append("true")
        if node.false_branch is not None:
            labels.setdefault(node.false_branch, []).append("false")
    elif isinstance(node, HumanReviewNode) and node.on_reject != "fail":
        labels.setdefault(node.on_reject, []).append("rejected")
    return labels


def to_mermaid(definition: Definition, *, direction: str = "TD") -> str:
    """Render a definition as Mermaid flowchart source.

    Args:
        definition: the workflow (it need not be valid: edges to unknown nodes are left out), or a
            graph workflow (see :func:`graph_to_mermaid`).
        direction: ``TD`` (top-down, the default) or ``LR``.

    Returns:
        The Mermaid text, ending with a newline.
    """
    return by_format(
        definition,
        dag=lambda d: _dag_to_mermaid(d, direction=direction),
        graph=lambda g: graph_to_mermaid(g, direction=direction),
    )


def _dag_to_mermaid(definition: WorkflowDefinition, *, direction: str) -> str:
    ids = _mermaid_ids(definition)
    lines = [f"flowchart {direction}"]
    drawn: set[str] = set()
    for node in definition.nodes:
        if node.id in drawn:
            continue
        drawn.add(node.id)
        opening, closing = _SHAPES[node.type]
        lines.append(f"    {ids[node.id]}{opening}{_label(node)}{closing}")
    labelled: set[tuple[str, str]] = set()
    for node in definition.nodes:
        for target, texts in _branch_labels(node).items():
            if target in ids:
                text = _escape(" / ".join(texts))
                lines.append(f'    {ids[node.id]} -- "{text}" --> {ids[target]}')
                labelled.add((node.id, target))
    for node in definition.nodes:
        for dep in node.dependencies:
            if dep in ids and (dep, node.id) not in labelled:
                lines.append(f"    {ids[dep]} --> {ids[node.id]}")
        if isinstance(node, MapNode | LoopNode) and node.node in ids:
            text = "each item" if isinstance(node, MapNode) else "repeat while " + _short(node.condition)
            lines.append(f'    {ids[node.id]} -. "{_escape(text)}" .-> {ids[node.node]}')
    lines.extend(_exit_lines(definition, ids))
    return "\n".join(lines) + "\n"


def _exit_lines(definition: WorkflowDefinition, ids: dict[str, str]) -> list[str]:
    handlers = [(name, node_id) for name, node_id in definition.exit_handlers.items() if node_id in ids]
    if not handlers:
        return []
    lines = [f'    {_END}(["end"])']
    dag = definition.dag_node_ids()
    depended = {dep for node_id in dag for dep in definition.node(node_id).dependencies}
    lines.extend(f"    {ids[node_id]} -.-> {_END}" for node_id in dag if node_id not in depended)
    lines.extend(f'    {_END} -. "{name}" .-> {ids[node_id]}' for name, node_id in handlers)
    return lines


# --- graph workflows ---------------------------------------------------------------------------------

_GRAPH_SHAPES: dict[str, tuple[str, str]] = {
    "AGENT": ('["', '"]'),
    "TOOL_EXECUTOR": ('{{"', '"}}'),
    "HUMAN_HANDOFF": ('>"', '"]'),
}


def _graph_lines(definition: GraphDefinition, tag: str, indent: str) -> list[str]:
    def mid(node_id: str) -> str:
        return f"{tag}n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)

    # "end" is a Mermaid keyword: never use it as an id.
    lines = [f'{indent}{tag}g_start(["start"])', f'{indent}{tag}g_end(["END"])']
    for node in definition.nodes:
        opening, closing = _GRAPH_SHAPES[node.node_type]
        detail = {"AGENT": f"agent: {node.agent}", "TOOL_EXECUTOR": "tool executor", "HUMAN_HANDOFF": "human handoff"}
        label = "<br/>".join(_escape(t) for t in (node.name, detail[node.node_type]))
        lines.append(f"{indent}{mid(node.id)}{opening}{label}{closing}")
    ends = {e.source_node_id for e in definition.edges} | {e.target_node_id for e in definition.edges}
    missing = sorted(i for i in ends if i is not None and not definition.has_node(i))
    for node_id in missing:
        lines.append(f'{indent}{mid(node_id)}["{_escape(node_id)}<br/>(not defined)"]:::missing')
    if definition.entry is not None:
        lines.append(f"{indent}{tag}g_start --> {mid(definition.entry)}")
    for edge in definition.edges:
        target = f"{tag}g_end" if edge.target_node_id is None else mid(edge.target_node_id)
        text = _escape("always" if edge.condition_type == "ALWAYS" else (edge.condition_value or ""))
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
        lines.extend(_graph_lines(definition, "", "    "))
    for index, branch in enumerate(definition.branches):
        tag = f"b{index}_"
        lines.append(f'    subgraph {tag}graph["branch {_escape(branch.id or str(index))}"]')
        lines.extend(_graph_lines(branch, tag, "        "))
        lines.append("    end")
    lines.append("    classDef missing stroke-dasharray: 5 5")
    return "\n".join(lines) + "\n"
