"""Solace Agent Mesh compatibility (compat/README.md) and the file loader.

Every ``workflow:`` block of every example in ``../shared/compat/sam/`` loads unchanged, named by
``app_config.name``, and validates without errors.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from a2amesh.errors import ConfigError, DefinitionError
from a2amesh.workflow.dag.nodes import AgentNode, LoopNode, MapNode
from a2amesh.workflow.loader import (
    LoadedWorkflow,
    check_file,
    declared_agents,
    load_data,
    load_file,
    load_workflow,
    read_document,
)
from a2amesh.workflow.mermaid import to_mermaid

COMPAT = Path(__file__).resolve().parents[3].parent / "shared" / "compat" / "sam"
WORKFLOW_FILES = sorted(p for p in COMPAT.glob("*.yaml") if p.name != "shared_config.yaml")

EXPECTED_NAMES = {
    "all_node_types_workflow.yaml": ["CompleteOrderWorkflow", "SimpleLoopWorkflow"],
    "complex_branching_workflow.yaml": ["ComplexBranchingWorkflow"],
    "jira_bug_triage_workflow.yaml": ["JiraBugTriageWorkflow"],
    "level1_simple_sequential.yaml": ["SimpleSequentialWorkflow"],
    "level2_parallel_execution.yaml": ["ParallelExecutionWorkflow"],
    "level3_conditional_branching.yaml": ["ConditionalBranchingWorkflow"],
    "level4_map_iteration.yaml": ["MapIterationWorkflow"],
    "level5_loop_polling.yaml": ["LoopPollingWorkflow"],
    "level6_workflow_composition.yaml": ["DataProcessingSubWorkflow", "WorkflowCompositionParent"],
    "level7_error_handling.yaml": ["ErrorHandlingWorkflow"],
    "simple_nested_test.yaml": ["SimpleChildWorkflow", "SimpleParentWorkflow"],
    "workflow_to_workflow_example.yaml": [
        "StatisticalAnalysisWorkflow",
        "ReportGenerationWorkflow",
        "DataAnalysisPipeline",
    ],
}


@functools.cache
def _known_agents() -> frozenset[str]:
    known: set[str] = set()
    for path in WORKFLOW_FILES:
        data, _ = read_document(path)
        known |= declared_agents(data)
    return frozenset(known)


def test_every_example_is_covered() -> None:
    """The corpus is present and every file in it is listed here."""
    assert {p.name for p in WORKFLOW_FILES} == set(EXPECTED_NAMES)


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_every_workflow_block_loads_and_validates(path: Path) -> None:
    """Each workflow app loads unchanged, named by app_config.name, with no error (warnings allowed)."""
    checked = check_file(path, known_agents=_known_agents())
    assert [c.name for c in checked] == EXPECTED_NAMES[path.name]
    for item in checked:
        assert item.report.errors == (), [str(e) for e in item.report.errors]
        assert item.definition is not None
        assert item.definition.name == item.name
        assert all(w.field == "!include" or "alias" in w.problem for w in item.report.warnings), [
            str(w) for w in item.report.warnings
        ]
    loaded = load_file(path)
    assert [w.name for w in loaded] == EXPECTED_NAMES[path.name]
    assert all(w.source == path for w in loaded)
    for workflow in loaded:
        assert to_mermaid(workflow.definition).startswith("flowchart TD")


def test_missing_include_is_tolerated_and_reported() -> None:
    """The examples include ../shared_config.yaml, absent here: it loads as empty, with warnings."""
    (first, *_) = load_file(COMPAT / "level1_simple_sequential.yaml")
    problems = [w.problem for w in first.warnings]
    assert any("../shared_config.yaml: not found" in p for p in problems)
    assert any("alias *broker_connection has no anchor" in p for p in problems)


def test_file_with_several_workflows() -> None:
    """A SAM file with several workflow apps yields all of them; name picks one."""
    path = COMPAT / "workflow_to_workflow_example.yaml"
    assert len(load_file(path)) == 3
    (pipeline,) = load_file(path, name="DataAnalysisPipeline")
    assert isinstance(pipeline, LoadedWorkflow)
    assert pipeline.definition.node("run_statistical_analysis").type == "workflow"
    assert load_workflow(path, name="ReportGenerationWorkflow").name == "ReportGenerationWorkflow"
    with pytest.raises(ConfigError, match="3 workflows found"):
        load_workflow(path)
    with pytest.raises(ConfigError, match="no workflow named 'Nope'"):
        load_file(path, name="Nope")


def test_sam_app_settings_become_defaults() -> None:
    """max_workflow_execution_time_seconds and default_node_timeout_seconds fill unset timeouts."""
    (workflow,) = load_file(COMPAT / "level1_simple_sequential.yaml")
    assert workflow.definition.timeout == 300
    assert workflow.definition.node("double_value").timeout == 60
    (mapper,) = load_file(COMPAT / "level4_map_iteration.yaml")
    node = mapper.definition.node("process_items")
    assert isinstance(node, MapNode)
    assert node.concurrency_limit == 5


def test_level_semantics_are_modelled() -> None:
    """The SAM levels' features land where the engine expects them."""
    (loop,) = load_file(COMPAT / "level5_loop_polling.yaml")
    assert isinstance(loop, LoadedWorkflow)
    poll = loop.definition.node("poll_status")
    assert isinstance(poll, LoopNode)
    assert poll.delay == 1.0
    assert poll.max_iterations == 10
    assert loop.definition.inner_node_ids() == {"check_status"}
    (errors,) = load_file(COMPAT / "level7_error_handling.yaml")
    assert isinstance(errors, LoadedWorkflow)
    handlers = errors.definition.exit_handlers
    assert handlers.handlers_for("success") == ["success_handler", "cleanup_handler"]
    assert handlers.handlers_for("failure") == ["failure_handler", "cleanup_handler"]
    assert errors.definition.dag_node_ids() == ("execute_operation",)
    (branching,) = load_file(COMPAT / "level3_conditional_branching.yaml")
    assert isinstance(branching, LoadedWorkflow)
    assert branching.definition.routers_of("handle_medium") == ("route_by_category",)


