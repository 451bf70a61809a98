"""What a workflow's own MCP server lists, and how ``mcpExport`` reaches a workflow's card."""

from __future__ import annotations

import pytest

from a2amesh.errors import ConfigError
from a2amesh.executor.cards import workflow_card
from a2amesh.mcp_server.catalog import exported
from a2amesh.mcp_server.workflow_servers import callees_of
from a2amesh.workflow.loader import load_data


def test_callees_of_a_dag_and_a_graph() -> None:
    """Agent nodes, sub-workflow nodes and fork branches of a DAG; AGENT nodes of a graph (mapped names)."""
    dag = load_data(
        {
            "name": "outer",
            "nodes": [
                {"id": "a", "type": "agent", "agent_name": "fetch"},
                {"id": "s", "type": "workflow", "workflow_name": "inner", "depends_on": ["a"]},
                {"id": "f", "type": "fork", "branches": [{"id": "q", "agent_name": "score"}]},
            ],
        }
    )[0]
    card = workflow_card("outer", dag.definition, "ns", digest=dag.digest)
    assert callees_of(card) == {"fetch", "inner", "score"}
    graph = load_data(
        {"id": "g", "entrypointNodeId": "a", "nodes": [{"id": "a", "type": "AGENT", "agentId": "Foo Bar"}], "edges": []}
    )[0]
    assert callees_of(workflow_card("g", graph.definition, "ns", digest=graph.digest)) == {"Foo_Bar"}


def test_mcp_export_of_a_workflow_file_reaches_its_card() -> None:
    """A top-level mcpExport is a setting, not a field of the definition; the card carries it."""
    block = {"name": "quiet", "nodes": [{"id": "a", "type": "agent", "agent_name": "x"}]}
    (hidden,) = load_data({**block, "mcpExport": False})
    (shown,) = load_data(block)
    assert hidden.mcp_export is False
    assert shown.mcp_export is True
    assert hidden.digest == shown.digest
    assert not exported(workflow_card("quiet", hidden.definition, "ns", digest=hidden.digest, mcp_export=False))
    assert exported(workflow_card("quiet", shown.definition, "ns", digest=shown.digest))
    with pytest.raises(ConfigError, match="mcpExport must be true or false"):
        load_data({**block, "mcpExport": "no"})
