"""Graph workflow definitions (SPEC §6): the seed files, both formats, load-time checks, loader, Mermaid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2amesh.errors import ConfigError, DefinitionError
from a2amesh.workflow.dag.validation import InvalidDefinition, Issue
from a2amesh.workflow.formats import DAG, GRAPH, format_of_data, is_graph_document
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.validation import check_graph, parse_graph
from a2amesh.workflow.loader import LoadedGraph, LoadedWorkflow, check_file, load_data, load_file, load_workflow
from a2amesh.workflow.mermaid import graph_to_mermaid, to_mermaid

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT.parent / "shared" / "seeds" / "000_a1b1e415d4235941.txt"
WORKFLOWS = ROOT / "workflows"


def seed_json() -> str:
    text = SEED.read_text(encoding="utf-8")
    return text.split("```json\n", 1)[1].split("```", 1)[0]


def problems(data: dict[str, Any]) -> tuple[list[Issue], list[Issue]]:
    _, report = check_graph(data)
    return list(report.errors), list(report.warnings)


def only_error(data: dict[str, Any]) -> Issue:
    errors, _ = problems(data)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def base(**extra: Any) -> dict[str, Any]:
    conditional = {"conditionType": "CONDITIONAL"}
    data: dict[str, Any] = {
        "entrypointNodeId": "a",
        "nodes": [
            {"id": "a", "nodeType": "AGENT", "agentId": "A"},
            {"id": "t", "nodeType": "TOOL_EXECUTOR", "agentId": None},
        ],
        "edges": [
            {"id": "e1", "sourceNodeId": "a", "targetNodeId": "t", **conditional, "conditionValue": "t"},
            {"id": "e2", "sourceNodeId": "a", "targetNodeId": None, **conditional, "conditionValue": "END"},
        ],
    }
    data.update(extra)
    return data


# --- the seed --------------------------------------------------------------------------------


def test_workflows_ship_the_seed_json_byte_for_byte() -> None:
    """workflows/2nchat.json is exactly the JSON block of seed 000."""
    assert (WORKFLOWS / "2nchat.json").read_bytes() == seed_json().encode("utf-8")


def test_seed_loads_unchanged_with_warnings_for_the_undefined_node() -> None:
    """The seed's 2nChat loads; the three edges touching node-uuid-6 are one warning naming each edge, and the
    router is not offered the route to it."""
    definition, report = check_graph(json.loads(seed_json()))
    assert report.ok
    assert definition is not None
    (warning,) = report.warnings
    assert warning.field == "edges[edge-uuid-15]"
    assert "node 'node-uuid-6' is not among the nodes; edges edge-uuid-15, edge-uuid-16, edge-uuid-17" in str(warning)
    assert definition.allowed_next("node-uuid-1") == ["RC2", "DM2", "2N", "tool_executor", "END"]
    assert definition.is_conversational
    assert definition.entry == "node-uuid-1"
    assert definition.format == "graph"
    assert definition.node("node-uuid-1").agent == "agent-uuid-router"
    assert definition.node("node-uuid-5").node_type == "TOOL_EXECUTOR"
    assert definition.effective_step_limit == 15
    assert definition.timeout == 90
    assert definition.allowed_next("node-uuid-2") == ["Router", "tool_executor", "END"]
    assert definition.always_edge("node-uuid-5") is not None
    assert definition.limit_action("stepLimit") == "fail"


def test_variant_resolves_every_edge() -> None:
    """2nchat_with_search.json defines node-uuid-6, so it loads without a warning."""
    (loaded,) = load_file(WORKFLOWS / "2nchat_with_search.json")
    assert isinstance(loaded, LoadedGraph)
    assert loaded.warnings == ()
    assert loaded.name == "2nChatWithSearch"
    assert loaded.definition.node("node-uuid-6").name == "externalSearchCaller"
    assert loaded.definition.conditional_edge("node-uuid-5", "external_research") is not None


def test_round_trip_and_digest_ignore_spelling() -> None:
    """to_data() loads back to the same definition; camelCase and snake_case give one digest."""
    definition, _ = parse_graph(json.loads(seed_json()))
    again, _ = parse_graph(definition.to_data())
    assert again == definition
    assert again.digest() == definition.digest()
    snake = {"entrypoint_node_id": "a", "nodes": [{"id": "a", "node_type": "agent", "agent_id": "A"}], "edges": []}
    camel = {"entrypointNodeId": "a", "nodes": [{"id": "a", "nodeType": "AGENT", "agentId": "A"}], "edges": []}
    assert parse_graph(snake)[0].digest() == parse_graph(camel)[0].digest()


# --- formats ---------------------------------------------------------------------------------


SIMPLE = {
    "nodes": [
        {"id": "a1", "type": "agent", "config": {"agentId": "<agent-1-id>", "temperature": 0.2}},
        {"id": "a2", "type": "agent", "config": {"agentId": "<agent-2-id>"}},
    ],
    "edges": [{"id": "e1", "from": "a1", "to": "a2"}, {"id": "e2", "from": "a2", "to": "a1"}],
    "maxRounds": 10,
}


def test_simple_format_normalises() -> None:
    """Seed 003's format: config.agentId, from/to edges (ALWAYS), inferred entry, sanitised agent names."""
    definition, report = parse_graph(SIMPLE)
    assert report.issues == ()
    assert definition.format == "simple"
    assert definition.entry == "a1"
    assert definition.node("a1").agent == "_agent-1-id_"
    assert definition.node("a1").config == {"temperature": 0.2}
    assert [(e.source_node_id, e.target_node_id, e.condition_type) for e in definition.edges] == [
        ("a1", "a2", "ALWAYS"),
        ("a2", "a1", "ALWAYS"),
    ]
    assert definition.max_rounds == 10
    assert definition.effective_step_limit == 20
    assert definition.limit_action("maxRounds") == "end"
    assert definition.limit_action("stepLimit") == "fail"