def test_unknown_agents_are_only_warnings() -> None:
    """Without the example agents known, every agent reference is a warning, never an error."""
    checked = check_file(COMPAT / "level3_conditional_branching.yaml", known_agents=set())
    (item,) = checked
    assert item.report.errors == ()
    assert {w.node_id for w in item.report.warnings if w.field == "agent_name"} == {
        "classify",
        "handle_small",
        "handle_medium",
        "handle_large",
    }


# --- the loader on its own -------------------------------------------------------------------


def test_include_is_expanded(tmp_path: Path) -> None:
    """A present include is pasted in, so its anchors serve the including file; includes nest."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "base.yaml").write_text("defaults:\n  retry: &retry {limit: 2}\n!include more.yaml\n")
    (tmp_path / "common" / "more.yaml").write_text("more:\n  timeout: &t 30s\n")
    (tmp_path / "flow.yaml").write_text(
        "!include common/base.yaml\n"
        "apps:\n"
        "  - name: x\n"
        "    app_module: solace_agent_mesh.workflow.app\n"
        "    app_config:\n"
        "      name: Flow\n"
        "      workflow:\n"
        "        nodes:\n"
        "          - {id: a, type: agent, agent_name: A, retryStrategy: *retry, timeout: *t}\n"
    )
    (flow,) = load_file(tmp_path / "flow.yaml")
    node = flow.definition.node("a")
    assert isinstance(node, AgentNode)
    assert node.retry_strategy is not None
    assert node.retry_strategy.limit == 2
    assert node.timeout == 30
    assert flow.warnings == ()


def test_inline_include_tag(tmp_path: Path) -> None:
    """key: !include file loads that file as the value; a missing one is null with a warning."""
    (tmp_path / "schema.yaml").write_text("type: object\nproperties: {x: {type: number}}\n")
    (tmp_path / "flow.yaml").write_text(
        "name: flow\ninput_schema: !include schema.yaml\noutput_schema: !include gone.yaml\n"
        "nodes: [{id: a, type: agent, agent_name: A}]\n"
    )
    (flow,) = load_file(tmp_path / "flow.yaml")
    assert flow.definition.input_schema == {"type": "object", "properties": {"x": {"type": "number"}}}
    assert flow.definition.output_schema is None
    assert any("gone.yaml: not found" in w.problem for w in flow.warnings)


def test_bare_block_names(tmp_path: Path) -> None:
    """A bare block is named by the argument, else its name field, else the file stem."""
    (tmp_path / "stem-name.yaml").write_text("nodes: [{id: a, type: agent, agent_name: A}]\n")
    (tmp_path / "named.yaml").write_text("name: Named\nnodes: [{id: a, type: agent, agent_name: A}]\n")
    assert load_workflow(tmp_path / "stem-name.yaml").name == "stem-name"
    assert load_workflow(tmp_path / "named.yaml").name == "Named"
    assert load_workflow(tmp_path / "named.yaml", name="Other").definition.name == "Other"
    block = {"nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]}
    with pytest.raises(ConfigError, match="has no name"):
        load_data(block)
    assert load_data(block, name="given")[0].name == "given"
    assert load_data({"name": "AppOnly", "workflow": block})[0].name == "AppOnly"
    with pytest.raises(ConfigError, match="must match"):
        load_data(block, name="bad name")


def test_json_file(tmp_path: Path) -> None:
    """JSON definitions load like YAML ones; JSON errors give line and column."""
    (tmp_path / "flow.json").write_text(
        json.dumps({"name": "j", "nodes": [{"id": "a", "type": "agent", "agentName": "A"}]})
    )
    assert load_workflow(tmp_path / "flow.json").definition.node("a").agent_name == "A"
    (tmp_path / "bad.json").write_text('{"name": "j",\n "nodes": [}')
    with pytest.raises(ConfigError, match="JSON error at line 2"):
        load_file(tmp_path / "bad.json")


def test_file_errors(tmp_path: Path) -> None:
    """Unreadable files, YAML errors and non-workflows get one clear line."""
    with pytest.raises(ConfigError, match="file not found"):
        load_file(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("name: x\nnodes: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: YAML error at line \d+, column \d+"):
        load_file(tmp_path / "bad.yaml")
    (tmp_path / "graph.yaml").write_text("entrypointNodeId: a\nnodes: []\nedges: []\n")
    with pytest.raises(ConfigError, match="graph workflow"):
        load_file(tmp_path / "graph.yaml")
    (tmp_path / "other.yaml").write_text("hello: world\n")
    with pytest.raises(ConfigError, match="no workflow found"):
        load_file(tmp_path / "other.yaml")
    (tmp_path / "agents.yaml").write_text("apps: [{name: a, app_module: solace_agent_mesh.agent.sac.app}]\n")
    with pytest.raises(ConfigError, match="no workflow app"):
        load_file(tmp_path / "agents.yaml")


def test_invalid_definition_raises_definition_error(tmp_path: Path) -> None:
    """A definition with errors raises DefinitionError from load_file; check_file keeps every issue."""
    (tmp_path / "flow.yaml").write_text(
        "name: flow\nnodes:\n  - {id: a, type: agent, agent_name: A, depends_on: [b]}\n"
        "  - {id: c, type: agent, agent_name: A, dependson: [a]}\n"
    )
    with pytest.raises(DefinitionError, match=r"flow\.yaml: nodes\[c\]\.dependson: unknown field"):
        load_file(tmp_path / "flow.yaml")
    (checked,) = check_file(tmp_path / "flow.yaml")
    assert checked.definition is None
    assert [e.field for e in checked.report.errors] == ["dependson"]