def test_simple_entry_is_the_first_node_nothing_enters() -> None:
    """Without entrypointNodeId the simple format starts at the first node no edge enters."""
    data = {"nodes": [{"id": "b", "config": {"agentId": "B"}}, {"id": "a", "config": {"agentId": "A"}}],
            "edges": [{"from": "a", "to": "b"}]}  # fmt: skip
    definition, _ = parse_graph(data)
    assert definition.entry == "a"
    assert definition.edges[0].id == "#0"


def test_agents_table_maps_agent_ids() -> None:
    """The agents: table maps an agentId to a mesh agent; its values must be agent names."""
    definition, _ = parse_graph(base(agents={"A": "router_agent"}))
    assert definition.node("a").agent == "router_agent"
    error = only_error(base(agents={"A": "not valid!"}))
    assert error.field == "agents.A"
    assert "must match" in error.problem


def test_branches_inherit_settings_and_carry_schedules() -> None:
    """Branches are graphs of their own with mode and schedule; they inherit agents, guards and timeout."""
    data = {
        "agents": {"X": "x_agent"},
        "timeout": "2m",
        "branches": [
            {"id": "daily", "nodes": [{"id": "n", "config": {"agentId": "X"}}], "edges": [],
             "executionMode": "interval", "schedule": "Daily@9:30"},
            {"id": "loop", "nodes": [{"id": "m", "config": {"agentId": "Y"}}], "edges": [],
             "executionMode": "continuous"},
            {"id": "once", "nodes": [{"id": "o", "config": {"agentId": "Z"}}], "edges": []},
        ],
    }  # fmt: skip
    definition, report = parse_graph(data)
    assert report.issues == ()
    daily = definition.branch("daily")
    assert daily.node("n").agent == "x_agent"
    assert daily.timeout == 120
    assert daily.schedule == "daily@09:30"
    assert [b for b, _ in definition.scheduled()] == ["daily", "loop"]
    assert definition.branch("loop").schedule_spec().describe() == "continuously, 5 s after each run"
    with pytest.raises(KeyError, match="no branch 'nope'"):
        definition.branch("nope")


# --- load-time checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "node_id", "field", "words"),
    [
        (
            {"nodes": [{"id": "a", "nodeType": "AGENTT", "agentId": "A"}]},
            "a",
            "nodeType",
            ["'AGENTT'", "did you mean 'AGENT'"],
        ),
        ({"nodes": [{"id": "a", "nodeName": "x"}]}, "a", "nodeType", ["is required"]),
        ({"nodes": [{"id": "a", "nodeType": "AGENT"}]}, "a", "agentId", ["needs agentId"]),
        ({"entrypointNodeId": None}, "", "entrypointNodeId", ["is required"]),
        ({"entrypointNodeId": "zz"}, "", "entrypointNodeId", ["'zz' is not among the nodes"]),
        ({"entrypointNodeId": "t"}, "", "entrypointNodeId", ["must be an AGENT node"]),
        ({"stepLimit": 0}, "", "stepLimit", ["greater than or equal to 1"]),
        ({"timeout": "soon"}, "", "timeout", ["invalid duration"]),
        ({"onLimit": "t"}, "", "onLimit", ["TOOL_EXECUTOR node", "HUMAN_HANDOFF"]),
        ({"onLimit": {"steps": "fail"}}, "", "onLimit.steps", ["unknown guard"]),
        ({"executionMode": "interval"}, "", "schedule", ["needs a schedule"]),
        ({"executionMode": "sometimes"}, "", "executionMode", ["unknown execution mode"]),
        ({"executionMode": "interval", "schedule": "weekly@8"}, "", "schedule", ["day '8' is not 0–6"]),
        ({"nodes": []}, "", "nodes", ["needs at least one node"]),
    ],
)
def test_errors_name_node_and_field(change: dict[str, Any], node_id: str, field: str, words: list[str]) -> None:
    """Each kind of definition error names the node (if any) and the field."""
    data = base(**change)
    if "nodes" in change and change["nodes"]:
        data["nodes"] = change["nodes"] + base()["nodes"][1:]
    if change.get("nodes") == []:
        data["edges"] = []
        del data["entrypointNodeId"]
    errors, _ = problems(data)
    assert errors, "expected an error"
    first = errors[0]
    assert (first.node_id, first.field) == (node_id, field), str(first)
    for word in words:
        assert word in str(first), str(first)


def test_duplicate_ids_and_ambiguous_edges_are_errors() -> None:
    """Duplicate node/edge ids, two edges on one value and two ALWAYS edges of one node are refused."""
    data = base()
    data["nodes"].append({"id": "a", "nodeType": "AGENT", "agentId": "B"})
    data["edges"] += [
        {"id": "e1", "sourceNodeId": "t", "targetNodeId": "a"},
        {"id": "e3", "sourceNodeId": "a", "targetNodeId": None, "conditionValue": "END"},
        {"id": "e4", "sourceNodeId": "t", "targetNodeId": "a", "conditionType": "ALWAYS"},
        {"id": "e5", "sourceNodeId": "a", "targetNodeId": "t", "conditionType": "CONDITIONAL"},
    ]
    errors, _ = problems(data)
    texts = [str(e) for e in errors]
    assert any(e.node_id == "a" and e.field == "id" and "duplicate node id" in e.problem for e in errors), texts
    assert any(e.field == "edges[e1].id" for e in errors), texts
    assert any(
        e.field == "edges[e3].conditionValue" and "already has an edge on 'END' (e2)" in e.problem for e in errors
    )
    assert any(e.field == "edges[e4].conditionType" and "already has an ALWAYS edge" in e.problem for e in errors)
    assert any(e.field == "edges[e5].conditionValue" and "needs a conditionValue" in e.problem for e in errors)


def test_warnings_do_not_block() -> None:
    """Unknown fields, unknown agents and conversational agents without END edges are warnings."""
    data = base(isConversational=True, stepLimt=3)
    data["nodes"].append({"id": "b", "nodeType": "AGENT", "agentId": "B", "colour": "red"})
    definition, report = check_graph(data, known_agents={"A"})
    assert report.ok
    assert definition is not None
    texts = [str(w) for w in report.warnings]
    assert any("stepLimt" in t and "did you mean 'stepLimit'" in t for t in texts), texts
    assert any("nodes[b].colour" in t for t in texts), texts
    assert any("nodes[b].agentId" in t and "unknown agent 'B'" in t for t in texts), texts
    assert any("nodes[b].edges" in t and "no END edge" in t for t in texts), texts


def test_branch_errors_name_the_branch() -> None:
    """Problems inside a branch are located as branches[id].nodes[node].field."""
    data = {"branches": [{"id": "b1", "nodes": [{"id": "x", "nodeType": "ROBOT"}], "edges": []}, {"id": "main"}]}
    errors, _ = problems(data)
    fields = [e.field for e in errors]
    assert "branches[b1].nodes[x].nodeType" in fields
    assert "branches[main].id" in fields


def test_parse_graph_raises_definition_error() -> None:
    """parse_graph raises InvalidDefinition (a DefinitionError) naming node and field of the first error."""
    with pytest.raises(InvalidDefinition) as caught:
        parse_graph(base(nodes=[{"id": "a", "nodeType": "ROBOT"}]), source="g.json")
    assert isinstance(caught.value, DefinitionError)
    assert str(caught.value).startswith("g.json: nodes[a].nodeType: unknown node type 'ROBOT'")


# --- loader and Mermaid ----------------------------------------------------------------------


def test_loader_recognises_graph_documents(tmp_path: Path) -> None:
    """load_file/load_data/load_workflow return a LoadedGraph for graph documents and still load DAGs."""
    assert is_graph_document(json.loads(seed_json()))
    assert is_graph_document(SIMPLE)
    assert not is_graph_document({"nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]})
    (seed,) = load_file(WORKFLOWS / "2nchat.json")
    assert isinstance(seed, LoadedGraph)
    assert seed.name == "2nChat"
    assert len(seed.warnings) == 1  # one per undefined node
    (tmp_path / "two-agents.yaml").write_text(json.dumps(SIMPLE))
    loaded = load_workflow(tmp_path / "two-agents.yaml")
    assert isinstance(loaded, LoadedGraph)
    assert loaded.name == "two-agents"
    assert loaded.definition.name == "two-agents"
    assert load_data(SIMPLE, name="given")[0].name == "given"
    (dag,) = load_data({"name": "d", "nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]})
    assert isinstance(dag, LoadedWorkflow)
    (tmp_path / "bad.json").write_text(json.dumps(base(nodes=[{"id": "a", "nodeType": "ROBOT"}])))
    with pytest.raises(DefinitionError, match=r"bad\.json: nodes\[a\]\.nodeType"):
        load_file(tmp_path / "bad.json")
    (checked,) = check_file(tmp_path / "bad.json")
    assert checked.definition is None
    assert checked.report.errors[0].node_id == "a"
    with pytest.raises(ConfigError, match="must match"):
        load_data({**SIMPLE, "name": "two agents"})


def test_mermaid_draws_graphs() -> None:
    """Mermaid output labels edges with their values, draws END and marks undefined nodes."""
    definition, _ = parse_graph(json.loads(seed_json()))
    text = to_mermaid(definition)
    assert text == graph_to_mermaid(definition)
    assert text.startswith("flowchart TD\n")
    assert 'n_node_uuid_1["Router<br/>agent: agent-uuid-router"]' in text
    assert 'n_node_uuid_5{{"tool_executor<br/>tool executor"}}' in text
    assert 'n_node_uuid_1 -- "END" --> g_end' in text
    assert 'n_node_uuid_5 -- "always" --> n_node_uuid_1' in text
    assert 'n_node_uuid_6["node-uuid-6<br/>(not defined)"]:::missing' in text
    assert 'n_node_uuid_5 -. "external_research" .-> n_node_uuid_6' in text
    branches, _ = parse_graph({"branches": [{"id": "b1", "nodes": [{"id": "x", "config": {"agentId": "X"}}]}]})
    assert 'subgraph b0_graph["branch b1"]' in graph_to_mermaid(branches, direction="LR")


def test_graph_definition_is_frozen() -> None:
    """Definitions are immutable values (engines share them between executions)."""
    definition, _ = parse_graph(base())
    assert isinstance(definition, GraphDefinition)
    with pytest.raises(ValueError, match="frozen"):
        definition.timeout = 5  # type: ignore[misc]


def test_one_detector_for_documents_and_snapshots() -> None:
    """The registry's one detector gives documents and the snapshots written to Redis (``to_data()``) the same
    format, and each format's engine (the executor's catalog builds engines from snapshots with it)."""
    (graph,) = load_data(SIMPLE, name="g")
    (dag,) = load_data({"name": "d", "nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]})
    for item, kind in ((graph, GRAPH), (dag, DAG)):
        assert item.format is kind
        snapshot = item.definition.to_data()
        assert format_of_data(snapshot) is kind
        assert kind.parse(snapshot, "snapshot").digest() == item.digest
        assert kind.engine(item.definition).format == kind.name
    assert format_of_data({"format": "simple", "nodes": []}) is GRAPH
    assert format_of_data({"apps": [], "edges": []}) is DAG  # a SAM file holds DAG workflows
